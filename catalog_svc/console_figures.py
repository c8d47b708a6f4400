"""The figures an operator runs a table by, read from its recent snapshots and compaction plans.

Over a window (the last hour, or the table's last `MAX_SNAPSHOTS` snapshots when they span less):
- **write rate**: rows and bytes that commits other than compaction added (their ADD files), per second of the
  window (from its first snapshot to now);
- **compaction throughput**: bytes compaction rewrote (the files its COMPACT snapshots deleted) per second of the
  window, and per second of its plans' run time (start to completion of the COMPLETED plans in the window);
- **write amplification**: bytes written in all (added by writes plus written by compaction) over the bytes
  writes added; None when writes added nothing in the window;
- **plan durations**: each plan's wait (requested to started) and run (started to its last change).

A snapshot's delta never changes: the per-snapshot sums are kept (`SnapshotDeltas`) so that a page refreshed every
few seconds reads only the snapshots committed since.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass

from lsmlake.catalog.timeline import PlanCodec
from lsmlake.errors import NotFoundError
from lsmlake.format.manifest import ADD, DELETE
from lsmlake.format.snapshot import Snapshot
from lsmlake.metastore import COMPLETED, CompactionPlan
from lsmlake.table.file_store_table import FileStoreTable

WINDOW_MS = 3_600_000
MAX_SNAPSHOTS = 200  # the most snapshots a window reads (the newest)
_CACHE = 20_000
COMPACT = "COMPACT"


@dataclass(frozen=True)
class SnapshotDelta:
    """What one snapshot changed: rows and bytes of the files it added and deleted."""

    snapshot_id: int
    kind: str
    time_ms: int
    added_rows: int
    added_bytes: int
    added_files: int
    deleted_bytes: int
    deleted_files: int


@dataclass(frozen=True)
class Activity:
    """A table's writes and compactions over a window (see the module)."""

    window_ms: int
    snapshots: int
    written_rows: int
    written_bytes: int
    compacted_bytes: int  # input bytes compaction rewrote
    compaction_output_bytes: int
    plan_run_ms: int  # run time of the plans that completed in the window
    plan_input_bytes: int  # their input bytes

    @property
    def rows_per_s(self) -> float:
        return self.written_rows * 1000 / self.window_ms if self.window_ms else 0.0

    @property
    def bytes_per_s(self) -> float:
        return self.written_bytes * 1000 / self.window_ms if self.window_ms else 0.0

    @property
    def compacted_per_s(self) -> float:
        """Compaction's rewritten bytes per second of the window."""
        return self.compacted_bytes * 1000 / self.window_ms if self.window_ms else 0.0

    @property
    def plan_bytes_per_s(self) -> float | None:
        """The completed plans' input bytes per second of their run time; None without one."""
        return self.plan_input_bytes * 1000 / self.plan_run_ms if self.plan_run_ms else None

    @property
    def write_amplification(self) -> float | None:
        if not self.written_bytes:
            return None
        return (self.written_bytes + self.compaction_output_bytes) / self.written_bytes


@dataclass(frozen=True)
class PlanTimes:
    """One plan's times and size: how long it waited, how long it ran (None: not started, or still running)."""

    plan: CompactionPlan
    buckets: int
    input_bytes: int
    wait_ms: int | None
    run_ms: int | None

    @property
    def bytes_per_s(self) -> float | None:
        return self.input_bytes * 1000 / self.run_ms if self.run_ms else None


class SnapshotDeltas:
    """The deltas of snapshots read so far, the last `_CACHE` kept."""

    def __init__(self, keep: int = _CACHE) -> None:
        self._keep = keep
        self._lock = threading.Lock()
        self._cache: OrderedDict[tuple[str, str, int], SnapshotDelta] = OrderedDict()

    def known(self, table: FileStoreTable, snapshot_id: int) -> SnapshotDelta | None:
        """The delta of a snapshot read before; None when it was not (or no longer is) kept."""
        key = (table.path, table.table_uuid, snapshot_id)
        with self._lock:
            found = self._cache.get(key)
            if found is not None:
                self._cache.move_to_end(key)
            return found

    def of(self, table: FileStoreTable, snap: Snapshot) -> SnapshotDelta:
        found = self.known(table, snap.id)
        if found is not None:
            return found
        key = (table.path, table.table_uuid, snap.id)
        entries = table.manifests.entries(table.manifests.read_list(snap.delta_manifest_list))
        added = [e.file for e in entries if e.kind == ADD]
        deleted = [e.file for e in entries if e.kind == DELETE]
        delta = SnapshotDelta(snap.id, snap.commit_kind, snap.time_millis, sum(f.row_count for f in added),
                              sum(f.file_size for f in added), len(added), sum(f.file_size for f in deleted),
                              len(deleted))
        with self._lock:
            self._cache[key] = delta
            while len(self._cache) > self._keep:
                self._cache.popitem(last=False)
        return delta

    def recent(self, table: FileStoreTable, now_ms: int, window_ms: int = WINDOW_MS,
               limit: int = MAX_SNAPSHOTS) -> list[SnapshotDelta]:
        """The deltas of the table's snapshots committed in the last `window_ms`, the newest `limit`, oldest first."""
        out: list[SnapshotDelta] = []
        for sid in reversed(table.snapshots.ids()[-limit:]):
            # a page refreshed every few seconds reads only the snapshots committed since the last
            delta = self.known(table, sid)
            if delta is None:
                try:
                    delta = self.of(table, table.snapshots.snapshot(sid))
                except NotFoundError:  # expired while listed: older ones are gone too
                    break
            if delta.time_ms < now_ms - window_ms:
                break
            out.append(delta)
        return out[::-1]


def plan_times(plans: Sequence[CompactionPlan], codec: PlanCodec, now_ms: int) -> list[PlanTimes]:
    """Each plan's wait and run times and input bytes (from its stored units), in the order given."""
    out = []
    for p in plans:
        units = codec.decode(p.detail).units if p.detail else ()
        size = sum(f.file_size for u in units for f in u.input_files)
        wait = None if p.started_ms is None else max(0, p.started_ms - p.created_ms)
        run = None if p.started_ms is None or p.pending else max(0, p.updated_ms - p.started_ms)
        out.append(PlanTimes(p, len(units), size, wait, run))
    return out


def activity(deltas: Sequence[SnapshotDelta], times: Sequence[PlanTimes], now_ms: int,
             window_ms: int = WINDOW_MS) -> Activity:
    """The figures of the module over `deltas` (the window's snapshots, oldest first) and `times` (its plans)."""
    start = max(now_ms - window_ms, deltas[0].time_ms) if deltas else now_ms
    span = max(0, now_ms - start)
    writes = [d for d in deltas if d.kind != COMPACT]
    compactions = [d for d in deltas if d.kind == COMPACT]
    done = [t for t in times if t.plan.state == COMPLETED and t.run_ms is not None and t.plan.updated_ms >= start]
    return Activity(span, len(deltas), sum(d.added_rows for d in writes), sum(d.added_bytes for d in writes),
                    sum(d.deleted_bytes for d in compactions), sum(d.added_bytes for d in compactions),
                    sum(t.run_ms or 0 for t in done), sum(t.input_bytes for t in done))
