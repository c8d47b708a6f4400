"""Reading tables: the catalog plans the splits (`PlanScan`), lsmlake's own reader reads them from the warehouse.

A scan therefore merges and filters exactly as `FileStoreTable.to_arrow` does.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence

import pyarrow as pa

from lsmlake.catalog.filesystem import split_identifier
from lsmlake.catalog.tags import read_tag
from lsmlake.client.changes import read_changes
from lsmlake.client.connection import Connection
from lsmlake.client.scan import Scan, ScanPlan
from lsmlake.client.snapshots import Snapshots
from lsmlake.client.tables import TableInfo, Tables, table_ident
from lsmlake.errors import InvalidInputError, LakeError, NotFoundError
from lsmlake.format.predicate import Predicate, Spec
from lsmlake.format.predicate_text import parse_filter
from lsmlake.format.schema import SchemaManager
from lsmlake.fs import open_path
from lsmlake.fs.storage_settings import join_uri
from lsmlake.proto_gen.lsmlake.v1 import catalog_pb2
from lsmlake.rpc.convert import split_from_proto
from lsmlake.table.file_store_table import FileStoreTable
from lsmlake.table.scan import Split


class Scans:
    """Planned reads of a table's rows (a part of `Client`)."""

    def __init__(self, conn: Connection, tables: Tables, snapshots: Snapshots) -> None:
        self._conn = conn
        self._tables = tables
        self._snapshots = snapshots

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
        the splits to read with `table.new_read`. Partitions and files are pruned by `predicate`, which is sent
        whole as text; it filters no rows, so the reader must still filter rows by it."""
        reply = self._plan(table.identifier, snapshot_id, predicate or Predicate(), table.schema.arrow_schema)
        return [split_from_proto(s, table) for s in reply.splits]

    def _plan(self, identifier: str, snapshot_id: int | None, predicate: Predicate,
              schema: pa.Schema) -> catalog_pb2.PlanScanResponse:
        req = catalog_pb2.PlanScanRequest(table=table_ident(identifier), filter=plan_filter(predicate, schema))
        if snapshot_id is not None:
            req.snapshot_id = snapshot_id
        return self._conn.call(self._conn.catalog.PlanScan, req, changes_state=False)

    def new_scan(self, identifier: str, *, where: Spec = None, columns: Sequence[str] | None = None,
                 limit: int | None = None, snapshot_id: int | None = None, as_of: dt.datetime | int | None = None,
                 tag: str | None = None) -> Scan:
        """A scan of the table (`Scan`: `to_arrow`, `to_arrow_batch_reader`, `to_pandas`, `to_duckdb`, `plan`).

        Args:
            where: the filter in any form of the predicate language: a text (`"dt = 'a' AND (id < 3 OR v IS
                NULL)"`), `(column, op, value)` tuples (their AND), a `{column: value}` equality mapping (None:
                IS NULL) or a `Predicate`. Literals are cast to their columns' types.
            columns: the columns returned, in this order (default: all).
            limit: stop once this many rows passed the filter.
            snapshot_id, as_of, tag: which snapshot to read, at most one of them (default: the newest).
                `as_of` is a time (a `datetime`, naive ones in local time as `datetime.timestamp` takes them, or
                epoch milliseconds): the newest snapshot committed at or before it. `tag` reads a tagged
                snapshot, also after the snapshot itself expired.

        Raises InvalidInputError naming what does not fit (a column, a value, the filter's text, two snapshot
        choices), NotFoundError for a table, snapshot or tag that does not exist or a time before the first
        snapshot.
        """
        chosen = [n for n, v in (("snapshot_id", snapshot_id), ("as_of", as_of), ("tag", tag)) if v is not None]
        if len(chosen) > 1:
            raise InvalidInputError(f"choose the snapshot by one of snapshot_id, as_of or tag, not by {chosen}")
        info = self._tables.table(identifier)
        predicate = Predicate.of(where, info.arrow_schema)
        tagged = False
        if as_of is not None:
            millis = _epoch_millis(as_of)
            snap = self._snapshots.snapshot_at(identifier, millis)
            if snap is None:
                raise NotFoundError(f"table {identifier} has no snapshot committed at or before {as_of!r} "
                                    f"({millis} ms since the epoch)")
            snapshot_id = snap.id
        elif tag is not None:
            snapshot_id = self._conn.catalog_client.get_tag(identifier, tag).id
            tagged = True
        table = self.open_table(info)
        return Scan(info, table, predicate, columns, limit, snapshot_id, tag,
                    lambda scan: self._plan_scan(scan, tagged))

    def _plan_scan(self, scan: Scan, tagged: bool) -> ScanPlan:
        try:
            reply = self._plan(scan.identifier, scan.snapshot_id, scan.predicate, scan.table.schema.arrow_schema)
        except NotFoundError:
            if not tagged:
                raise
            # the tagged snapshot expired, its files stay while tagged: plan the tag's own snapshot file here
            table = scan.table
            snap = read_tag(table, scan.tag or "")
            return ScanPlan(snap.id, tuple(table.new_scan(scan.predicate, snap).plan()))
        return ScanPlan(reply.snapshot_id, tuple(split_from_proto(s, scan.table) for s in reply.splits))

    def scan(self, identifier: str, *, snapshot_id: int | None = None, where: Spec = None,
             columns: Sequence[str] | None = None, limit: int | None = None, as_of: dt.datetime | int | None = None,
             tag: str | None = None) -> pa.Table:
        """The table's rows at a snapshot (the newest by default), merged, as an Arrow table: `new_scan(...)
        .to_arrow()` (see `new_scan` for the arguments).

        1. the catalog plans the splits (`PlanScan`), pruning partitions and files by `where`;
        2. the splits are read from the warehouse with lsmlake's reader (merge-on-read, deletion vectors);
        3. rows are kept where `where` holds, then `columns` selected, at most `limit` of them.
        """
        return self.new_scan(identifier, where=where, columns=columns, limit=limit, snapshot_id=snapshot_id,
                             as_of=as_of, tag=tag).to_arrow()

    def read_changes(self, identifier: str, start_snapshot: int, end_snapshot: int | None = None, *,
                     where: Spec = None, columns: Sequence[str] | None = None) -> pa.Table:
        """What the commits after `start_snapshot` up to `end_snapshot` (the newest by default) changed, in commit
        order: columns `snapshot_id`, `row_kind` (+I, -U, +U, -D), then `columns` (default: all), rows filtered by
        `where` (any form, as `new_scan` takes it). `start_snapshot=0` reads from the first commit.

        A table with a changelog producer gives its changelog; any other its delta, the rows its APPEND commits
        wrote as they were written (docs/client.md). NotFoundError when `end_snapshot` does not exist or the
        snapshots after `start_snapshot` expired; InvalidInputError when `start_snapshot` > `end_snapshot`."""
        info = self._tables.table(identifier)
        table = self.open_table(info)
        return read_changes(table, start_snapshot, end_snapshot, Predicate.of(where, info.arrow_schema), columns)


def _reads_back(predicate: Predicate, schema: pa.Schema) -> str | None:
    """The predicate's text when the catalog parses it back to the same predicate, else None."""
    try:
        text = predicate.to_text()
        return text if parse_filter(text, schema) == predicate else None
    except (ValueError, LakeError):  # a literal without a text form (bytes that are no UTF-8, ...)
        return None


def plan_filter(predicate: Predicate, schema: pa.Schema) -> str:
    """The filter text the catalog plans with: the whole predicate where its text reads back as the same predicate;
    else the AND of its single terms that do (a weaker filter, so pruning stays safe), since some literals have no
    text the catalog parses (a TIME, a TIMESTAMP(3) with microseconds) or compare unequal to themselves (NaN). The
    reader filters rows by the whole predicate either way."""
    whole = _reads_back(predicate, schema)
    if whole is not None:
        return whole
    kept = [t for t in predicate.terms if _reads_back(Predicate((t,)), schema) is not None]
    return Predicate(tuple(kept)).to_text()


_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)


def _epoch_millis(when: dt.datetime | int) -> int:
    if isinstance(when, dt.datetime):  # exact, not through a float: a snapshot's own time must find it
        aware = when if when.tzinfo is not None else when.astimezone()
        return (aware - _EPOCH) // dt.timedelta(milliseconds=1)
    if isinstance(when, int) and not isinstance(when, bool):
        return when
    raise InvalidInputError(f"as_of must be a datetime or milliseconds since the epoch, not {when!r}")
