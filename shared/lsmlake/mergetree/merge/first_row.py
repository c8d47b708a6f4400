"""`first-row`: the first row of a key is kept and later ones are ignored."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pyarrow as pa

from lsmlake.errors import InvalidInputError
from lsmlake.format.row_kind import INSERT, is_retract
from lsmlake.format.schema import VALUE_KIND
from lsmlake.mergetree.merge.merge_function import Ordering, group, with_kinds


class FirstRow:
    """Keeps the oldest row of each key. Retractions are refused unless `ignore-delete` drops them."""

    retractions_need_history = False  # merging any subset of a key's rows is exact

    def __init__(self, keys: Sequence[str], ignore_delete: bool = False) -> None:
        self.keys = list(keys)
        self.ignore_delete = ignore_delete

    def check_retractions(self, kinds: np.ndarray) -> None:
        """Every retraction has a meaning here (or is refused by `merge` itself)."""

    def required_columns(self, projection: Sequence[str]) -> list[str]:
        return list(dict.fromkeys(list(projection) + self.keys))

    def merge(self, rows: pa.Table) -> pa.Table:
        retract = is_retract(rows.column(VALUE_KIND).to_numpy())
        if retract.any():
            if not self.ignore_delete:
                raise InvalidInputError("the first-row merge engine cannot accept -U/-D rows; "
                                        "set 'ignore-delete' = 'true' to drop them")
            rows = rows.filter(pa.array(~retract))
        g = group(rows, self.keys, Ordering())
        first = g.rows.take(pa.array(g.starts, pa.int64()))
        return with_kinds(first, np.full(first.num_rows, INSERT, np.int8))
