"""`aggregation`: every value field of a key is folded by its aggregate function.

`fields.<f>.aggregate-function` names the function (default `fields.default-aggregate-function`,
else `last_non_null_value`); -U/-D rows retract through the function (an error for functions that
cannot undo a value, unless `fields.<f>.ignore-retract`); `aggregation.remove-record-on-delete`
makes -D remove the row instead.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa

from lsmlake.errors import InvalidInputError
from lsmlake.format.row_kind import DELETE, INSERT, UPDATE_BEFORE
from lsmlake.mergetree.merge.merge_function import Ordering, group, with_kinds, with_max_sequence
from lsmlake.mergetree.merge.partial_update import FieldAggregation, aggregate_where


@dataclass
class Aggregation:
    """The aggregation merge engine."""

    #: a merge of rows holding a retraction is exact only with the key's whole history at hand
    retractions_need_history = True

    keys: Sequence[str]
    aggregations: dict[str, FieldAggregation] = field(default_factory=dict)
    ordering: Ordering = Ordering()
    remove_record_on_delete: bool = False

    def required_columns(self, projection: Sequence[str]) -> list[str]:
        return list(dict.fromkeys(list(projection) + list(self.keys) + self.ordering.columns()))

    def check_retractions(self, kinds: np.ndarray) -> None:
        """Refuse a retraction that a field's function cannot undo (before anything is written)."""
        from lsmlake.mergetree.merge.aggregators import supports_retract

        retracting = (kinds == UPDATE_BEFORE) | ((kinds == DELETE) & (not self.remove_record_on_delete))
        if not retracting.any():
            return
        for name, agg in self.aggregations.items():
            if not agg.options.ignore_retract and not supports_retract(agg.function):
                raise InvalidInputError(
                    f"field {name!r}: aggregate function {agg.function} cannot undo a -U/-D row; "
                    f"set 'fields.{name}.ignore-retract' = 'true' to ignore retractions")

    def merge(self, rows: pa.Table) -> pa.Table:
        g = group(rows, list(self.keys), self.ordering)
        n = g.num_rows
        if n == 0:
            return rows
        pos = np.arange(n, dtype=np.int64)
        gid = g.group_of_row()
        selected = np.ones(n, dtype=bool)
        removed = np.zeros(len(g.starts), dtype=bool)
        if self.remove_record_on_delete:
            deletes = g.kinds == DELETE
            last_delete = np.maximum.reduceat(np.where(deletes, pos, -1), g.starts)
            # any row after the last -D (a retraction too) brings the key back, as in Paimon
            last_other = np.maximum.reduceat(np.where(~deletes, pos, -1), g.starts)
            selected = (pos > last_delete[gid]) & ~deletes
            removed = (last_delete >= 0) & (last_other < last_delete)
        result = g.rows.take(pa.array(g.last, pa.int64()))
        for name, agg in self.aggregations.items():
            if name not in g.rows.column_names:
                continue
            i = result.schema.get_field_index(name)
            result = result.set_column(i, result.schema.field(i), aggregate_where(g, name, agg, selected, gid))
        result = with_kinds(result, np.where(removed, DELETE, INSERT).astype(np.int8))
        return with_max_sequence(g, result)
