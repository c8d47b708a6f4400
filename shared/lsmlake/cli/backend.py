"""Where a command's changes go: one interface, over the library or over the services of a cluster.

The warehouse folder is always read directly (scan, files, levels, ...). Changes to tables go through the
cluster's services when there is a cluster (the `--*-service` flags, or the one `lake up` runs on the
warehouse), else straight into the warehouse folder: `warehouse.open_backend` picks the implementation
(`local_backend`, `remote_backend`) and the commands only see `Backend`. What a write or a compaction did
comes back as an outcome that says it in the command's words (the service's outcome says more).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:  # the interface names them; `lake table list` need not import them
    import pyarrow as pa

    from lsmlake.cli.progress import Progress
    from lsmlake.format.predicate import Predicate
    from lsmlake.format.types import DataField
    from lsmlake.table.file_store_table import FileStoreTable
    from lsmlake.table.scan import Split
    from lsmlake.table.schema_change import SchemaChange


@dataclass(frozen=True)
class Services:
    """The endpoints of a cluster: the catalog always, the others when the cluster has them."""

    catalog: str
    writer: str | None
    compactor: str | None
    kafka: str | None


@dataclass(frozen=True)
class NewTable:
    """A table to create, checked already: its column text (for the catalog service) and parsed columns."""

    identifier: str
    schema_text: str
    fields: tuple[DataField, ...]
    partition_keys: list[str]
    primary_keys: list[str]
    options: dict[str, str]
    comment: str | None


class WriteOutcome(Protocol):
    def report(self, identifier: str, rows: int, files: str) -> str:
        """The line `lake write` prints: `rows` rows from `files` (`2 files`) went to the table."""
        ...


class CompactOutcome(Protocol):
    def report(self, identifier: str) -> list[str]:
        """The lines `lake compact` prints."""
        ...


class Backend(Protocol):
    def create_table(self, table: NewTable, if_not_exists: bool) -> None: ...

    def alter_table(self, identifier: str, changes: Sequence[SchemaChange]) -> int:
        """Apply the changes in order as one new schema; returns its id."""
        ...

    def drop_table(self, identifier: str, if_exists: bool) -> bool:
        """False when the table did not exist (and `if_exists`)."""
        ...

    def write(self, table: FileStoreTable, batches: list[pa.Table], request_id: str | None,
              progress: Progress) -> WriteOutcome:
        """Write checked rows (the table's columns and `_row_kind` codes), not empty, as one commit (a cluster may
        have to take several: its outcome says so), counting them on `progress`."""
        ...

    def plan_scan(self, table: FileStoreTable, snapshot_id: int | None,
                  predicate: Predicate | None) -> tuple[FileStoreTable, list[Split]]:
        """The splits of a scan of `table` at a snapshot (None: the latest), pruned by the predicate (the reader
        still filters rows by it): planned by the catalog service when there is one."""
        ...

    def compact(self, identifier: str, full: bool, partition: Sequence[tuple[str, str]],
                timeout_s: float | None = None) -> CompactOutcome:
        """Compact the table, or the partitions whose columns equal the given texts; `timeout_s` bounds the wait
        for a compactor service."""
        ...

    def rescale(self, identifier: str, buckets: int, partition: Sequence[tuple[str, str]]) -> tuple[int | None, int]:
        """Give a postpone-bucket table's partitions (those matching, or all) `buckets` buckets in one OVERWRITE
        snapshot; returns its id (None: no partition has buckets yet) and how many partitions it rewrote."""
        ...

    def expire(self, identifier: str, retain_min: int | None, retain_max: int | None,
               older_than_ms: int | None) -> list[int]:
        """Expire old snapshots; returns the ids of the expired ones."""
        ...

    def sync_iceberg(self, identifier: str) -> tuple[int, str, int]:
        """Publish the Iceberg metadata of the latest snapshot: (snapshot id, metadata file, snapshots published);
        (0, "", 0) for a table without snapshots."""
        ...
