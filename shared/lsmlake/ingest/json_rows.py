"""Rows given as JSON objects (the WriteRows RPC, JSON files), decoded as Kafka's plain JSON messages are."""

from __future__ import annotations

import json
import re

import pyarrow as pa

from lsmlake.errors import InvalidInputError
from lsmlake.format.schema import TableSchema
from lsmlake.ingest.decode import decode_messages

MAX_REASONS = 5

_BOM = b"\xef\xbb\xbf"
_SPACE = re.compile(r"[ \t\n\r]*")


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


def json_messages(data: bytes, allow_array: bool) -> tuple[list[bytes], list[str]]:
    """The rows of a JSON text as plain JSON messages, and where each one is (`line 3`, `record 2`).

    The text holds JSON lines (one object per non-blank line), or, with `allow_array`, one JSON array of
    objects. A line is a message as it is: a line that is no JSON object is rejected by `decode_messages`
    like any message. Each element of an array is taken as its own text, so its numbers keep every digit.
    Raises InvalidInputError for an array that is not valid JSON.
    """
    data = data.removeprefix(_BOM)
    if allow_array and data.lstrip(b" \t\r\n").startswith(b"["):
        return _array_elements(data)
    messages: list[bytes] = []
    places: list[str] = []
    for lineno, line in enumerate(data.splitlines(), 1):
        if line.strip():
            messages.append(line)
            places.append(f"line {lineno}")
    return messages, places


def _array_elements(data: bytes) -> tuple[list[bytes], list[str]]:
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise InvalidInputError(f"not UTF-8 text (byte {e.start})") from None
    decoder = json.JSONDecoder()
    messages: list[bytes] = []
    pos = _skip_space(text, 0) + 1  # past the "["
    closed = False
    while not closed:
        pos = _skip_space(text, pos)
        if not messages and text.startswith("]", pos):  # an empty array
            pos += 1
            break
        try:
            _, end = decoder.raw_decode(text, pos)
        except json.JSONDecodeError as e:
            raise InvalidInputError(f"not valid JSON: {e}") from None
        messages.append(text[pos:end].encode())
        pos = _skip_space(text, end)
        if text.startswith(",", pos):
            pos += 1
        elif text.startswith("]", pos):
            pos += 1
            closed = True
        else:
            raise InvalidInputError(f"not valid JSON: expected ',' or ']' at position {pos}")
    if _skip_space(text, pos) != len(text):
        raise InvalidInputError(f"not valid JSON: extra data after the array at position {pos}")
    return messages, [f"record {i}" for i in range(1, len(messages) + 1)]


def _skip_space(text: str, pos: int) -> int:
    """The position of the first character at or after `pos` that is not JSON whitespace."""
    match = _SPACE.match(text, pos)
    return match.end() if match else pos
