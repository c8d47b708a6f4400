"""lsmlake: Paimon-format table storage, compaction and ingestion."""

from .client import Client

__all__ = ["Client"]
