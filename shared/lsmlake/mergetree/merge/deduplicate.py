"""`deduplicate` (Paimon's default merge engine): the newest row of a key wins, whatever its kind."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pyarrow as pa

from lsmlake.format.numpy_columns import fixed_numpy, mask_of
from lsmlake.format.row_kind import is_retract
from lsmlake.format.schema import SEQUENCE_NUMBER, VALUE_KIND
from lsmlake.mergetree.dedupe import group_ends, sort_and_group, take_rows
from lsmlake.mergetree.merge.merge_function import Ordering


class Deduplicate:
    """Keeps the last row of each key by (sequence.field, sequence number); `ignore-delete` drops retractions."""

    retractions_need_history = False  # merging any subset of a key's rows is exact

    def __init__(self, keys: Sequence[str], ordering: Ordering | None = None, ignore_delete: bool = False) -> None:
        self.keys = list(keys)
        self.ordering = ordering or Ordering()
        self.ignore_delete = ignore_delete

    def check_retractions(self, kinds: np.ndarray) -> None:
        """Every retraction has a meaning here (or is refused by `merge` itself)."""

    def required_columns(self, projection: Sequence[str]) -> list[str]:
        return list(dict.fromkeys(list(projection) + self.keys + self.ordering.columns()))

    def merge(self, rows: pa.Table) -> pa.Table:
        if self.ignore_delete:
            rows = rows.filter(mask_of(~is_retract(fixed_numpy(rows.column(VALUE_KIND)))))
        # only the winners are taken: no need to materialise the sorted rows
        direction = "descending" if self.ordering.descending else "ascending"
        order = [(rows.column(f), direction) for f in self.ordering.sequence_fields]
        order.append((rows.column(SEQUENCE_NUMBER), "ascending"))
        idx, starts = sort_and_group([rows.column(k) for k in self.keys], order)
        if len(idx) == 0:
            return rows
        return take_rows(rows, idx[group_ends(starts, len(idx)) - 1])
