"""`FileStore`: one table's schema, snapshots and files, and the primitives to scan, read, write and commit them.

`FileStoreTable` (file_store_table.py) adds the one-call batch writes, which also compact where the table needs it."""

from __future__ import annotations

import concurrent.futures
import functools
import hashlib
import logging
import uuid
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import numpy as np
import pyarrow as pa
from pyroaring import BitMap

from lsmlake.errors import CommitConflictError, CommitStateUnknownError, InvalidInputError, NotFoundError
from lsmlake.format import options as opts
from lsmlake.format.binary_row import deserialize_row
from lsmlake.format.data_file_meta import DataFileMeta
from lsmlake.format.data_file_writer import bucket_dir
from lsmlake.format.index_manifest import IndexManifestStore
from lsmlake.format.manifest import ADD, ManifestStore
from lsmlake.format.predicate import Predicate, Spec
from lsmlake.format.schema import SchemaHistory, SchemaManager, TableSchema
from lsmlake.format.snapshot import APPEND, COMPACT, OVERWRITE, Snapshot, SnapshotManager
from lsmlake.fs.file_io import FileIO
from lsmlake.runtime.thread_pools import SharedPool
from lsmlake.table import features
from lsmlake.table.commit import CommitResult, FileStoreCommit, Validation, reusable_look_s
from lsmlake.table.dynamic_bucket import BucketAssigner, CommittingAssigner, is_dynamic
from lsmlake.table.manifest_merge import MergeRules
from lsmlake.table.read import TableRead
from lsmlake.table.scan import Split, TableScan, values_may_match
from lsmlake.table.sequence_numbers import RestoredSequences, SequenceAllocator, SnapshotMaxSequences
from lsmlake.table.write import CommitMessage, TableWrite

_log = logging.getLogger(__name__)
#: a lookup sent ahead of the work that needs it (its own pool: the lookup itself sends requests side by side on
#: `format.snapshot`'s, and a task never waits on a task of its own pool)
_AHEAD = SharedPool("lsmlake-lookup-ahead", 4)


def table_identity(fio: FileIO, schemas: SchemaManager) -> str:
    """The identity of the table whose schema files `schemas` reads, now (see `FileStore.table_uuid`)."""
    ids = schemas.ids()
    if not ids:
        raise NotFoundError(f"no schema in {schemas.dir}")
    digest = hashlib.sha256(fio.read_bytes(schemas.path(ids[0]))).digest()
    return str(uuid.UUID(bytes=digest[:16], version=5))


class FileStore:
    """A Paimon table in a warehouse folder: its files and the primitives over them."""

    def __init__(self, fio: FileIO, path: str, identifier: str, schema: TableSchema) -> None:
        self.io = fio
        self.path = path
        self.identifier = identifier
        self.schemas = SchemaManager(fio, path)
        self.snapshots = SnapshotManager(fio, path)
        self.history = SchemaHistory(self.schemas, self._live_file_schema_ids)
        self._use_schema(schema)

    def _use_schema(self, schema: TableSchema) -> None:
        self.schema = replace(schema, history=self.history)
        self.options = schema.table_options
        self.manifests = ManifestStore(self.io, self.path, schema.types_of(schema.partition_keys),
                                       self.options.get(opts.MANIFEST_COMPRESSION))
        self.indexes = IndexManifestStore(self.io, self.path, self.options.get(opts.MANIFEST_COMPRESSION))

    def refresh_schema(self) -> bool:
        """Switch to the table's latest schema if it was altered since it was loaded; True when it was."""
        if not self.io.file_exists(self.schemas.path(self.schema.id + 1)):
            return False  # one existence check: the common case stays cheap
        latest = self.schemas.latest()
        if latest is None or latest.id <= self.schema.id:
            return False
        self._use_schema(latest)
        return True

    @functools.cached_property
    def table_uuid(self) -> str:
        """The table's identity: a digest of its first schema file (its creation time and definition).

        A table dropped and created again under the same name gets another, so a writer that cached the old
        table's schema can be told apart from one that writes the current table. Paimon's schema JSON has no
        id of its own; the first schema file is immutable and exists for every Paimon table.
        """
        return table_identity(self.io, self.schemas)

    def _live_file_schema_ids(self) -> list[tuple[str, int]]:
        """(file name, schema id) of every live data file of the latest snapshot."""
        latest = self.snapshots.latest()
        if latest is None:
            return []
        live = self.manifests.live(latest.base_manifest_list, latest.delta_manifest_list).values()
        return [(e.file.file_name, e.file.schema_id) for e in live]

    # -- snapshots -----------------------------------------------------------------------------

    def latest_snapshot(self) -> Snapshot | None:
        return self.snapshots.latest()

    def snapshot(self, snapshot_id: int | None = None) -> Snapshot | None:
        """Snapshot `snapshot_id`, or the latest when None (None for an empty table)."""
        if snapshot_id is None:
            return self.snapshots.latest()
        return self.snapshots.snapshot(snapshot_id)

    def schema_of(self, snapshot: Snapshot | None) -> TableSchema:
        """The schema to read a snapshot with: the current one (readers of old files see the new schema)."""
        return self.schema

    # -- write ---------------------------------------------------------------------------------

    def new_write(self, sequences: SequenceAllocator | None = None,
                  assigner: BucketAssigner | None = None) -> TableWrite:
        """A writer of the latest schema (re-read here, so that rows written after an alter carry it).

        Without `sequences` the writer numbers rows above each bucket's maximum in the latest snapshot,
        which is right when it is the only writer of its buckets (see `sequence_numbers`). Without
        `assigner`, a dynamic-bucket table's keys are assigned by commits straight to the table
        (see `dynamic_bucket`).
        """
        latest: concurrent.futures.Future[Snapshot | None] | None = None
        if sequences is None and not self.io.local:
            # on an object store the latest snapshot is looked up while the schema check is under way
            latest = _AHEAD.get().submit(self.snapshots.latest)
        self.refresh_schema()
        features.check(self.schema, self.identifier, for_write=True)
        if assigner is None and is_dynamic(self.schema):
            assigner = self.index_committing_assigner()
        if sequences is None:
            restore = self.max_sequence_restorer() if latest is None else self._restorer_of(latest.result())
            sequences = RestoredSequences(restore)
        return TableWrite(self.io, self.path, self.schema, sequences, assigner=assigner)

    def index_committing_assigner(self, commit_user: str | None = None) -> CommittingAssigner:
        """The bucket assigner of a dynamic-bucket table whose assignments commit straight to the table."""
        def commit(messages: list[CommitMessage]) -> CommitResult:
            return self.new_commit(commit_user).commit(messages, kind=APPEND)
        return CommittingAssigner(self, commit)

    def max_sequence_restorer(self) -> SnapshotMaxSequences:
        """The largest sequence number of a bucket in the latest snapshot (-1 when empty), read on the first call."""
        return self._restorer_of(self.snapshots.latest())

    def _restorer_of(self, latest: Snapshot | None) -> SnapshotMaxSequences:
        return SnapshotMaxSequences(self.manifests, latest)

    def new_commit(self, commit_user: str | None = None) -> FileStoreCommit:
        return FileStoreCommit(self.snapshots, self.manifests, self.schema.id, commit_user or str(uuid.uuid4()),
                               indexes=self.indexes,
                               max_retries=self.options.require(opts.COMMIT_MAX_RETRIES),
                               look_reuse_s=reusable_look_s(self.options),
                               merge_rules=MergeRules(self.options.require(opts.MANIFEST_TARGET_FILE_SIZE),
                                                      self.options.require(opts.MANIFEST_MERGE_MIN_COUNT),
                                                      self.options.require(opts.MANIFEST_FULL_COMPACTION_SIZE)))

    def commit_messages(self, messages: Sequence[CommitMessage], commit_user: str | None = None,
                        properties: dict[str, str] | None = None) -> CommitResult:
        return self.new_commit(commit_user).commit(messages, properties=properties)

    def delete_where(self, predicate: Spec,
                     commit_user: str | None = None) -> CommitResult | None:
        """Delete the rows of an append table matching `predicate` by deletion vectors (no file is rewritten).

        1. find, file by file, the positions of the matching rows still live (`delete_messages`);
        2. add them to the bucket's deletion vectors and write a new deletion-vector index file;
        3. commit the index change as an OVERWRITE snapshot (as Paimon does). A commit that changed the same
           bucket's files or vectors meanwhile (a compaction, another delete) makes it conflict; the delete is then
           redone on the latest snapshot (its rows found again, in the compacted files), up to
           `commit.max-retries` times, so a delete racing the compactor succeeds.
        Returns None when no row matched.
        """
        if self.schema.is_primary_key_table:
            raise InvalidInputError("delete_where is for append tables; write -D rows to a primary-key table")
        if not self.options.get(opts.DELETION_VECTORS_ENABLED):
            raise InvalidInputError(f"table {self.identifier} needs 'deletion-vectors.enabled' = 'true' "
                                    "for deletes")
        features.check(self.schema, self.identifier, for_write=True)
        pred = Predicate.of(predicate, self.schema)
        if pred.accepts_all:
            raise InvalidInputError("delete_where needs a predicate (to empty a table, overwrite it)")
        user = commit_user or str(uuid.uuid4())
        redos = self.options.require(opts.COMMIT_MAX_RETRIES)
        found: dict[str, BitMap] = {}  # the matching positions of the files read so far (they never change)
        for attempt in range(redos + 1):
            read = self.snapshots.latest()
            messages = self.delete_messages(pred, read, found)
            if not messages:
                return None
            try:
                return self.new_commit(user).commit(messages, kind=OVERWRITE,
                                                    validate=self._no_rows_added_since(read, pred, found))
            except CommitStateUnknownError:
                raise
            except CommitConflictError as e:
                self._delete_index_files(messages)
                if attempt == redos:
                    raise
                _log.info("delete from %s conflicted (%s); redone on the latest snapshot", self.identifier, e)
            except BaseException:
                self._delete_index_files(messages)
                raise
        raise AssertionError("unreachable")

    def delete_messages(self, pred: Predicate, snapshot: Snapshot | None,
                        found: dict[str, BitMap] | None = None) -> list[CommitMessage]:
        """The deletion-vector changes that delete the rows matching `pred` at `snapshot`, one message per bucket
        that has such rows (its new vector files written, not committed).

        `found` keeps, by data file name, the positions of the file's rows that match `pred` (deleted or not): data
        files never change, so a delete redone after a conflict reads only the files that are new since.
        """
        from lsmlake.format.index_manifest import dv_index_change
        from lsmlake.table.read import load_vectors

        found = {} if found is None else found
        messages: list[CommitMessage] = []
        if snapshot is None:
            return messages
        for split in self.new_scan(pred, snapshot, all_levels=True).plan():
            vectors = load_vectors(self.io, self.path, split.dv_index)
            directory = bucket_dir(self.path, self.schema.partition_dir(split.partition_values), split.bucket)
            changed = False
            for f in split.files:
                hit = self._matching_positions(f, directory, pred, found)
                if not hit:
                    continue
                vector = vectors.get(f.file_name)
                if vector is None or not hit <= vector:
                    vectors[f.file_name] = hit | vector if vector is not None else BitMap(hit)
                    changed = True
            if changed:
                added, removed = dv_index_change(self.indexes, split, vectors)
                messages.append(CommitMessage(split.partition, split.bucket, split.total_buckets,
                                              new_index_files=added, deleted_index_files=removed))
        return messages

    def _matching_positions(self, f: DataFileMeta, directory: str, pred: Predicate,
                            found: dict[str, BitMap]) -> BitMap:
        """The positions of a data file's rows that match `pred` (deleted or not), read once: data files never
        change, so `found` keeps them by file name."""
        hit = found.get(f.file_name)
        if hit is None:
            from lsmlake.format.data_file_read import ROW_POSITION, read_data_file
            from lsmlake.table.read import filter_rows

            file_schema = self.history.file_schema(f.schema_id, self.schema)
            rows = read_data_file(self.io, f.path_in(directory), self.schema, sorted(pred.columns()), [], None,
                                  positions=True, file_schema=file_schema)
            hit = found[f.file_name] = BitMap(filter_rows(rows, pred).column(ROW_POSITION).to_numpy().astype(np.uint32))
        return hit

    def _no_rows_added_since(self, read: Snapshot | None, pred: Predicate, found: dict[str, BitMap]) -> Validation:
        """The check a delete by predicate makes before it publishes: no snapshot since the one it read added a data
        file holding a row that matches the predicate (a compaction adds none: it rewrites rows already there).
        Without it the delete would land after rows it should have deleted, and leave them (it is serializable
        with it). A file whose statistics rule the predicate out is not read; one without statistics (pypaimon
        writes none) is, into `found`, so that a steady writer of other rows never starves the delete and a redo
        does not read it again."""
        part_pred = pred.only(self.schema.partition_keys)
        checked = [read.id if read is not None else 0]

        def validate(latest: Snapshot | None) -> None:
            for sid in range(checked[0] + 1, (latest.id if latest is not None else 0) + 1):
                snap = self.snapshots.snapshot(sid)
                if snap.commit_kind != COMPACT:
                    for meta in self.manifests.read_list(snap.delta_manifest_list):
                        for e in self.manifests.read_manifest(meta.file_name):
                            if e.kind != ADD:
                                continue
                            values = self.partition_values(e.partition)
                            if not part_pred.test(dict(zip(self.schema.partition_keys, values, strict=True))) \
                                    or not values_may_match(self.schema, e.file, pred):
                                continue
                            directory = bucket_dir(self.path, self.schema.partition_dir(values), e.bucket)
                            # a file of a schema newer than ours is not read here: the redo reads it under that schema
                            if e.file.schema_id > self.schema.id \
                                    or self._matching_positions(e.file, directory, pred, found):
                                raise CommitConflictError(
                                    f"snapshot {sid} added rows that may match the delete since it read snapshot "
                                    f"{checked[0]}; this delete was not applied")
                checked[0] = sid

        return validate

    def _delete_index_files(self, messages: Sequence[CommitMessage]) -> None:
        """Remove the index files written for messages whose commit definitely failed."""
        for m in messages:
            for e in m.new_index_files:
                self.io.delete_quietly(self.indexes.index_path(e.file_name))

    # -- read ----------------------------------------------------------------------------------

    def new_scan(self, predicate: Spec = None,
                 snapshot: Snapshot | int | None = None, all_levels: bool = False) -> TableScan:
        """Plan a snapshot (latest by default) with the table's latest schema (re-read if it was altered)."""
        self.refresh_schema()
        snap = snapshot if isinstance(snapshot, Snapshot) or snapshot is None else self.snapshots.snapshot(snapshot)
        if snapshot is None:
            snap = self.snapshots.latest()
        return TableScan(self.schema, self.manifests, snap, Predicate.of(predicate, self.schema),
                         all_levels, self.indexes)

    def new_read(self, projection: Sequence[str] | None = None,
                 predicate: Spec = None) -> TableRead:
        features.check(self.schema, self.identifier, for_write=False)
        return TableRead(self.io, self.path, self.schema, projection, Predicate.of(predicate, self.schema))

    def to_arrow(self, snapshot_id: int | None = None, projection: Sequence[str] | None = None,
                 predicate: Spec = None) -> pa.Table:
        """The table's rows at a snapshot (latest by default), merged."""
        self.refresh_schema()
        pred = Predicate.of(predicate, self.schema)
        splits = self.new_scan(pred, snapshot_id).plan()
        return self.new_read(projection, pred).read(splits)

    def plan(self, snapshot_id: int | None = None, all_levels: bool = True) -> list[Split]:
        """Every live file of a snapshot, by (partition, bucket) (level 0 included unless asked otherwise)."""
        return self.new_scan(None, snapshot_id, all_levels).plan()

    def partition_values(self, partition: bytes) -> list[Any]:
        return deserialize_row(partition, self.schema.types_of(self.schema.partition_keys))

    def require_snapshot(self, snapshot_id: int | None) -> Snapshot:
        s = self.snapshot(snapshot_id)
        if s is None:
            raise NotFoundError(f"table {self.identifier} has no snapshot yet")
        return s
