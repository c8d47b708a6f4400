"""lsmlake: Paimon-format table storage, compaction and ingestion.

`import lsmlake` loads nothing heavy: `lsmlake.Client` (gRPC) is imported on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from lsmlake.client.client import Client

__all__ = ["Client"]


def __getattr__(name: str) -> Any:
    if name == "Client":
        from lsmlake.client.client import Client

        return Client
    raise AttributeError(f"module 'lsmlake' has no attribute {name!r}")
