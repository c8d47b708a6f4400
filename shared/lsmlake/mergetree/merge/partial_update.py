"""`partial-update`: newer rows fill in the fields they carry; older values survive where newer ones are null.

Options, as Paimon names them:
- `fields.<s>.sequence-group` = `f1,f2`: the fields f1, f2 (and the sequence field(s) s) are updated
  together, by the row with the highest s (ties: the newer row), nulls included; a row whose s is
  entirely null does not touch the group. A retraction that wins its group clears the group.
- `fields.<f>.aggregate-function`: the field is aggregated instead (over the rows its group accepts).
- `ignore-delete` drops retractions; `partial-update.remove-record-on-delete` makes -D remove the
  row (later rows start afresh); `partial-update.remove-record-on-sequence-group` = `s`: a winning
  retraction of that group removes the row. Without any of these a retraction is an error.
Everything is computed per field over whole columns: "the last eligible non-null value of a key" is a
segmented max of row positions.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from lsmlake.errors import InvalidInputError
from lsmlake.format.row_kind import DELETE, INSERT, is_retract
from lsmlake.format.schema import VALUE_KIND
from lsmlake.format.types import AnyType
from lsmlake.mergetree.dedupe import sort_and_group
from lsmlake.mergetree.merge.merge_function import Grouped, Ordering, group, with_kinds, with_max_sequence


@dataclass(frozen=True)
class SequenceGroup:
    """Fields updated together, ordered by their own sequence field(s)."""

    sequence_fields: tuple[str, ...]
    fields: tuple[str, ...]
    remove_record: bool = False


@dataclass(frozen=True)
class FieldAggregation:
    """A field's aggregate function, its type and options."""

    function: str
    type: AnyType
    options: Any  # aggregators.FieldAggOptions


@dataclass
class PartialUpdate:
    """The partial-update merge engine."""

    #: a merge of rows holding a retraction is exact only with the key's whole history at hand
    retractions_need_history = True

    keys: Sequence[str]
    value_fields: Sequence[str]
    ordering: Ordering = Ordering()
    ignore_delete: bool = False
    remove_record_on_delete: bool = False
    sequence_groups: Sequence[SequenceGroup] = ()
    aggregations: dict[str, FieldAggregation] = field(default_factory=dict)

    def required_columns(self, projection: Sequence[str]) -> list[str]:
        # a field's value depends on its group's sequence fields and on deletes anywhere in the row
        return list(dict.fromkeys(list(projection) + list(self.keys) + list(self.value_fields)))

    def check_retractions(self, kinds: np.ndarray) -> None:
        """Refuse retractions the options give no meaning to (before anything is written)."""
        if is_retract(kinds).any() and not (self.ignore_delete or self.remove_record_on_delete
                                            or self.sequence_groups):
            raise InvalidInputError(
                "the partial-update merge engine got a -U/-D row; set 'ignore-delete', "
                "'partial-update.remove-record-on-delete' or a sequence group to say what it means")

    def merge(self, rows: pa.Table) -> pa.Table:
        self.check_retractions(rows.column(VALUE_KIND).to_numpy())
        if self.ignore_delete:  # ignored rows never existed: a key with only retractions disappears
            rows = rows.filter(pa.array(~is_retract(rows.column(VALUE_KIND).to_numpy())))
        g = group(rows, list(self.keys), self.ordering)
        n = g.num_rows
        if n == 0:
            return rows
        pos = np.arange(n, dtype=np.int64)
        gid = g.group_of_row()
        retract = g.retract
        adds = ~retract
        # Rows before the last -D of a key are forgotten when deletes remove records.
        alive = np.ones(n, dtype=bool)
        removed = np.zeros(len(g.starts), dtype=bool)
        if self.remove_record_on_delete and not self.ignore_delete:
            deletes = g.kinds == DELETE
            last_delete = _segment_max(np.where(deletes, pos, -1), g.starts)
            alive = pos > last_delete[gid]
            last_add = _segment_max(np.where(adds, pos, -1), g.starts)
            removed = (last_delete >= 0) & (last_add < last_delete)
        eligible = adds & alive
        # a key that never received an added row (only retractions) does not exist
        removed |= _segment_max(np.where(adds, pos, -1), g.starts) < 0
        grouped_fields = {f for sg in self.sequence_groups for f in sg.fields + sg.sequence_fields}
        columns: dict[str, pa.Array] = {}
        for name in self.value_fields:
            if name in grouped_fields or name not in g.rows.column_names:
                continue
            agg = self.aggregations.get(name)
            if agg is not None:
                columns[name] = aggregate_where(g, name, agg, eligible, gid)
            else:
                columns[name] = _last_valid(g.rows.column(name), eligible, g.starts)
        for sg in self.sequence_groups:
            group_removed = self._apply_sequence_group(g, sg, columns, alive, gid, pos)
            removed |= group_removed
        result = g.rows.take(pa.array(g.last, pa.int64()))
        for name, col in columns.items():
            i = result.schema.get_field_index(name)
            result = result.set_column(i, result.schema.field(i), col)
        result = with_kinds(result, np.where(removed, DELETE, INSERT).astype(np.int8))
        return with_max_sequence(g, result)

    def _apply_sequence_group(self, g: Grouped, sg: SequenceGroup, columns: dict[str, pa.Array],
                              alive: np.ndarray, gid: np.ndarray, pos: np.ndarray) -> np.ndarray:
        """Set the group's fields from its winning row; returns the keys this group removes."""
        rows = g.rows
        seq_cols = [rows.column(s) for s in sg.sequence_fields]
        has_seq = np.zeros(g.num_rows, dtype=bool)
        for c in seq_cols:
            has_seq |= _valid(c)
        events = has_seq & alive
        if self.ignore_delete:
            events &= ~g.retract
        # Winner: the last event after ordering a key's rows by the group's sequence, then by arrival.
        order_cols: list[tuple[pa.Array | pa.ChunkedArray | np.ndarray, str]] = [
            (events.astype(np.int8), "ascending")]
        order_cols += [(c, "ascending") for c in seq_cols]
        order_cols.append((pos, "ascending"))
        idx, _ = sort_and_group([], order_cols, gid)
        # idx sorts rows within each key; the last row of each key in that order is the candidate.
        winner = idx[g.last]
        has_winner = events[winner]
        winner_is_retract = g.retract[winner] & has_winner
        take_idx = np.where(has_winner & ~winner_is_retract, winner, -1)
        mask = take_idx < 0
        for name in sg.fields + sg.sequence_fields:
            if name not in rows.column_names:
                continue
            agg = self.aggregations.get(name)
            if agg is not None and name in sg.fields:
                columns[name] = aggregate_where(g, name, agg, events, gid)
                continue
            columns[name] = rows.column(name).take(pa.array(np.where(mask, 0, take_idx), mask=mask))
        if not sg.remove_record:
            return np.zeros(len(g.starts), dtype=bool)
        later_add = _segment_max(np.where(~g.retract & alive, pos, -1), g.starts) > winner
        return winner_is_retract & ~later_add


def _valid(col: pa.Array | pa.ChunkedArray) -> np.ndarray:
    return np.asarray(pc.is_valid(col).to_numpy(zero_copy_only=False), dtype=bool)


def _segment_max(values: np.ndarray, starts: np.ndarray) -> np.ndarray:
    return np.maximum.reduceat(values, starts) if len(values) else values


def _last_valid(col: pa.Array | pa.ChunkedArray, eligible: np.ndarray, starts: np.ndarray) -> pa.Array:
    """Per key: the value of the last eligible row where the column is not null (null when none)."""
    pos = np.arange(len(eligible), dtype=np.int64)
    best = _segment_max(np.where(eligible & _valid(col), pos, -1), starts)
    mask = best < 0
    taken = col.take(pa.array(np.where(mask, 0, best), mask=mask))
    return taken.combine_chunks() if isinstance(taken, pa.ChunkedArray) else taken


def aggregate_where(g: Grouped, name: str, agg: FieldAggregation, rows_mask: np.ndarray,
                     gid: np.ndarray) -> pa.Array:
    """Aggregate a field over the selected rows of each key; keys with no selected row get null."""
    col = g.rows.column(name)
    sel = np.flatnonzero(rows_mask)
    values = col.take(pa.array(sel, pa.int64()))
    if isinstance(values, pa.ChunkedArray):
        values = values.combine_chunks()
    present = gid[sel]
    if len(sel) == 0:
        return pa.nulls(len(g.starts), col.type)
    starts = np.flatnonzero(np.r_[True, present[1:] != present[:-1]])
    from lsmlake.mergetree.merge.aggregators import aggregate

    out = aggregate(agg.function, values, g.kinds[sel], starts, agg.type, agg.options)
    keys_with_rows = present[starts]
    scatter = np.full(len(g.starts), -1, np.int64)
    scatter[keys_with_rows] = np.arange(len(keys_with_rows))
    mask = scatter < 0
    return out.take(pa.array(np.where(mask, 0, scatter), mask=mask))

