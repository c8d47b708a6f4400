"""The options of `spark.read/readStream/write.format("lsmlake")`, read and checked once."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field

import pyarrow as pa

from lsmlake.catalog.filesystem import split_identifier
from lsmlake.client.connection import STORAGE_OPTION_KEYS
from lsmlake.errors import InvalidInputError
from lsmlake.format.predicate import Predicate
from lsmlake.fs import StorageSettings
from lsmlake.spark.access import TableAccess, open_access, parse_timestamp

DEFAULT_SPLIT_TARGET_BYTES = 128 << 20  # as Spark's own spark.sql.files.maxPartitionBytes
DEFAULT_WRITE_BUFFER_BYTES = 128 << 20

# key -> what it means (also the list of accepted keys, for the error on a typo)
KEYS = {
    "path": "the table, DATABASE.TABLE (the argument of load/save)",
    "table": "the table, DATABASE.TABLE, when load/save get no argument",
    "catalog": "host:port of the catalog service",
    "warehouse": "the warehouse folder or URI (alone: no services; with catalog: where this job sees the files)",
    "snapshot": "batch read: read this snapshot id (time travel); stream read: start after it",
    "timestamp": "batch read: read the newest snapshot at or before this time (ms since the epoch or ISO-8601)",
    "filter": "rows to read, in the predicate language (AND, OR, parentheses; docs/filters.md), pruning partitions "
              "and files, e.g. \"dt = '2024-01-01' AND (id < 3 OR id IS NULL)\"",
    "columns": "comma-separated columns to read (column pruning)",
    "row-kind": "true: add a `_row_kind` column (+I, -U, +U, -D): the change kind in streams, +I in batch reads",
    "split.target-size": "most bytes of files per Spark partition (a larger split that must be merged stays whole)",
    "split.parallelism": "Spark partitions to spread a read over (default: the session's default parallelism)",
    "write.buffer-size": "bytes of rows a write task gathers before writing them as files",
}

# Spark hands options over with lower-cased keys: pypaimon's camel-case keys are found again through this
_STORAGE_KEYS = {k.lower(): k for k in sorted(STORAGE_OPTION_KEYS)}
KEYS.update({k: "object-store setting for the driver and the executors (docs/storage.md)"
             for k in sorted(STORAGE_OPTION_KEYS)})


def _int(options: Mapping[str, str], key: str, default: int | None, minimum: int) -> int | None:
    raw = options.get(key)
    if raw is None or raw == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        raise InvalidInputError(f"option {key!r} = {raw!r} is not an integer") from None
    if value < minimum:
        raise InvalidInputError(f"option {key!r} = {value} must be at least {minimum}")
    return value


def _bool(options: Mapping[str, str], key: str) -> bool:
    raw = options.get(key, "false").strip().lower()
    if raw not in ("true", "false"):
        raise InvalidInputError(f"option {key!r} = {raw!r}: use true or false")
    return raw == "true"


@dataclass(frozen=True)
class ReadOptions:
    """Everything a read or write job was asked for (plain values: pickled to Spark's Python workers)."""

    identifier: str
    catalog: str | None
    warehouse: str | None
    snapshot: int | None
    timestamp_ms: int | None
    filter: str
    columns: tuple[str, ...] | None
    row_kind: bool
    split_target_bytes: int
    write_buffer_bytes: int
    parallelism: int
    # storage options (`s3.*`, `fs.s3.*`) under their canonical keys; kept out of repr: they hold secrets
    storage: tuple[tuple[str, str], ...] = field(default=(), repr=False)

    @staticmethod
    def parse(raw: Mapping[str, str], base_dir: str | None = None, parallelism: int | None = None) -> ReadOptions:
        """`base_dir`: where a relative `warehouse` is (the driver's folder at `register`; Spark runs this in
        Python workers whose folder is the JVM's, not the user's). `parallelism`: the session's cores (its
        default parallelism at `register`), the default of `split.parallelism`; else this machine's CPUs."""
        options = {str(k).lower(): str(v) for k, v in raw.items()}
        unknown = sorted(k for k in options if k not in KEYS and k not in _STORAGE_KEYS)
        if unknown:
            raise InvalidInputError(f"unknown lsmlake option(s) {unknown}; known: {sorted(KEYS)}")
        identifier = options.get("path") or options.get("table")
        if not identifier:
            raise InvalidInputError('name the table: load("db.t") / save("db.t") or option("table", "db.t")')
        split_identifier(identifier)
        if not options.get("catalog") and not options.get("warehouse"):
            raise InvalidInputError("lsmlake needs option('catalog', 'host:port') or option('warehouse', DIR)")
        snapshot = _int(options, "snapshot", None, 0)
        ts = options.get("timestamp")
        if snapshot is not None and ts:
            raise InvalidInputError("options 'snapshot' and 'timestamp' exclude each other")
        cols = options.get("columns")
        columns = tuple(c.strip() for c in cols.split(",") if c.strip()) if cols else None
        return ReadOptions(
            identifier, options.get("catalog") or None, _resolve(options.get("warehouse") or None, base_dir), snapshot,
            parse_timestamp(ts) if ts else None, options.get("filter", ""), columns,
            _bool(options, "row-kind"),
            _int(options, "split.target-size", DEFAULT_SPLIT_TARGET_BYTES, 1) or DEFAULT_SPLIT_TARGET_BYTES,
            _int(options, "write.buffer-size", DEFAULT_WRITE_BUFFER_BYTES, 1) or DEFAULT_WRITE_BUFFER_BYTES,
            _int(options, "split.parallelism", None, 1) or parallelism or os.cpu_count() or 1,
            _storage(options))

    def access(self) -> TableAccess:
        opts = {"catalog": self.catalog or "", "warehouse": self.warehouse or ""}
        return open_access(opts, self.identifier, dict(self.storage))

    def predicate(self, schema: pa.Schema) -> Predicate:
        return Predicate.of(self.filter, schema)

    def snapshot_id(self, access: TableAccess) -> int | None:
        """The snapshot a batch read reads: `snapshot`, the one at `timestamp`, or None for the newest."""
        if self.timestamp_ms is not None:
            return access.snapshot_at(self.timestamp_ms)
        if self.snapshot is not None:
            access.table.snapshots.snapshot(self.snapshot)  # NotFoundError naming the id before any work
        return self.snapshot


def _storage(options: Mapping[str, str]) -> tuple[tuple[str, str], ...]:
    """The storage options given, under their canonical keys; a bad path-style flag fails here, on the driver."""
    found = tuple(sorted((_STORAGE_KEYS[k], v) for k, v in options.items() if k in _STORAGE_KEYS))
    StorageSettings.from_options(dict(found))
    return found


def _resolve(warehouse: str | None, base_dir: str | None) -> str | None:
    """A relative local warehouse path against `base_dir`; URIs and absolute paths as they are."""
    if warehouse is None or base_dir is None or "://" in warehouse or os.path.isabs(warehouse):
        return warehouse
    return os.path.join(base_dir, warehouse)
