"""A table's schema as typed values: its fields with Paimon types, its keys, options and comment."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import pyarrow as pa

from lsmlake.errors import NotFoundError
from lsmlake.format.types import AnyType, DataField, parse_type, to_arrow_schema
from lsmlake.proto_gen.lsmlake.v1 import catalog_pb2

SHOWN = 8  # items a repr lists before it counts the rest


def shown(items: list[str]) -> str:
    """`items` joined for a repr: the first `SHOWN`, then how many more there are."""
    more = f", ... (+{len(items) - SHOWN})" if len(items) > SHOWN else ""
    return ", ".join(items[:SHOWN]) + more


@dataclass(frozen=True, repr=False)
class TableSchemaInfo:
    """A table's current schema: `fields` are Paimon `DataField`s (id, name, type, description) whose `type` is
    the Paimon type (`DataType`, `ArrayType`, `MapType`, `RowType`: `.sql()`, `.nullable`, `.kind`...)."""

    identifier: str
    schema_id: int
    fields: tuple[DataField, ...]
    primary_keys: tuple[str, ...]
    partition_keys: tuple[str, ...]
    options: Mapping[str, str]
    comment: str | None

    @staticmethod
    def from_proto(p: catalog_pb2.TableInfo) -> TableSchemaInfo:
        fields = tuple(DataField(c.field_id, c.name, parse_type(c.type), c.comment or None) for c in p.columns)
        return TableSchemaInfo(f"{p.table.database}.{p.table.table}", p.schema_id, fields, tuple(p.primary_keys),
                               tuple(p.partition_keys), dict(p.options), p.comment or None)

    @property
    def names(self) -> list[str]:
        return [f.name for f in self.fields]

    def field(self, name: str) -> DataField:
        """The field named `name`; NotFoundError naming the columns otherwise."""
        for f in self.fields:
            if f.name == name:
                return f
        raise NotFoundError(f"table {self.identifier} has no column {name!r} (columns: {self.names})")

    def type_of(self, name: str) -> AnyType:
        return self.field(name).type

    @property
    def arrow_schema(self) -> pa.Schema:
        """The fields in the Arrow types lsmlake reads them as."""
        return to_arrow_schema(self.fields)

    @property
    def is_primary_key_table(self) -> bool:
        return bool(self.primary_keys)

    def __repr__(self) -> str:
        columns = shown([f"{f.name} {f.type.sql()}" for f in self.fields])
        keys = f", primary key ({', '.join(self.primary_keys)})" if self.primary_keys else ""
        parts = f", partitioned by ({', '.join(self.partition_keys)})" if self.partition_keys else ""
        return f"TableSchemaInfo({self.identifier} #{self.schema_id}: {columns}{keys}{parts})"
