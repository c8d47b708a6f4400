"""`Scan`: one read of a table through the `Client`, as pyiceberg's and pypaimon's users know it.

`Client.new_scan` resolves the snapshot (an id, a time, a tag or the newest) and binds the filter to the table's
columns; the catalog plans the splits once (`plan`), sending it the whole filter as text; the splits are read from
the warehouse with lsmlake's reader, which merges and then filters rows by the whole filter. Every output
(`to_arrow`, `to_arrow_batch_reader`, `to_pandas`, `to_duckdb`) reads the same plan, so they all see one snapshot.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from lsmlake.client.schema import shown
from lsmlake.client.tables import TableInfo
from lsmlake.errors import InvalidInputError
from lsmlake.format.predicate import Predicate
from lsmlake.table.file_store_table import FileStoreTable
from lsmlake.table.read import TableRead
from lsmlake.table.scan import Split

if TYPE_CHECKING:
    import duckdb
    import pandas


@dataclass(frozen=True, repr=False)
class ScanPlan:
    """The catalog's plan of a scan: the snapshot read (0: the table had none) and its splits."""

    snapshot_id: int
    splits: tuple[Split, ...]

    @property
    def files(self) -> int:
        return sum(len(s.files) for s in self.splits)

    @property
    def rows(self) -> int:
        """Rows in the planned files, before the merge and the filter (an upper bound of what a read returns)."""
        return sum(s.row_count for s in self.splits)

    def __repr__(self) -> str:
        return (f"ScanPlan(snapshot_id={self.snapshot_id}, {len(self.splits)} splits, {self.files} files, "
                f"{self.rows} rows before merge and filter)")


class Scan:
    """A read of one table at one snapshot, filtered, projected and limited (from `Client.new_scan`).

    The plan is made on first use and kept: every read of the same `Scan` reads the same snapshot. `limit` stops
    reading splits once that many rows passed the filter.
    """

    def __init__(self, info: TableInfo, table: FileStoreTable, predicate: Predicate, columns: Sequence[str] | None,
                 limit: int | None, snapshot_id: int | None, tag: str | None,
                 planner: Callable[[Scan], ScanPlan]) -> None:
        names = info.arrow_schema.names
        if columns is not None:
            if isinstance(columns, str):
                raise InvalidInputError(f"columns must be a list of column names, not the text {columns!r}")
            unknown = [c for c in columns if c not in names]
            if unknown:
                raise InvalidInputError(f"columns {unknown} are not columns of {info.identifier} (columns: {names})")
        if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 0):
            raise InvalidInputError(f"limit must be a whole number >= 0, not {limit!r}")
        self.info = info
        self.table = table
        self.predicate = predicate
        self.columns: tuple[str, ...] = tuple(columns) if columns is not None else tuple(names)
        self.limit = limit
        self.snapshot_id = snapshot_id  # asked for (by id, time or tag); None: the newest when planned
        self.tag = tag
        self._planner = planner
        self._plan: ScanPlan | None = None

    @property
    def identifier(self) -> str:
        return self.info.identifier

    def plan(self) -> ScanPlan:
        """The catalog's plan (made once, then kept): the snapshot and the splits the filter may match."""
        if self._plan is None:
            self._plan = self._planner(self)
        return self._plan

    @property
    def splits(self) -> list[Split]:
        return list(self.plan().splits)

    @property
    def schema(self) -> pa.Schema:
        """The Arrow schema of what the scan returns."""
        full = self.table.schema.arrow_schema
        return pa.schema([full.field(n) for n in self.columns])

    def _read(self) -> TableRead:
        return self.table.new_read(list(self.columns), self.predicate)

    def _tables(self) -> Iterator[pa.Table]:
        """The rows split by split, at most `limit` in all; a split is read only while more rows are wanted."""
        out_schema = self.schema
        read = self._read()
        left = self.limit
        for split in self.plan().splits:
            if left == 0:
                return
            t = read.read_split(split)
            if not t.num_rows:
                continue
            if left is not None:
                t = t.slice(0, left)
                left -= t.num_rows
            try:
                t = t.cast(out_schema)  # the NOT NULL markers the read drops to concatenate files
            except (pa.ArrowInvalid, ValueError):
                pass  # a NOT NULL column added by schema evolution reads as null in old files
            yield t

    def to_arrow_batch_reader(self) -> pa.RecordBatchReader:
        """The rows as a stream of record batches, read split by split as the stream is consumed: at most one
        split's rows are held at a time."""
        schema = self.schema

        def batches() -> Iterator[pa.RecordBatch]:
            for t in self._tables():
                yield from t.to_batches()
        return pa.RecordBatchReader.from_batches(schema, batches())

    def to_arrow(self) -> pa.Table:
        """The rows as one Arrow table."""
        if self.limit is None:  # every split is wanted: read them two at a time
            return self._read().read(list(self.plan().splits))
        tables = list(self._tables())
        return pa.concat_tables(tables) if tables else self.schema.empty_table()

    def to_pandas(self, **kwargs: Any) -> pandas.DataFrame:
        """The rows as a pandas DataFrame (`kwargs` go to `pyarrow.Table.to_pandas`); needs pandas."""
        try:
            import pandas  # noqa: F401  (pyarrow's conversion needs it)
        except ImportError:
            raise InvalidInputError("to_pandas needs pandas, which is not installed") from None
        return self.to_arrow().to_pandas(**kwargs)

    def to_duckdb(self, table_name: str, connection: duckdb.DuckDBPyConnection | None = None
                  ) -> duckdb.DuckDBPyConnection:
        """The rows registered as view `table_name` of a DuckDB connection (a new in-memory one by default),
        which is returned; needs duckdb."""
        try:
            import duckdb
        except ImportError:
            raise InvalidInputError("to_duckdb needs duckdb, which is not installed (pip install duckdb)") from None
        con = connection if connection is not None else duckdb.connect()
        con.register(table_name, self.to_arrow())
        return con

    def __repr__(self) -> str:
        at = (f"tag={self.tag!r}" if self.tag is not None
              else f"snapshot_id={self.snapshot_id}" if self.snapshot_id is not None else "latest")
        where = f", where={_short(self.predicate)!r}" if not self.predicate.accepts_all else ""
        columns = f", columns=[{shown(list(self.columns))}]" if self.columns != tuple(self.info.arrow_schema.names) \
            else ""
        limit = f", limit={self.limit}" if self.limit is not None else ""
        return f"Scan({self.identifier}, {at}{where}{columns}{limit})"


def _short(predicate: Predicate, chars: int = 80) -> str:
    try:
        text = predicate.to_text()
    except ValueError:  # a literal without a text form (bytes that are no UTF-8)
        return f"<a filter on {', '.join(sorted(predicate.columns()))}>"
    return text if len(text) <= chars else text[:chars - 3] + "..."
