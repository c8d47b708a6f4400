"""The merge-function contract shared by merge-on-read, compaction and the writer's local fold.

A merge function takes rows of many keys (table columns plus `_SEQUENCE_NUMBER` and `_VALUE_KIND`)
and returns one row per key, in key order, with the same columns. The result's `_VALUE_KIND` is a
retraction (-D) when the key no longer exists; readers drop such rows, compaction keeps them unless
nothing older can lie below.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np
import pyarrow as pa

from lsmlake.format.row_kind import is_retract
from lsmlake.format.schema import SEQUENCE_NUMBER, VALUE_KIND
from lsmlake.mergetree.dedupe import group_ends, sort_and_group


@dataclass(frozen=True)
class Ordering:
    """How rows of one key are ordered: by `sequence.field` (if any), then by sequence number."""

    sequence_fields: tuple[str, ...] = ()
    descending: bool = False

    def columns(self) -> list[str]:
        return list(self.sequence_fields)


@dataclass
class Grouped:
    """Rows sorted by (key, ordering), with the start of each key's run."""

    rows: pa.Table
    starts: np.ndarray
    kinds: np.ndarray

    @property
    def num_rows(self) -> int:
        return self.rows.num_rows

    @property
    def ends(self) -> np.ndarray:
        return group_ends(self.starts, self.num_rows)

    @property
    def last(self) -> np.ndarray:
        return self.ends - 1

    def group_of_row(self) -> np.ndarray:
        """Group number of every row."""
        counts = self.ends - self.starts
        return np.repeat(np.arange(len(self.starts), dtype=np.int64), counts)

    @property
    def retract(self) -> np.ndarray:
        return is_retract(self.kinds)


def group(rows: pa.Table, keys: Sequence[str], ordering: Ordering) -> Grouped:
    """Sort rows by key and ordering; compute the key runs."""
    order: list[tuple[pa.Array | pa.ChunkedArray | np.ndarray, str]] = [
        (rows.column(f), "descending" if ordering.descending else "ascending") for f in ordering.sequence_fields]
    order.append((rows.column(SEQUENCE_NUMBER), "ascending"))
    idx, starts = sort_and_group([rows.column(k) for k in keys], order)
    sorted_rows = rows.take(pa.array(idx, pa.int64())) if len(idx) else rows
    kinds = sorted_rows.column(VALUE_KIND).to_numpy().astype(np.int8) if len(idx) else np.zeros(0, np.int8)
    return Grouped(sorted_rows, starts, kinds)


def with_kinds(rows: pa.Table, kinds: np.ndarray) -> pa.Table:
    """The rows with `_VALUE_KIND` replaced."""
    i = rows.schema.get_field_index(VALUE_KIND)
    return rows.set_column(i, rows.schema.field(i), pa.array(kinds.astype(np.int8), pa.int8()))


def with_max_sequence(g: Grouped, result: pa.Table) -> pa.Table:
    """Set each result row's sequence number to the highest of its key, so later merges order it right."""
    seq = g.rows.column(SEQUENCE_NUMBER).to_numpy()
    best = np.maximum.reduceat(seq, g.starts) if g.num_rows else seq
    i = result.schema.get_field_index(SEQUENCE_NUMBER)
    return result.set_column(i, result.schema.field(i), pa.array(best, pa.int64()))


class MergeFunction(Protocol):
    """Folds the rows of each key into one."""

    #: True when a merge of rows holding a retraction is exact only with the key's whole history
    retractions_need_history: bool

    #: columns the merge needs besides the ones a reader asks for (sequence fields, all values)
    def required_columns(self, projection: Sequence[str]) -> list[str]: ...

    def check_retractions(self, kinds: np.ndarray) -> None:
        """Raise InvalidInputError for retractions the engine's options give no meaning to."""
        ...

    def merge(self, rows: pa.Table) -> pa.Table: ...
