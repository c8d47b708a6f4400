"""The fields a JSON row may hold: the table's columns and the row-kind field. Any other is refused.

A field the table does not have is an error rather than dropped: a producer that runs ahead of the
table, or a writer holding the schema of a table since dropped and created again with new columns,
would otherwise store NULLs in the columns it meant to fill, and nobody would notice.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from lsmlake.format import options as opts
from lsmlake.format.row_kind import ROW_KIND_COLUMN
from lsmlake.format.schema import TableSchema
from lsmlake.ingest.values import BadMessage, show

#: columns listed in a refusal before the rest are elided
SHOWN_COLUMNS = 10
#: unknown fields named in a refusal before the rest are counted
SHOWN_FIELDS = 5


@dataclass(frozen=True)
class KnownFields:
    """The field names a row image may hold, and how a refusal names the table and its columns."""

    table: str  # `db.table`, or "the table" when the caller did not say
    columns: tuple[str, ...]
    allowed: frozenset[str]

    @staticmethod
    def of(schema: TableSchema, table: str | None) -> KnownFields:
        columns = tuple(schema.field_names)
        row_kind = {ROW_KIND_COLUMN}
        rowkind_field = schema.table_options.get(opts.ROWKIND_FIELD)
        if rowkind_field:  # a column already (the schema checks it); named here for clarity
            row_kind.add(rowkind_field)
        return KnownFields(table or "the table", columns, frozenset(columns) | row_kind)

    def check(self, image: dict[str, Any], within: str | None = None) -> None:
        """Raise BadMessage naming the fields of `image` the table does not have (and `within`, the
        Debezium image holding them). Called per message: the common case is one subset test."""
        if image.keys() <= self.allowed:
            return
        reason = self.reason([k for k in image if k not in self.allowed])
        raise BadMessage(reason if within is None else f'"{within}": {reason}')

    def reason(self, unknown: list[str]) -> str:
        """`field "colour" is not a column of shop.orders (columns: id, amount)`."""
        names = ", ".join(show(k) for k in unknown[:SHOWN_FIELDS])
        if len(unknown) > SHOWN_FIELDS:
            names += f" and {len(unknown) - SHOWN_FIELDS} more"
        what = f"field {names} is not a column" if len(unknown) == 1 else f"fields {names} are not columns"
        shown = ", ".join(self.columns[:SHOWN_COLUMNS])
        if len(self.columns) > SHOWN_COLUMNS:
            shown += f", ... ({len(self.columns)} in all)"
        return f"{what} of {self.table} (columns: {shown})"
