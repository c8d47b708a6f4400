"""Rows given as JSON objects (the WriteRows RPC), decoded as Kafka's plain JSON messages are."""

from __future__ import annotations

import pyarrow as pa

from lsmlake.errors import InvalidInputError
from lsmlake.format.schema import TableSchema
from lsmlake.ingest.decode import decode_messages

MAX_REASONS = 5


def rows_from_json(schema: TableSchema, rows_json: list[str], table: str | None = None) -> pa.Table:
    """The rows as an Arrow table (with `_row_kind`); InvalidInputError naming every bad row (up to 5) otherwise.

    A field that is not a column of the table makes its row bad (`table`, `db.table`, is named in the reason).
    """
    result = decode_messages(schema, [r.encode() for r in rows_json], "json", needs_retractions=False, table=table)
    if result.rejected:
        shown = "; ".join(f"rows_json[{i}]: {reason}" for i, reason in result.rejected[:MAX_REASONS])
        more = f" (and {len(result.rejected) - MAX_REASONS} more)" if len(result.rejected) > MAX_REASONS else ""
        raise InvalidInputError(f"{len(result.rejected)} row(s) are invalid, nothing was written: {shown}{more}")
    if result.tombstones:
        raise InvalidInputError("rows_json holds an empty row; every row must be a JSON object")
    return result.batch
