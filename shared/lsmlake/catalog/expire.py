"""Snapshot expiration and orphan-file cleanup.

A file may be deleted only when nothing kept can reach it: no retained snapshot and no tag. Expiration
removes the oldest snapshots first (their JSON files), then the files only they reached; a crash in
between leaves unreachable files behind, which orphan cleanup removes later. Nothing reachable is ever
deleted, and nothing outside the table folder and its external roots (`data-file.external-paths`).

Paimon's layout, kept here: a tag is `tag/tag-<name>` holding the tagged snapshot's JSON, so the
snapshot file itself expires like any other while the tag keeps its manifests and data files; a consumer
is `consumer/consumer-<id>` holding `{"nextSnapshot": N}`, and no snapshot at or after N expires.
What snapshots and tags reach is worked out in `reachability`.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field

from lsmlake.catalog.reachability import TablePaths, metadata_files, referenced_files, tag_reach, tagged_snapshots
from lsmlake.errors import CorruptMetadataError, NotFoundError
from lsmlake.format import options as opts
from lsmlake.format.external_paths import is_under, may_delete
from lsmlake.format.manifest import ADD, DELETE, ManifestEntry
from lsmlake.format.snapshot import Snapshot
from lsmlake.iceberg import current_metadata_location, publish_iceberg_now, retain_iceberg
from lsmlake.table.file_store_table import FileStoreTable

_log = logging.getLogger(__name__)

CONSUMER_PREFIX = "consumer-"

#: A scheduled pass stops after this long on one table, so one table far behind cannot starve the others.
PASS_BUDGET_S = 60.0
#: ... or after this many batches (each at most `snapshot.expire.limit` snapshots).
PASS_MAX_BATCHES = 1000


@dataclass
class ExpireResult:
    """What expiration removed (one run, or the sum of a pass's runs)."""

    expired_snapshots: list[int] = field(default_factory=list)
    deleted_data_files: int = 0
    deleted_metadata_files: int = 0
    expired_consumers: list[str] = field(default_factory=list)
    refused_deletions: int = 0  # files outside the table folder and its external roots, left in place
    limited: bool = False  # the run stopped at `snapshot.expire.limit`: more may be expirable

    def add(self, other: ExpireResult) -> None:
        self.expired_snapshots.extend(other.expired_snapshots)
        self.deleted_data_files += other.deleted_data_files
        self.deleted_metadata_files += other.deleted_metadata_files
        self.expired_consumers.extend(other.expired_consumers)
        self.refused_deletions += other.refused_deletions
        self.limited = other.limited


@dataclass
class OrphanResult:
    """What orphan cleanup removed (paths)."""

    deleted: list[str] = field(default_factory=list)
    refused_deletions: int = 0


class _DeleteGuard:
    """Deletes only inside the table folder or under one of its external roots; counts what it refuses.

    A path comes from a manifest entry (`external_path`, file names) that another engine may have
    written, so it is checked, never trusted. Refusals are reported once, by `warn`, not raised: one bad
    entry must not stop the clean-up of everything else.
    """

    def __init__(self, table: FileStoreTable) -> None:
        self.table = table
        self.refused = 0
        self.example: str | None = None

    def allows(self, path: str) -> bool:
        root = self.table.path
        if may_delete(path, root, self.table.options):
            return True
        # An object store's FileIO names files `bucket/key` (no scheme, no leading slash), which
        # external_paths does not take for absolute; compare such names as if rooted at '/'.
        relative = "://" not in root and not root.startswith("/") and "://" not in path
        return relative and is_under("/" + path, "/" + root)

    def delete(self, path: str) -> bool:
        """Delete `path` if allowed; whether a file was deleted."""
        if not self.allows(path):
            self.refuse(path)
            return False
        return self.table.io.delete_quietly(path)

    def refuse(self, path: str) -> None:
        self.refused += 1
        self.example = self.example or path

    def warn(self, what: str) -> None:
        if self.refused:
            _log.warning("%s of %s left %d file(s) in place that lie outside the table folder and its "
                         "external roots (table option 'data-file.external-paths'), for example %r",
                         what, self.table.identifier, self.refused, self.example)


# -- consumers (Paimon's files) ------------------------------------------------------------------


def _consumer_floor(table: FileStoreTable, now_ms: int, guard: _DeleteGuard,
                    result: ExpireResult) -> int | None:
    """The smallest `nextSnapshot` of the live consumers (None: no consumer); deletes expired ones.

    A consumer whose file is older than `consumer.expiration-time` is ignored and deleted, as Paimon's
    commit does before it expires snapshots, so that an abandoned reader cannot hold snapshots forever.
    """
    ttl = table.options.get(opts.CONSUMER_EXPIRATION_TIME)
    floor: int | None = None
    for info in table.io.list(f"{table.path}/consumer"):
        if info.is_dir or not info.name.startswith(CONSUMER_PREFIX):
            continue
        cid = info.name[len(CONSUMER_PREFIX):]
        if ttl is not None and info.mtime_ms < now_ms - ttl:
            if guard.delete(info.path):
                result.expired_consumers.append(cid)
            continue
        nxt = _next_snapshot(table, info.path)
        if nxt is not None:
            floor = nxt if floor is None else min(floor, nxt)
    return floor


def _next_snapshot(table: FileStoreTable, path: str) -> int | None:
    try:
        data = json.loads(table.io.read_bytes(path))
    except NotFoundError:
        return None  # deleted while we listed
    except ValueError as e:
        raise CorruptMetadataError(f"consumer file {path}: {e}; no snapshot expires while a consumer cannot "
                                   "be read") from None
    nxt = data.get("nextSnapshot") if isinstance(data, dict) else None
    if not isinstance(nxt, int) or isinstance(nxt, bool):
        raise CorruptMetadataError(f"consumer file {path}: 'nextSnapshot' is {nxt!r}, not an integer")
    return nxt


class _Reach:
    """What snapshots and tags reach, cached for one pass (snapshot, tag and manifest files never change)."""

    def __init__(self, table: FileStoreTable) -> None:
        self.table = table
        self.paths = TablePaths(table)
        self.guard = _DeleteGuard(table)
        self._snapshots: dict[int, Snapshot] = {}
        self._metadata: dict[int, set[str]] = {}
        self._tags: dict[tuple[str, int, str, str], set[str]] = {}

    def snapshot(self, sid: int) -> Snapshot:
        if sid not in self._snapshots:
            self._snapshots[sid] = self.table.snapshots.snapshot(sid)
        return self._snapshots[sid]

    def metadata(self, sid: int) -> set[str]:
        """Paths of the manifest- and index-folder files snapshot `sid` references."""
        if sid not in self._metadata:
            meta, index = metadata_files(self.table, self.snapshot(sid))
            self._metadata[sid] = {self.paths.manifest(n) for n in meta} | {self.paths.index(n) for n in index}
        return self._metadata[sid]

    def tags(self) -> set[str]:
        """Everything the table's tags keep, as they are now."""
        out: set[str] = set()
        for name, s in tagged_snapshots(self.table):
            key = (name, s.id, s.base_manifest_list, s.delta_manifest_list)
            if key not in self._tags:
                self._tags[key] = tag_reach(self.table, self.paths, name, s)
            out |= self._tags[key]
        return out


# -- expiration ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Retention:
    retain_min: int
    retain_max: int
    time_retained_ms: int
    limit: int

    @staticmethod
    def of(table: FileStoreTable, retain_min: int | None, retain_max: int | None,
           time_retained_ms: int | None, limit: int | None) -> _Retention:
        """The table's `snapshot.*` options, each overridden by an argument that is not None."""
        o = table.options
        return _Retention(
            max(1, retain_min if retain_min is not None else o.require(opts.SNAPSHOT_NUM_RETAINED_MIN)),
            retain_max if retain_max is not None else o.require(opts.SNAPSHOT_NUM_RETAINED_MAX),
            time_retained_ms if time_retained_ms is not None else o.require(opts.SNAPSHOT_TIME_RETAINED),
            limit if limit is not None else o.require(opts.SNAPSHOT_EXPIRE_LIMIT))


def expire_snapshots(table: FileStoreTable, now_ms: int | None = None,
                     retain_min: int | None = None, retain_max: int | None = None,
                     time_retained_ms: int | None = None, limit: int | None = None) -> ExpireResult:
    """Expire old snapshots by the table's `snapshot.*` options (arguments override them): one run, at
    most `limit` snapshots. Call it under the table's commit lock; `ExpirePass` repeats it until caught up."""
    reach = _Reach(table)
    try:
        return _expire_batch(table, reach, _Retention.of(table, retain_min, retain_max, time_retained_ms, limit),
                             now_ms if now_ms is not None else int(time.time() * 1000))
    finally:
        reach.guard.warn("expiration")


def _expire_end(reach: _Reach, earliest: int, latest: int, r: _Retention, now_ms: int,
                consumer_floor: int | None) -> int:
    """End (exclusive) of the expirable range: keep `retain_min`, expire beyond `retain_max`, else by age;
    never a snapshot a consumer has still to read, never more than `limit`."""
    stop = min(latest - r.retain_min + 1, earliest + r.limit)
    if consumer_floor is not None:
        stop = min(stop, consumer_floor)
    end = earliest
    while end < stop:
        if end < latest - r.retain_max + 1 or reach.snapshot(end).time_millis < now_ms - r.time_retained_ms:
            end += 1
            continue
        break
    return end


def _expire_batch(table: FileStoreTable, reach: _Reach, r: _Retention, now_ms: int) -> ExpireResult:
    sm = table.snapshots
    result = ExpireResult()
    refused_before = reach.guard.refused
    latest, earliest = sm.latest_id(), sm.earliest_id()
    if latest is None or earliest is None:
        return result
    end = _expire_end(reach, earliest, latest, r, now_ms, _consumer_floor(table, now_ms, reach.guard, result))
    if end <= earliest:
        return result
    result.limited = end == earliest + r.limit
    expired = [reach.snapshot(i) for i in range(earliest, end)]
    doomed = _doomed_data(table, reach, expired[1:] + [reach.snapshot(end)], expired)
    # Metadata only expired snapshots reference.
    keep: set[str] = set()
    for sid in sm.ids():
        if sid >= end:
            keep |= reach.metadata(sid)
    for s in expired:
        doomed |= reach.metadata(s.id) - keep
    doomed -= reach.tags()
    # Iceberg snapshots name Paimon's files too: they go first, so no live Iceberg snapshot names a deleted file
    # (a failure here stops the batch before anything is deleted). Metadata behind Paimon (a crash before its
    # publication, a table synced once without the option) is first brought to the latest snapshot: its current
    # snapshot may be one this batch expires.
    if current_metadata_location(table) is not None:
        publish_iceberg_now(table)
        retain_iceberg(table, end)
    # Snapshot files first, so a crash below leaves only unreachable files (orphans), then the hint.
    # A tagged snapshot's file goes too, as in Paimon: its tag file holds the same JSON.
    for s in expired:
        table.io.delete_quietly(sm.path(s.id))
        result.expired_snapshots.append(s.id)
    sm.write_hint("EARLIEST", end)
    # A tag made since we looked read its snapshot before we deleted it: keep what it reaches too.
    doomed -= reach.tags()
    _delete(reach, doomed, result)
    result.refused_deletions = reach.guard.refused - refused_before
    return result


def _doomed_data(table: FileStoreTable, reach: _Reach, replacing: list[Snapshot],
                 expired: list[Snapshot]) -> set[str]:
    """Data files that only expired snapshots reach: those replaced by a snapshot in (earliest, end]
    (no retained snapshot reaches them), and the changelog files of expired snapshots."""
    out: set[str] = set()
    for s in replacing:
        delta: list[ManifestEntry] = []
        for m in table.manifests.uncached().read_list(s.delta_manifest_list):
            delta.extend(table.manifests.uncached().read_manifest(m.file_name))
        re_added = {(e.partition, e.bucket, e.file.file_name) for e in delta if e.kind == ADD}
        for e in delta:
            if e.kind == DELETE and (e.partition, e.bucket, e.file.file_name) not in re_added:
                out.update(reach.paths.data_files(e))
    # Changelog files live as long as the snapshot that added them.
    for s in expired:
        if s.changelog_manifest_list:
            for m in table.manifests.uncached().read_list(s.changelog_manifest_list):
                for e in table.manifests.uncached().read_manifest(m.file_name):
                    out.update(reach.paths.data_files(e))
    return out


def _delete(reach: _Reach, doomed: set[str], result: ExpireResult) -> None:
    manifest_dir, index_dir = reach.paths.manifest(""), reach.paths.index("")
    for p in sorted(doomed):
        if not reach.guard.delete(p):
            continue
        if p.startswith((manifest_dir, index_dir)):
            result.deleted_metadata_files += 1
        else:
            result.deleted_data_files += 1


class ExpirePass:
    """Expire in batches until caught up: each batch at most `snapshot.expire.limit` snapshots under its own
    `batch_lock` (so commits run between batches), until a batch stops short of the limit (nothing more is
    expirable now), `budget_s` has passed, `max_batches` ran, or `should_stop()`.

    `result` holds what the batches did, also when one of them raised. Refused deletions are logged once
    per pass.
    """

    def __init__(self, table: FileStoreTable,
                 batch_lock: Callable[[], AbstractContextManager[object]] = nullcontext,
                 budget_s: float = PASS_BUDGET_S, max_batches: int = PASS_MAX_BATCHES,
                 should_stop: Callable[[], bool] = lambda: False,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.table = table
        self.batch_lock = batch_lock
        self.budget_s = budget_s
        self.max_batches = max_batches
        self.should_stop = should_stop
        self.clock = clock
        self.result = ExpireResult()
        self.batches = 0
        self.caught_up = False

    def run(self, now_ms: int | None = None) -> ExpireResult:
        reach = _Reach(self.table)
        deadline = self.clock() + self.budget_s
        try:
            while not self.caught_up:
                with self.batch_lock():
                    r = _Retention.of(self.table, None, None, None, None)
                    batch = _expire_batch(self.table, reach, r,
                                          now_ms if now_ms is not None else int(time.time() * 1000))
                self.batches += 1
                self.result.add(batch)
                self.caught_up = not batch.limited
                if self.batches >= self.max_batches or self.clock() >= deadline or self.should_stop():
                    break
        finally:
            reach.guard.warn("expiration")
        return self.result


# -- orphan cleanup ------------------------------------------------------------------------------


def remove_orphan_files(table: FileStoreTable, older_than_ms: int = 86_400_000,
                        now_ms: int | None = None, dry_run: bool = False) -> OrphanResult:
    """Delete files in the table folder that no snapshot or tag reaches and that are older than the guard.

    The age guard protects files of commits still in progress (written, not yet published).
    """
    now_ms = now_ms if now_ms is not None else int(time.time() * 1000)
    result = OrphanResult()
    guard = _DeleteGuard(table)
    # List before reading snapshots: a file committed after the listing is younger than the guard anyway.
    listing = [i for i in table.io.list(table.path, recursive=True) if not i.is_dir]
    keep = referenced_files(table, table.snapshots.snapshots())
    protected_dirs = (f"{table.path}/schema/", f"{table.path}/tag/", f"{table.path}/consumer/",
                      f"{table.path}/branch/", f"{table.path}/changelog/", f"{table.path}/statistics/",
                      # the Iceberg metadata: its publication keeps and deletes its own files (lsmlake.iceberg)
                      f"{table.path}/metadata/")
    for info in listing:
        p = info.path
        if p.startswith(protected_dirs) or p in keep:
            continue
        if info.name in ("LATEST", "EARLIEST") and p.startswith(f"{table.path}/snapshot/"):
            continue
        if now_ms - info.mtime_ms < older_than_ms:
            continue
        if not guard.allows(p):
            guard.refuse(p)
            continue
        if not dry_run:
            table.io.delete_quietly(p)
        result.deleted.append(p)
    result.refused_deletions = guard.refused
    guard.warn("orphan cleanup")
    return result
