"""Commits of snapshots that a Paimon engine built itself: the REST catalog's `commit`.

A Paimon client speaking the REST catalog protocol (pypaimon, paimon-rust, the Java engines) writes its
data files, manifests and manifest lists, and asks the catalog to publish the snapshot that names them.
The catalog publishes it only if it could have come from a writer of this table building on the latest
snapshot; under the table's commit lock (shared by catalog replicas):
1. snapshots published without a record are recorded first (as for every commit);
2. the snapshot must be the next one: an id already taken is a lost race, answered `False` (the client
   reads the latest snapshot again and rebuilds; Paimon's protocol) unless it is this very snapshot,
   published by an earlier attempt whose answer was lost (`True`); a gap is refused;
3. its shape is checked (kinds, names that are not paths, numbers a Java long holds, a schema the table
   has), its manifest lists and index manifest must be files of the table that read as such, and its base
   must hold exactly the files of the latest snapshot (a client cannot drop files by leaving them out);
4. the caller's role must allow what its index manifest changes (`identity.check_rights`: the HASH
   index is the bucket assigner's, dropping deletion vectors an admin's), as its kind and properties;
5. the file changes of its delta are checked like every commit's (`checks`: new files exist under
   the table with the sizes the manifests say; an APPEND deletes nothing), adds are new to the table,
   deletes are of live files, no changelog file is a data file (`live_files`), and the counts add up;
6. a bare commit user (no principal's namespace) must be the caller's or nobody's on this table, and is
   the caller's from then on (`identity.check_commit_user`);
7. the snapshot is published as sent (fields lsmlake does not know are kept) but dated by the catalog's
   clock, then recorded with its events like any snapshot found in the warehouse (`reconcile`), in the same
   metadata-store transaction.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from lsmlake.auth.principal import SEPARATOR, current_principal, owned
from lsmlake.auth.tokens import Principal
from lsmlake.catalog.commit.catalog_commits import AFTER_SNAPSHOT, CatalogCommits, check_table_identity
from lsmlake.catalog.commit.checks import MAX_TIME_MS, MIN_TIME_MS, check_changes, check_file_name
from lsmlake.catalog.commit.identity import check_commit_user, check_rights
from lsmlake.catalog.commit.request import MAX_PROPERTIES, MAX_PROPERTY_CHARS
from lsmlake.catalog.live_files import LiveFiles
from lsmlake.catalog.reconcile import WRITES_PROPERTY, reconcile_table, snapshot_changes
from lsmlake.errors import CorruptMetadataError, InvalidInputError, LakeError, NotFoundError, PermissionDeniedError
from lsmlake.format.index_manifest import IndexEntry
from lsmlake.format.snapshot import ANALYZE, APPEND, COMMIT_KINDS, OVERWRITE, Snapshot
from lsmlake.table import index_changes
from lsmlake.table.file_store_table import FileStoreTable
from lsmlake.table.write import CommitMessage

_log = logging.getLogger(__name__)

MAX_SNAPSHOT_ID = 2**62
_LONG = (-2**63, 2**63 - 1)
_COUNT = (0, 2**63 - 1)
_TIME = (MIN_TIME_MS, MAX_TIME_MS)
#: attribute, JSON name, the range a Paimon engine (a Java long) can read back
_INT_FIELDS = (("id", "id", (1, MAX_SNAPSHOT_ID)), ("schema_id", "schemaId", (0, 2**31 - 1)),
               ("commit_identifier", "commitIdentifier", _LONG), ("time_millis", "timeMillis", _TIME),
               ("total_record_count", "totalRecordCount", _COUNT), ("delta_record_count", "deltaRecordCount", _LONG))
_OPTIONAL_INT_FIELDS = (("changelog_record_count", "changelogRecordCount", _COUNT),
                        ("watermark", "watermark", _LONG), ("next_row_id", "nextRowId", _COUNT),
                        ("base_manifest_list_size", "baseManifestListSize", _COUNT),
                        ("delta_manifest_list_size", "deltaManifestListSize", _COUNT),
                        ("changelog_manifest_list_size", "changelogManifestListSize", _COUNT),
                        ("version", "version", (1, 2**31 - 1)))
_LIVE = LiveFiles()


@dataclass(frozen=True)
class SnapshotCommitRequest:
    """A snapshot a client built, to publish as the table's next one.

    `table_uuid` (the REST `tableId`) and `base_snapshot_uuid`, when set, name the table and the snapshot the
    client built on: another table under the name is refused, another latest snapshot is a lost race.
    """

    table_id: str
    snapshot: Snapshot
    table_uuid: str = ""
    base_snapshot_uuid: str | None = None


def parse_snapshot(doc: Any, where: str = "snapshot") -> Snapshot:
    """A snapshot from its JSON object; InvalidInputError naming the field that is missing or of the wrong type."""
    if not isinstance(doc, dict):
        raise InvalidInputError(f"{where} must be a JSON object")
    try:
        snap = Snapshot.from_json(json.dumps(doc))
    except (CorruptMetadataError, TypeError) as e:
        raise InvalidInputError(f"{where}: {e}") from None
    check_snapshot_shape(snap, where)
    return snap


def _is_int(v: object) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def check_snapshot_shape(snap: Snapshot, where: str = "snapshot") -> None:
    """InvalidInputError naming the first field of `snap` no Paimon writer sends."""
    for attr, name, (low, high) in _INT_FIELDS + _OPTIONAL_INT_FIELDS:
        v = getattr(snap, attr)
        if v is None and (attr, name, (low, high)) in _OPTIONAL_INT_FIELDS:
            continue
        if not _is_int(v) or not low <= v <= high:
            raise InvalidInputError(f"{where}.{name} must be an integer in {low}..{high}, got {str(v)[:40]}")
    if snap.commit_kind not in COMMIT_KINDS:
        raise InvalidInputError(f"{where}.commitKind {snap.commit_kind!r} is not one of {', '.join(COMMIT_KINDS)}")
    if not isinstance(snap.commit_user, str) or not snap.commit_user or len(snap.commit_user) > 1024:
        raise InvalidInputError(f"{where}.commitUser must be a non-empty string of at most 1024 characters")
    for attr, name in (("base_manifest_list", "baseManifestList"), ("delta_manifest_list", "deltaManifestList")):
        v = getattr(snap, attr)
        check_file_name(v if isinstance(v, str) else "", f"{where}.{name}")
    for attr, name in (("changelog_manifest_list", "changelogManifestList"), ("index_manifest", "indexManifest"),
                       ("statistics", "statistics")):
        v = getattr(snap, attr)
        if v is not None:
            check_file_name(v if isinstance(v, str) else "", f"{where}.{name}")
    props = snap.properties
    if props is not None:
        if not isinstance(props, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in props.items()):
            raise InvalidInputError(f"{where}.properties must be an object of strings")
        if len(props) > MAX_PROPERTIES or any(len(k) + len(v) > MAX_PROPERTY_CHARS for k, v in props.items()):
            raise InvalidInputError(f"{where}.properties: at most {MAX_PROPERTIES} entries of at most "
                                    f"{MAX_PROPERTY_CHARS} chars")
        if WRITES_PROPERTY in props:
            raise InvalidInputError(f"{where}.properties: {WRITES_PROPERTY!r} is the catalog's own property")
    if snap.uuid is not None and not isinstance(snap.uuid, str):
        raise InvalidInputError(f"{where}.uuid must be a string")


def _same_snapshot(a: Snapshot, b: Snapshot) -> bool:
    """Whether `a` is the snapshot `b` (a resend of a published snapshot): the same commit and manifests."""
    return (a.commit_user, a.commit_identifier, a.commit_kind, a.base_manifest_list, a.delta_manifest_list) == \
        (b.commit_user, b.commit_identifier, b.commit_kind, b.base_manifest_list, b.delta_manifest_list)


def _check_files_exist(table: FileStoreTable, snap: Snapshot) -> None:
    for name in (snap.base_manifest_list, snap.delta_manifest_list, snap.changelog_manifest_list,
                 snap.index_manifest):
        if name is not None and not table.io.exists(table.manifests.path(name)):
            raise InvalidInputError(f"snapshot: manifest file {name} does not exist under {table.identifier}; "
                                    "write the manifests before committing")
    try:
        for list_name in (snap.base_manifest_list, snap.delta_manifest_list, snap.changelog_manifest_list):
            for meta in table.manifests.read_list(list_name) if list_name else ():
                check_file_name(meta.file_name, f"snapshot: manifest list {list_name}")
                if not table.io.exists(table.manifests.path(meta.file_name)):
                    raise InvalidInputError(f"snapshot: manifest {meta.file_name} named by {list_name} does not "
                                            "exist")
    except CorruptMetadataError as e:
        raise InvalidInputError(f"snapshot: a manifest list does not read as one: {e}") from None


def _check_base(table: FileStoreTable, snap: Snapshot, latest: Snapshot | None) -> None:
    """The base must hold what the latest snapshot holds: the same manifests, or (merged) the same live files."""
    mine = [m.file_name for m in table.manifests.read_list(snap.base_manifest_list)]
    if latest is None:
        if mine and table.manifests.live(snap.base_manifest_list, snap.base_manifest_list):
            raise InvalidInputError("snapshot: the table has no snapshot yet, but the base manifest list names files")
        return
    previous = [m.file_name for m in table.manifests.snapshot_manifests(latest.base_manifest_list,
                                                                          latest.delta_manifest_list)]
    if sorted(mine) == sorted(previous):
        return
    # an engine that merges manifests (Paimon's Java writers) rewrites the base: compare what it holds
    held = table.manifests.live(snap.base_manifest_list, snap.base_manifest_list)
    live = table.manifests.live(latest.base_manifest_list, latest.delta_manifest_list)
    if held.keys() != live.keys():
        missing, extra = len(live.keys() - held.keys()), len(held.keys() - live.keys())
        raise InvalidInputError(f"snapshot: its base does not hold the files of the latest snapshot {latest.id} "
                                f"({missing} missing, {extra} not in it); build on the latest snapshot")


@dataclass(frozen=True)
class IndexDiff:
    """How an index manifest sent whole differs from the latest snapshot's: the entries it adds and removes."""

    current: list[IndexEntry]  # the latest snapshot's entries
    added: tuple[IndexEntry, ...] = ()
    removed: tuple[IndexEntry, ...] = ()


def diff_index_manifest(table: FileStoreTable, latest: Snapshot | None, sent_name: str | None) -> IndexDiff:
    latest_name = latest.index_manifest if latest is not None else None
    if sent_name == latest_name:
        return IndexDiff([])
    current = table.indexes.read(latest_name)
    added, removed = index_changes.diff(current, table.indexes.read(sent_name))
    return IndexDiff(current, added, removed)


def check_index_manifest(table: FileStoreTable, latest: Snapshot | None, sent_name: str | None,
                         changes: list[CommitMessage], kind: str = APPEND) -> None:
    """The index manifest a client sent whole may differ from the latest one only as a commit's index changes may
    (see `check_index_diff`)."""
    check_index_diff(table, latest, diff_index_manifest(table, latest, sent_name), changes, kind)


def check_index_diff(table: FileStoreTable, latest: Snapshot | None, d: IndexDiff, changes: list[CommitMessage],
                     kind: str = APPEND) -> None:
    """An index manifest's changes as a commit's index changes may be (`index_changes`): new index files exist in
    the table's index folder, no bucket holds two files of a type, no vector marks a file that is not live, and no
    vector of a live file nor any HASH key is dropped."""
    for i, e in enumerate(d.added):
        check_file_name(e.file_name, f"snapshot: index manifest entry {i}")
        if e.external_path is not None:
            raise InvalidInputError(f"snapshot: index file {e.file_name} has an external path; lsmlake keeps index "
                                    "files in the table's index folder")
        if not table.io.exists(table.indexes.index_path(e.file_name)):
            raise InvalidInputError(f"snapshot: index file {e.file_name} does not exist under {table.identifier}")
    if not d.added and not d.removed:
        return
    live = set(_LIVE.at(table, latest)) if latest is not None else set()
    for c in changes:
        live -= {(c.partition, c.bucket, f.file_name) for f in c.deleted_files}
        live |= {(c.partition, c.bucket, f.file_name) for f in c.new_files}
    # an overwrite that leaves none of a partition's files replaces the partition, and its index with it
    replaced: frozenset[bytes] = frozenset()
    if kind == OVERWRITE:
        before = {p for p, _, _ in _LIVE.at(table, latest)} if latest is not None else set()
        replaced = frozenset(before - {p for p, _, _ in live})
    change = index_changes.IndexChange(d.added, d.removed, replaced_partitions=replaced, sent_whole=True)
    index_changes.apply_index_change(d.current, change, live, table.indexes)


def commit_snapshot(commits: CatalogCommits, request: SnapshotCommitRequest,
                    fault_point: Callable[[str], None] | None = None) -> bool:
    """Publish `request.snapshot` as the table's next snapshot (see the module); False when another commit won
    the id (the client rebuilds on the latest snapshot and sends again)."""
    snap, tid = request.snapshot, request.table_id
    check_snapshot_shape(snap)
    principal = current_principal()
    # what its kind and properties need, before any file is read; its index changes are read under the lock
    check_rights(snap.commit_kind, snap.properties or {}, principal)
    if SEPARATOR in snap.commit_user and (principal is None or owned(snap.commit_user, principal) != snap.commit_user):
        # gRPC callers' commit users are `<principal>/<name>`: nobody may claim another principal's commits
        raise PermissionDeniedError(f"snapshot.commitUser {snap.commit_user[:80]!r} names another principal's "
                                    f"commits ('{SEPARATOR}' joins a principal to its commit users); use a name "
                                    f"without '{SEPARATOR}'")
    store = commits.store
    with store.commit_lock(tid):
        table = commits.catalog.get_table(tid)
        check_table_identity(table, request.table_uuid)
        commits.reconcile(tid, table)
        latest = table.snapshots.latest()
        next_id = (latest.id if latest is not None else 0) + 1
        if snap.id < next_id:
            try:
                taken = table.snapshots.snapshot(snap.id)
            except NotFoundError:  # expired since: certainly not a resend of a live commit
                return False
            return _same_snapshot(taken, snap)
        if snap.id > next_id:
            raise InvalidInputError(f"snapshot: id {snap.id} does not follow the latest snapshot "
                                    f"{next_id - 1}; build on the latest snapshot")
        if request.base_snapshot_uuid and latest is not None and latest.uuid \
                and latest.uuid != request.base_snapshot_uuid:
            return False
        if snap.schema_id > table.schema.id or not table.io.exists(table.schemas.path(snap.schema_id)):
            raise InvalidInputError(f"snapshot: schemaId {snap.schema_id} is not a schema of {table.identifier}")
        _check_written(table, snap, latest, principal)
        check_commit_user(store.commit_users, tid, snap.commit_user, principal)
        snap = _dated(snap, latest, commits.clock())
        if not table.snapshots.publish(snap):  # a writer outside the catalog took the id meanwhile
            return False
        if fault_point is not None:
            fault_point(AFTER_SNAPSHOT)
        # the commit record and its events, like any snapshot found published (not counted as one found)
        reconcile_table(store, table, tid, commits.encode_events, expected=True)
    commits.committed(table)
    _log.info("published snapshot %d of %s built by %s (%s)", snap.id, tid, snap.commit_user, snap.commit_kind,
              extra={"table": tid, "snapshot_id": snap.id, "commit_kind": snap.commit_kind,
                     "commit_user": snap.commit_user})
    return True


def _check_written(table: FileStoreTable, snap: Snapshot, latest: Snapshot | None,
                   principal: Principal | None) -> None:
    """Everything the snapshot names, read from the files the client wrote (see the module): InvalidInputError
    naming the first problem; a file that does not read as what the snapshot says it is, too; PermissionDeniedError
    when its index changes need a role the caller does not have."""
    try:
        _check_files_exist(table, snap)
        index = diff_index_manifest(table, latest, snap.index_manifest)
        check_rights(snap.commit_kind, snap.properties or {}, principal, index_added=index.added,
                     index_removed=index.removed)
        _check_base(table, snap, latest)
        changes = snapshot_changes(table, snap)
        check_index_diff(table, latest, index, changes, snap.commit_kind)
        if snap.commit_kind in (APPEND, ANALYZE):
            for c in changes:
                if c.deleted_files or (snap.commit_kind == ANALYZE and c.new_files):
                    raise InvalidInputError(f"snapshot: an {snap.commit_kind} commit cannot "
                                            f"{'delete' if c.deleted_files else 'add'} files")
        check_changes(table, changes)
        _check_counts(snap, latest, changes)
        _check_against_live(table, latest, changes)
    except LakeError as e:
        if isinstance(e, CorruptMetadataError):
            raise InvalidInputError(f"snapshot: a file it names does not read as what it should be: {e}") from None
        raise
    except (KeyError, ValueError, TypeError, IndexError, OverflowError, RecursionError) as e:
        raise InvalidInputError(f"snapshot: a file it names does not read as what it should be "
                                f"({type(e).__name__}: {str(e)[:200]})") from None


def _dated(snap: Snapshot, latest: Snapshot | None, now_ms: int) -> Snapshot:
    """`snap` dated by the catalog's clock, never before the latest snapshot: expiration by age stops at the first
    young snapshot and time travel answers the first at a time, so a client's date is not trusted."""
    return replace(snap, time_millis=max(now_ms, latest.time_millis if latest is not None else now_ms))


def _check_against_live(table: FileStoreTable, latest: Snapshot | None, changes: list[CommitMessage]) -> None:
    """Adds are new to the table (a level upgrade deletes and re-adds), deletes are of live files, and no changelog
    file is a data file: a file added twice is read twice, a live file named as changelog is deleted by expiry."""
    live = _LIVE.at(table, latest) if latest is not None else frozenset()
    for i, c in enumerate(changes):
        deleted = {f.file_name for f in c.deleted_files}
        added = {f.file_name for f in c.new_files}
        for name in sorted(deleted):
            if (c.partition, c.bucket, name) not in live:
                raise InvalidInputError(f"snapshot: bucket {c.bucket} (change {i}) deletes {name}, which the table "
                                        "does not hold")
        for name in sorted(added - deleted):
            if (c.partition, c.bucket, name) in live:
                raise InvalidInputError(f"snapshot: bucket {c.bucket} (change {i}) adds {name}, which the table "
                                        "holds already")
        for f in c.changelog_files:
            if f.file_name in added or (c.partition, c.bucket, f.file_name) in live:
                raise InvalidInputError(f"snapshot: bucket {c.bucket} (change {i}) names data file {f.file_name} "
                                        "as changelog")


def _check_counts(snap: Snapshot, latest: Snapshot | None, changes: list[CommitMessage]) -> None:
    """The record counts must add up: readers trust a snapshot's totals."""
    delta = sum(f.row_count for c in changes for f in c.new_files) - \
        sum(f.row_count for c in changes for f in c.deleted_files)
    if delta != snap.delta_record_count:
        raise InvalidInputError(f"snapshot: deltaRecordCount {snap.delta_record_count} is not the {delta} rows its "
                                "delta manifests add and delete")
    before = latest.total_record_count if latest is not None else 0
    if snap.total_record_count != before + delta:
        raise InvalidInputError(f"snapshot: totalRecordCount {snap.total_record_count} is not the {before} rows of "
                                f"the latest snapshot plus its delta of {delta}")
