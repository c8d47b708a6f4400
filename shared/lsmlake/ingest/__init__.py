"""Decoding Kafka ingestion messages (plain JSON rows, Debezium change events) into Arrow batches."""

from lsmlake.ingest.dead_letter import dead_letter_value
from lsmlake.ingest.decode import DecodeResult, Format, decode_messages, needs_retractions

__all__ = ["DecodeResult", "Format", "dead_letter_value", "decode_messages", "needs_retractions"]
