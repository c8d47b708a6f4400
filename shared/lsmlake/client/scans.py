"""Reading tables: the catalog plans the splits (`PlanScan`), lsmlake's own reader reads them from the warehouse.

A scan therefore merges and filters exactly as `FileStoreTable.to_arrow` does.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import pyarrow as pa

from lsmlake.catalog.filesystem import split_identifier
from lsmlake.client.connection import Connection
from lsmlake.client.tables import TableInfo, Tables, table_ident
from lsmlake.errors import InvalidInputError, NotFoundError
from lsmlake.format.predicate import Predicate, Term
from lsmlake.format.schema import SchemaManager
from lsmlake.fs import open_path
from lsmlake.fs.storage_settings import join_uri
from lsmlake.proto_gen.lsmlake.v1 import catalog_pb2, common_pb2
from lsmlake.rpc.convert import split_from_proto, term_to_proto
from lsmlake.table.file_store_table import FileStoreTable
from lsmlake.table.scan import Split


# Arrow types whose literals round-trip through text as the catalog parses them (a cast from string).
def _plannable(t: pa.DataType) -> bool:
    return (pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_boolean(t) or pa.types.is_string(t)
            or pa.types.is_decimal(t) or pa.types.is_date32(t) or (pa.types.is_timestamp(t) and t.tz is None))


def _where_terms(where: Mapping[str, Any], info: TableInfo) -> tuple[list[Term], list[catalog_pb2.PredicateTerm],
                                                                      list[catalog_pb2.PredicateTerm]]:
    """Equality terms with literals typed like their columns; and the (partition, key) filter terms to plan with."""
    types = {f.name: f.type for f in info.arrow_schema}
    terms: list[Term] = []
    part: list[catalog_pb2.PredicateTerm] = []
    keys: list[catalog_pb2.PredicateTerm] = []
    for column, value in where.items():
        if column not in types:
            raise InvalidInputError(f"where column {column!r} is not a column of table {info.identifier}")
        target = part if column in info.partition_keys else keys
        if value is None:
            terms.append(Term(column, "is_null"))
            target.append(catalog_pb2.PredicateTerm(column=column, op=catalog_pb2.PREDICATE_OP_IS_NULL))
            continue
        t = types[column]
        try:
            scalar = value if isinstance(value, pa.Scalar) else pa.scalar(value)
            if not scalar.type.equals(t):
                scalar = scalar.cast(t)
        except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError, TypeError) as e:
            raise InvalidInputError(f"where value {value!r} does not fit column {column!r} ({t}): {e}") from None
        terms.append(Term(column, "=", scalar.as_py()))
        if _plannable(t):  # other values only filter rows; planning just prunes less
            text = scalar.cast(pa.string()).as_py()
            target.append(catalog_pb2.PredicateTerm(column=column, op=catalog_pb2.PREDICATE_OP_EQ, value=text))
    return terms, part, keys


class Scans:
    """Planned reads of a table's rows (a part of `Client`)."""

    def __init__(self, conn: Connection, tables: Tables) -> None:
        self._conn = conn
        self._tables = tables

    def open_table(self, table: str | TableInfo) -> FileStoreTable:
        """The table's files through lsmlake's library, to read (or write files for `commit`) directly: under
        `warehouse` when the client was given one, else at the location the catalog reports."""
        info = self._tables.table(table) if isinstance(table, str) else table
        if self._conn.warehouse is not None:
            db, name = split_identifier(info.identifier)
            location = join_uri(self._conn.warehouse, f"{db}.db", name)
        else:
            location = info.location
        fio, path = open_path(location, storage=self._conn.storage)
        schema = SchemaManager(fio, path).latest()
        if schema is None:
            raise NotFoundError(f"table {info.identifier} has no schema at {fio.uri(path)}")
        return FileStoreTable(fio, path, info.identifier, schema)

    def plan_splits(self, table: FileStoreTable, *, snapshot_id: int | None = None,
                    predicate: Predicate | None = None) -> list[Split]:
        """The catalog's plan of a scan of `table` (from `open_table`) at a snapshot (the newest by default):
        the splits to read with `table.new_read`. Partitions and files are pruned by `predicate`; terms whose
        literal has no exact text form (floats, decimals, timestamps) do not prune, so the reader must still
        filter rows by the whole predicate."""
        partition_keys = table.schema.partition_keys
        part: list[catalog_pb2.PredicateTerm] = []
        keys: list[catalog_pb2.PredicateTerm] = []
        for t in predicate.terms if predicate is not None else ():
            p = term_to_proto(t)
            if p is not None:
                (part if t.column in partition_keys else keys).append(p)
        return [split_from_proto(s, table) for s in self._plan(table.identifier, snapshot_id, part, keys)]

    def _plan(self, identifier: str, snapshot_id: int | None, part: list[catalog_pb2.PredicateTerm],
              keys: list[catalog_pb2.PredicateTerm]) -> Sequence[common_pb2.Split]:
        req = catalog_pb2.PlanScanRequest(table=table_ident(identifier), partition_filter=part, key_filter=keys)
        if snapshot_id is not None:
            req.snapshot_id = snapshot_id
        return self._conn.call(self._conn.catalog.PlanScan, req, changes_state=False).splits

    def scan(self, identifier: str, *, snapshot_id: int | None = None, where: Mapping[str, Any] | None = None,
             columns: Sequence[str] | None = None) -> pa.Table:
        """The table's rows at a snapshot (the newest by default), merged, as an Arrow table.

        1. the catalog plans the splits (`PlanScan`), pruning partitions and files by `where`;
        2. the splits are read from the warehouse with lsmlake's reader (merge-on-read, deletion vectors);
        3. rows are kept where every `where` column equals its value (None: is null), then `columns` selected.
        """
        info = self._tables.table(identifier)
        terms, part, keys = _where_terms(where or {}, info)
        planned = self._plan(identifier, snapshot_id, part, keys)
        table = self.open_table(info)
        splits = [split_from_proto(s, table) for s in planned]
        return table.new_read(list(columns) if columns is not None else None, Predicate(tuple(terms))).read(splits)
