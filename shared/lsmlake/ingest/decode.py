"""Kafka message values -> an Arrow batch for TableWrite, the rejected messages and why.

Plain JSON (one row per message, optional `_row_kind`) is the hot path: the well-formed messages
of a batch are read in one pyarrow JSON read (`json_batch`); when the reader refuses them, the
culprits are found with few more reads (`_decode_plain`), and only they and the rows the
column-wise conversions flag are decoded one by one with the reference conversion (`values`),
which also writes the reasons. Debezium events are
decoded one by one (their envelopes and schemas differ per message).

A field the table does not have (in a plain message, or in a Debezium `before`/`after` image) rejects
the message, naming the field and the table's columns (`known_fields`): dropping it would store NULLs
where the producer meant values. `_row_kind` (and the `rowkind.field` column) is not such a field.
A null message value (a tombstone, which follows a Debezium delete) is skipped.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any, Literal

import numpy as np
import pyarrow as pa

from lsmlake.errors import InvalidInputError
from lsmlake.format import options as opts
from lsmlake.format.row_kind import INSERT, ROW_KIND_COLUMN, SHORT_NAMES, UPDATE_BEFORE
from lsmlake.format.schema import TableSchema
from lsmlake.ingest import debezium
from lsmlake.ingest.json_batch import (
    BatchRows,
    ChunkFailed,
    NotVectorised,
    fits_plan,
    read_plan,
    read_rows,
    to_rows,
    unknown_field_rows,
)
from lsmlake.ingest.known_fields import KnownFields
from lsmlake.ingest.values import BadMessage, BadValue, Column, Hint, columns_of, convert, show

Format = Literal["json", "debezium"]
FORMATS = ("json", "debezium")

#: below this many messages a chunk is decoded message by message instead of split further
MIN_CHUNK = 32
#: culprits located by reading (each read costs tens of ms) before a Python pass checks the rest
MAX_LOCATED = 4


@dataclass(frozen=True)
class DecodeResult:
    """The decoded rows of a list of message values, and what became of the other messages."""

    #: the table's columns in its Arrow types, then `_row_kind` as int8 `_VALUE_KIND` codes (0..3)
    batch: pa.Table
    #: int64, one per row of `batch`: the position in `values` of the message the row came from
    #: (a Debezium update retracting its old row gives two rows of the same message, -U first)
    source_index: np.ndarray
    #: (position in `values`, reason), in position order
    rejected: list[tuple[int, str]]
    #: null values (tombstones) skipped
    tombstones: int
    #: the column a rejection's reason is about, by position in `values`, where it is about one column
    rejected_columns: dict[int, str] = field(default_factory=dict)


def needs_retractions(schema: TableSchema) -> bool:
    """Whether an update should reach this table as -U(old row) +U(new row) rather than +U alone.

    Only where the merge engine folds a key's history (`retractions_need_history`: aggregation,
    partial-update) does the old row carry information: `sum` must subtract the old value or the
    update counts twice. `deduplicate` and `first-row` replace or keep the whole row, so a -U
    before the +U only costs a row (and `first-row` refuses it). An engine whose options give a
    retraction no meaning (partial-update without delete options, an aggregate function that
    cannot retract) would fail the whole write on a -U, so it gets +U alone, which it accepts.
    Read once per table by the caller (the options are looked up here, not per batch).
    """
    if not schema.is_primary_key_table:
        return False
    from lsmlake.mergetree.merge.factory import merge_function_for

    merge = merge_function_for(schema)
    if not merge.retractions_need_history:
        return False
    try:
        merge.check_retractions(np.array([UPDATE_BEFORE], np.int8))
    except InvalidInputError:
        return False
    return True


def decode_messages(table_schema: TableSchema, values: list[bytes | None], fmt: Format,
                    needs_retractions: bool, *, table: str | None = None) -> DecodeResult:
    """Decode Kafka message values for one table (see the module docstring for the formats).

    `table` (`db.table`) names the table in the reason for a field it does not have.
    Raises InvalidInputError for an unknown `fmt`; a bad message never raises, it is rejected.
    """
    if fmt not in FORMATS:
        raise InvalidInputError(f"unknown ingestion format {fmt!r}; use one of {', '.join(FORMATS)}")
    out = _Output(table_schema, fmt == "debezium", needs_retractions, KnownFields.of(table_schema, table))
    if fmt == "debezium":
        for i, v in enumerate(values):
            out.one(i, v)
    else:
        fast, messages, rest = _one_line_objects(values)
        for i in rest:
            out.one(i, values[i])
        _decode_plain(out, fast, messages)
    return out.result()


def _one_line_objects(values: list[bytes | None]) -> tuple[list[int], list[bytes], list[int]]:
    """The messages fit for the batch reader (positions and values), and the positions of the rest.

    Fit: starts with `{` and holds no line break. A line break (pretty-printed JSON) would split a
    message into several reader lines and a blank message would vanish, so those, tombstones and
    anything not starting like an object go message by message."""
    messages = [v for v in values if v is not None and v[:1] == b"{"]
    if len(messages) == len(values) and _no_breaks(messages):
        return list(range(len(values))), messages, []  # the common case: two passes at C speed
    fast, messages, rest = [], [], []
    for i, v in enumerate(values):
        if v is not None and v[:1] == b"{" and b"\n" not in v and b"\r" not in v:
            fast.append(i)
            messages.append(v)
        else:
            rest.append(i)
    return fast, messages, rest


def _no_breaks(messages: list[bytes]) -> bool:
    joined = b"\n".join(messages)
    return joined.count(b"\n") == len(messages) - 1 and b"\r" not in joined


def _decode_plain(out: _Output, positions: list[int], messages: list[bytes]) -> None:
    """Decode one-line JSON objects with the batch reader.

    1. Read everything at once (threaded); done when nothing fails.
    2. When the reader refused a field the table does not have (it does not say which row holds it),
       take the messages holding one out (`unknown_field_rows`; decoded one by one, which rejects
       them with the field's name) and read the rest at once again.
    3. Find the messages the parser still refuses: read one block from the start, take the row the
       error names out (decoded one by one), go on after it. Parsing stops at an error, but each
       failed read still costs tens of milliseconds: after MAX_LOCATED culprits the remaining
       messages are checked in one Python pass (`fits_plan`).
    4. Read the rest; a conversion error (a number that does not fit; the reader does not say
       which row) is found by halving.
    """
    if not positions:
        return
    try:
        plan = read_plan(out.columns, messages)
    except NotVectorised:
        for i, m in zip(positions, messages, strict=True):
            out.one(i, m)
        return
    joined = pa.py_buffer(b"\n".join(messages))
    failed = _read_whole(out, plan, positions, messages, joined)
    if failed is not None and failed.unknown_field:
        held = unknown_field_rows(joined, messages, plan)
        if held.any():
            positions, messages = _one_by_one(out, held, positions, messages)
            joined = pa.py_buffer(b"\n".join(messages))
            failed = _read_whole(out, plan, positions, messages, joined) if messages else None
    if failed is None:
        return
    starts = np.r_[0, np.cumsum([len(m) + 1 for m in messages])]
    keep = np.ones(len(messages), dtype=bool)
    first = 0
    for _ in range(MAX_LOCATED):
        if first >= len(messages):
            break
        try:
            read_rows(joined.slice(int(starts[first]), int(starts[-1] - 1 - starts[first])), len(messages) - first,
                      plan, one_block=True)
            break
        except ChunkFailed as e:
            if e.row is None:
                break
            culprit = first + e.row
            if culprit >= len(messages):
                break
            keep[culprit] = False
            out.one(positions[culprit], messages[culprit])
            first = culprit + 1
    else:  # many culprits: one pass in Python costs less than a read per culprit
        names = frozenset(plan.names)
        for j in range(first, len(messages)):
            if not fits_plan(messages[j], plan, names):
                keep[j] = False
                out.one(positions[j], messages[j])
    kept = np.flatnonzero(keep).tolist()
    _decode_halving(out, plan, [positions[j] for j in kept], [messages[j] for j in kept])


def _read_whole(out: _Output, plan: pa.Schema, positions: list[int], messages: list[bytes],
                joined: pa.Buffer) -> ChunkFailed | None:
    """Read and convert all the messages at once (threaded): None when their rows are out, else the failure."""
    try:
        rows = to_rows(read_rows(joined, len(messages), plan, one_block=False), out.columns, out.rowkind_field,
                       out.append_only)
    except ChunkFailed as e:
        return e
    out.batch(rows, positions, messages)
    return None


def _one_by_one(out: _Output, taken: np.ndarray, positions: list[int],
                messages: list[bytes]) -> tuple[list[int], list[bytes]]:
    """Decode the taken messages one by one (the error path); the positions and values of the others."""
    for j in np.flatnonzero(taken).tolist():
        out.one(positions[j], messages[j])
    kept = np.flatnonzero(~taken).tolist()
    return [positions[j] for j in kept], [messages[j] for j in kept]


def _decode_halving(out: _Output, plan: pa.Schema, positions: list[int], messages: list[bytes]) -> None:
    """Decode with the batch reader, halving a refused chunk until the culprits stand alone."""
    pending = [(0, len(positions))]
    while pending:
        lo, hi = pending.pop()
        if hi - lo < MIN_CHUNK:
            for j in range(lo, hi):
                out.one(positions[j], messages[j])
            continue
        try:
            table = read_rows(pa.py_buffer(b"\n".join(messages[lo:hi])), hi - lo, plan, one_block=False)
            rows = to_rows(table, out.columns, out.rowkind_field, out.append_only)
        except ChunkFailed:
            mid = (lo + hi) // 2
            pending += [(mid, hi), (lo, mid)]
            continue
        out.batch(rows, positions[lo:hi], messages[lo:hi])


class _Output:
    """Collects decoded rows (batch chunks, and rows decoded one by one) and rejections."""

    def __init__(self, schema: TableSchema, is_debezium: bool, needs_retractions: bool, fields: KnownFields) -> None:
        self.schema = schema
        self.columns: tuple[Column, ...] = columns_of(schema)
        self.fields = fields
        self.debezium = is_debezium
        self.needs_retractions = needs_retractions
        self.append_only = not schema.is_primary_key_table
        self.rowkind_field = schema.table_options.get(opts.ROWKIND_FIELD) or None
        self.chunks: list[tuple[list[pa.Array], np.ndarray, np.ndarray]] = []
        self.values: list[list[Any]] = [[] for _ in self.columns]
        self.kinds: list[int] = []
        self.sources: list[int] = []
        self.rejected: list[tuple[int, str]] = []
        self.rejected_columns: dict[int, str] = {}
        self.tombstones = 0

    def batch(self, rows: BatchRows, positions: list[int], messages: list[bytes]) -> None:
        keep = ~rows.recheck
        src = np.asarray(positions, np.int64)
        if keep.all():
            self.chunks.append((rows.arrays, rows.kinds, src))
            return
        mask = pa.array(keep)
        self.chunks.append(([a.filter(mask) for a in rows.arrays], rows.kinds[keep], src[keep]))
        for j in np.flatnonzero(~keep).tolist():
            self.one(positions[j], messages[j])

    def one(self, position: int, raw: bytes | None) -> None:
        """Decode one message with the reference conversion, or reject it with its reason."""
        if raw is None:
            self.tombstones += 1
            return
        try:
            decoded = [(kind, self._row(image, hints)) for kind, image, hints in self._images(raw)]
        except BadMessage as e:
            self.rejected.append((position, str(e)))
            if e.column is not None:
                self.rejected_columns[position] = e.column
            return
        for kind, row in decoded:
            for column_values, v in zip(self.values, row, strict=True):
                column_values.append(v)
            self.kinds.append(kind)
            self.sources.append(position)

    def _images(self, raw: bytes) -> list[tuple[int, dict[str, Any], dict[str, Hint]]]:
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as e:
            raise BadMessage(f"not UTF-8 text (byte {e.start})") from None
        try:
            doc = json.loads(text, parse_float=Decimal)
        except json.JSONDecodeError as e:
            raise BadMessage(f"invalid JSON at position {e.pos}: {e.msg}") from None
        except RecursionError:
            raise BadMessage("invalid JSON: nested too deeply") from None
        if self.debezium:
            rows, hints = debezium.changes(doc, self.needs_retractions, self.fields)
            kinds = [(kind, image, hints) for kind, image in rows]
        else:
            if not isinstance(doc, dict):
                raise BadMessage(f"expected a JSON object, got {debezium.json_kind(doc)}")
            self.fields.check(doc)
            kinds = [(self._plain_kind(doc), doc, {})]
        if self.append_only:
            for kind, _, _ in kinds:
                if kind != INSERT:
                    raise BadMessage(f"an append-only table takes only inserts (+I), got {SHORT_NAMES[kind]}")
        return kinds

    def _plain_kind(self, doc: dict[str, Any]) -> int:
        what, v = ROW_KIND_COLUMN, doc.get(ROW_KIND_COLUMN)
        if v is None and self.rowkind_field:
            what, v = self.rowkind_field, doc.get(self.rowkind_field)
        if v is None:
            return INSERT
        if isinstance(v, str) and v in SHORT_NAMES:
            return SHORT_NAMES.index(v)
        if type(v) is int and 0 <= v <= 3:
            return v
        raise BadMessage(f'field "{what}": unknown row kind {show(v)}; a row kind is +I, -U, +U or -D')

    def _row(self, image: dict[str, Any], hints: dict[str, Hint]) -> list[Any]:
        row: list[Any] = []
        for c in self.columns:
            v = image.get(c.name)
            if v is None:
                if not c.nullable:
                    raise BadMessage(c.missing_reason if c.name not in image else c.null_reason, c.name)
                row.append(None)
                continue
            try:
                row.append(convert(v, c.type, self.debezium, hints.get(c.name)))
            except BadValue as e:
                raise BadMessage(f'field "{c.name}": {e}', c.name) from None
        return row

    def result(self) -> DecodeResult:
        chunks = list(self.chunks)
        if self.sources:
            arrays = [pa.array(v, c.arrow_type) for v, c in zip(self.values, self.columns, strict=True)]
            chunks.append((arrays, np.asarray(self.kinds, np.int8), np.asarray(self.sources, np.int64)))
        if chunks:
            columns = [pa.concat_arrays([ch[0][i] for ch in chunks]) for i in range(len(self.columns))]
            kinds = np.concatenate([ch[1] for ch in chunks])
            src = np.concatenate([ch[2] for ch in chunks])
        else:
            columns = [pa.array([], c.arrow_type) for c in self.columns]
            kinds, src = np.zeros(0, np.int8), np.zeros(0, np.int64)
        if len(src) > 1 and (np.diff(src) < 0).any():
            order = np.argsort(src, kind="stable")  # keeps -U before +U of one message
            take = pa.array(order)
            columns = [c.take(take) for c in columns]
            kinds, src = kinds[order], src[order]
        schema = self.schema.arrow_schema.append(pa.field(ROW_KIND_COLUMN, pa.int8(), nullable=False))
        batch = pa.Table.from_arrays([*columns, pa.array(kinds, pa.int8())], schema=schema)
        return DecodeResult(batch, src, sorted(self.rejected), self.tombstones, self.rejected_columns)
