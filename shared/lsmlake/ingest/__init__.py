"""Rows from outside into Arrow batches of a table: Kafka messages (plain JSON rows, Debezium change events),
WriteRows JSON and the CLI's JSON and CSV files, all through one value conversion (`values`, `decode`); and the
Kafka ingestion progress recorded in snapshots (`kafka_offsets`)."""

from lsmlake.ingest.dead_letter import dead_letter_value
from lsmlake.ingest.decode import DecodeResult, Format, decode_messages, needs_retractions

__all__ = ["DecodeResult", "Format", "dead_letter_value", "decode_messages", "needs_retractions"]
