"""What to compact, when, and running it: the compactor's planning thread.

Events (a writer added files to a bucket, a compaction finished), operator triggers and a periodic
reconciliation mark owned buckets *dirty*. The planning thread takes the dirty buckets, re-reads each
table's latest snapshot (events are only hints: duplicates, replays and losses are harmless), asks the
compaction engine for each bucket's due unit (universal compaction, force-up-level-0 for deletion-vector
and lookup tables, full compaction when the engine's own schedule or the Hudi-style trigger says so),
orders the due buckets by sorted runs (most first) and cuts the plan at an IO budget. A plan of one table
goes through the catalog's timeline: RequestCompaction, StartCompaction, one Spark job with one task
per bucket, then CompleteCompaction (the COMPACT commit); a conflict or a failure rolls it back (its
outputs deleted) and the buckets are looked at again later.

Triggers: an operator's trigger marks the named owned buckets dirty; a full trigger also records that the
bucket owes a full compaction (as of the table's snapshot when the trigger arrived), which survives
refused plans, failures and retries until a full unit planned at or after that snapshot commits (or the
bucket fails `MAX_ATTEMPTS` times in a row). A waited trigger (`waits.CompactionWait`) learns of each
named bucket's outcome from the planning thread, so it ends exactly when its buckets are settled.
A bucket whose files a pending plan holds is left out of the next plan and looked at again shortly.

Recovery: when buckets are gained (at start and at every rebalance), and after a plan request fails (its
reply lost, or its inputs held by a pending plan), the plans of owned buckets left INFLIGHT by another
owner (or by this one before it restarted) are rolled back and, with REQUESTED ones, run again (or
abandoned by the catalog when their inputs are gone). A plan spanning buckets of several owners is
recovered by the owner of its first bucket.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import grpc

from compactor_svc.metrics import CompactorMetrics
from compactor_svc.ownership import Ownership
from compactor_svc.timeline_client import TimelineClient
from compactor_svc.triggers import FullCompactionTrigger
from compactor_svc.waits import NOT_ASSIGNED, OWNED_ELSEWHERE, OWNERSHIP_MOVED, BucketKey, CompactionWait
from lsmlake.catalog.filesystem import FileSystemCatalog
from lsmlake.errors import NotFoundError
from lsmlake.mergetree.compact.unit import CompactUnit
from lsmlake.proto_gen.lsmlake.v1 import catalog_pb2, common_pb2
from lsmlake.rpc.convert import file_to_proto
from lsmlake.spark.compaction_job import BucketTask, SparkCompactor, TaskOutcome
from lsmlake.table.compact import compaction_history, full_compaction_required, plan_bucket
from lsmlake.table.file_store_table import FileStoreTable
from lsmlake.table.scan import Split

_log = logging.getLogger(__name__)

S = catalog_pb2.CompactionPlanState
MAX_ATTEMPTS = 3
FAILURE_BACKOFF_S = 5.0
HELD_RETRY_S = 1.0  # a bucket whose files a pending plan holds is looked at again after this
MAX_ORIGINS = 1000


@dataclass
class _Bucket:
    commits_since_full: int = 0
    last_full: float = field(default_factory=time.monotonic)
    last_snapshot: int = 0
    retry_after: float = 0.0  # after a failed run, wait before trying the bucket again
    full_owed_at: int = -1  # a trigger asked for a full compaction at this snapshot (-1: none owed)
    failures: int = 0  # failed attempts in a row
    note: str = "queued"  # what the bucket waits for now (a timed-out trigger reports it)


@dataclass(frozen=True)
class _Candidate:
    runs: int
    key: BucketKey
    split: Split
    unit: CompactUnit
    full: bool  # planned as a full compaction


@dataclass(frozen=True)
class _Origin:
    """How this compactor made a plan: what the outcomes of its buckets settle."""

    snapshot_id: int  # the snapshot its units were planned on
    full: dict[BucketKey, bool]  # per bucket: planned as a full compaction
    task_full: dict[BucketKey, bool]  # per bucket: `full or unit.file_rewrite`, as its task runs


@dataclass
class RunningPlan:
    table_id: str
    plan_id: str
    buckets: int
    full: bool
    started: float
    keys: tuple[BucketKey, ...]


def sorted_runs(split: Split) -> tuple[int, int]:
    """(sorted runs, level-0 files) of a bucket."""
    levels = [f.level for f in split.files]
    l0 = levels.count(0)
    return l0 + len({lv for lv in levels if lv > 0}), l0


class Scheduler:
    def __init__(self, warehouse: str, timeline: TimelineClient, spark: SparkCompactor, ownership: Ownership,
                 metrics: CompactorMetrics, compactor_id: str, trigger: FullCompactionTrigger,
                 max_plan_bytes: int = 2 << 30, max_plan_buckets: int = 64, reconcile_interval_s: float = 30.0) -> None:
        self.warehouse = warehouse
        self.catalog = FileSystemCatalog(warehouse)
        self.timeline = timeline
        self.spark = spark
        self.ownership = ownership
        self.metrics = metrics
        self.compactor_id = compactor_id
        self.trigger = trigger
        self.max_plan_bytes = max_plan_bytes
        self.max_plan_buckets = max_plan_buckets
        self.reconcile_interval_s = reconcile_interval_s
        self._lock = threading.Condition()
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._dirty: set[BucketKey] = set()
        self._buckets: dict[BucketKey, _Bucket] = {}
        self._waits: list[CompactionWait] = []
        self._origins: dict[str, _Origin] = {}  # plan id -> how this compactor made it (for requeued plans)
        self._recover = False
        self._reconcile_due = 0.0
        self.running: RunningPlan | None = None
        self.completed = 0
        self.failed = 0
        self._thread: threading.Thread | None = None

    # -- inputs --------------------------------------------------------------------------------------

    def start(self) -> Scheduler:
        self._thread = threading.Thread(target=self._run, name="compaction-planner", daemon=True)
        self._thread.start()
        return self

    def stop(self, timeout_s: float = 120.0) -> None:
        """Stop after the running plan (a Spark job is not interrupted: its plan would only be rolled back)."""
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout_s)

    def _bucket(self, key: BucketKey) -> _Bucket:
        b = self._buckets.get(key)
        if b is None:
            b = self._buckets[key] = _Bucket()
        return b

    def on_event(self, key: BucketKey, snapshot_id: int, compaction: bool) -> None:
        """A data-files or compaction-results event of an owned bucket."""
        with self._lock:
            b = self._bucket(key)
            if snapshot_id > b.last_snapshot:  # replays and duplicates count once
                b.last_snapshot = snapshot_id
                if not compaction:
                    b.commits_since_full += 1
            self._dirty.add(key)
            self.metrics.pending_buckets.set(len(self._dirty))
        self._wake.set()

    def on_ownership_change(self, gained: set[int], lost: set[int]) -> None:
        with self._lock:
            if lost:
                self._dirty = {k for k in self._dirty if self.ownership.owns(*k)}
                for key in [k for k in self._buckets if not self.ownership.owns(*k)]:
                    del self._buckets[key]
                for w in self._waits:
                    for key in [k for k in w.pending if not self.ownership.owns(*k)]:
                        w.fail(key, OWNERSHIP_MOVED)
                self._lock.notify_all()
            if gained:
                self._recover = True
                self._reconcile_due = 0.0  # look at every gained bucket now
        self._wake.set()

    def request(self, table_id: str, partition: dict[str, str], bucket: int | None, full: bool,
                wait: bool = False) -> CompactionWait:
        """Queue the owned buckets of a table (optionally one partition or bucket) as of its latest snapshot.

        The returned `CompactionWait` names the queued buckets and those owned elsewhere; with `wait`, the
        planning thread records each queued bucket's outcome in it until `wait` returns.
        """
        table = self.catalog.get_table(table_id)
        snap = table.latest_snapshot()
        queued: list[BucketKey] = []
        elsewhere: list[BucketKey] = []
        for split in table.new_scan(None, snap, all_levels=True).plan() if snap is not None else []:
            if bucket is not None and split.bucket != bucket:
                continue
            if partition and not self._partition_matches(table, split, partition):
                continue
            key = (table_id, split.partition, split.bucket)
            (queued if self.ownership.owns(*key) else elsewhere).append(key)
        w = CompactionWait(queued, elsewhere, snap.id if snap is not None else 0, full,
                           OWNED_ELSEWHERE if self.ownership.partitions else NOT_ASSIGNED)
        with self._lock:
            for key in queued:
                b = self._bucket(key)
                b.retry_after, b.failures = 0.0, 0
                if full:
                    b.full_owed_at = max(b.full_owed_at, w.since)
                self._dirty.add(key)
            if wait and queued:
                self._waits.append(w)
            self.metrics.pending_buckets.set(len(self._dirty))
        self._wake.set()
        return w

    def wait(self, w: CompactionWait, timeout_s: float) -> None:
        """Wait until every bucket of `w` is settled or failed, at most `timeout_s`; the rest time out."""
        deadline = time.monotonic() + timeout_s
        with self._lock:
            try:
                while w.pending:
                    left = deadline - time.monotonic()
                    if left <= 0:
                        break
                    self._lock.wait(min(left, 1.0))
                if w.pending:
                    w.timed_out = True
                    for key in list(w.pending):
                        b = self._buckets.get(key)
                        w.fail(key, f"timed out after {timeout_s:.1f} s: {b.note if b else 'queued'}")
            finally:
                if w in self._waits:
                    self._waits.remove(w)

    @staticmethod
    def _partition_matches(table: FileStoreTable, split: Split, partition: dict[str, str]) -> bool:
        from lsmlake.format.partition import partition_value_string

        names = list(table.schema.partition_keys)
        types = table.schema.types_of(names)
        values = {n: partition_value_string(v, t) for n, t, v in zip(names, types, split.partition_values,
                                                                      strict=True)}
        return all(values.get(k) == v for k, v in partition.items())

    def pending(self) -> int:
        return len(self._dirty)

    # -- outcomes of buckets ---------------------------------------------------------------------------

    def _settle(self, key: BucketKey, planned_at: int, full: bool, plan_id: str, snapshot_id: int) -> None:
        """A look at `key` planned at snapshot `planned_at` ended well: its unit committed, or none was due."""
        with self._lock:
            b = self._bucket(key)
            b.failures = 0
            if full and 0 <= b.full_owed_at <= planned_at:
                b.full_owed_at = -1
            if b.full_owed_at >= 0:  # a newer full trigger arrived while this plan was made
                self._dirty.add(key)
            b.note = "queued"
            for w in self._waits:
                w.settle(key, planned_at, full, plan_id, snapshot_id)
            self._lock.notify_all()

    def _attempt_failed(self, key: BucketKey, reason: str) -> None:
        """An attempt at `key` failed: try again after a pause, or after `MAX_ATTEMPTS` in a row give up.

        Giving up fails the waiting triggers and drops an owed full compaction; the bucket is then looked
        at again on its next event or reconciliation, not in a loop.
        """
        with self._lock:
            b = self._bucket(key)
            b.failures += 1
            if b.failures < MAX_ATTEMPTS:
                b.note = f"attempt {b.failures} failed ({reason}); trying again"
                if self.ownership.owns(*key):
                    b.retry_after = time.monotonic() + FAILURE_BACKOFF_S
                    self._dirty.add(key)
                return
            _log.warning("bucket %d of %s failed %d times in a row: %s", key[2], key[0], b.failures, reason)
            b.failures, b.full_owed_at, b.note = 0, -1, f"failed: {reason}"
            for w in self._waits:
                w.fail(key, f"plan failed {MAX_ATTEMPTS} times: {reason}")
            self._lock.notify_all()

    def _redo(self, keys: Sequence[BucketKey], backoff_s: float, note: str) -> None:
        """Look at the buckets again after `backoff_s` (not a failure of theirs: a plan did not start, ...)."""
        now = time.monotonic()
        with self._lock:
            for k in keys:
                if self.ownership.owns(*k):
                    b = self._bucket(k)
                    b.retry_after, b.note = now + backoff_s, note
                    self._dirty.add(k)

    def _fail_waits(self, key: BucketKey, reason: str) -> None:
        with self._lock:
            for w in self._waits:
                w.fail(key, reason)
            self._lock.notify_all()

    # -- the planning thread --------------------------------------------------------------------------

    def _run(self) -> None:
        while not self._stop.is_set():
            self._wake.wait(0.5)
            self._wake.clear()
            if self.ownership.partitions == 0:
                continue  # no assignment yet
            try:
                if self._recover:
                    self._recover = False
                    self._recover_plans()
                if time.monotonic() >= self._reconcile_due:
                    self._reconcile_due = time.monotonic() + self.reconcile_interval_s
                    self._reconcile()
                with self._lock:
                    now = time.monotonic()
                    ready = [k for k in self._dirty if self._bucket(k).retry_after <= now]
                    self._dirty.difference_update(ready)
                    for k in ready:
                        self._bucket(k).note = "being planned"
                    self.metrics.pending_buckets.set(len(self._dirty))
                by_table: dict[str, list[BucketKey]] = defaultdict(list)
                for k in ready:
                    by_table[k[0]].append(k)
                for table_id, keys in by_table.items():
                    if self._stop.is_set():
                        self._redo(keys, 0.0, "queued")
                        continue
                    try:
                        self._compact_table(table_id, keys)
                    except Exception as e:
                        _log.exception("planning %s failed", table_id)
                        for k in keys:
                            self._attempt_failed(k, f"planning failed: {type(e).__name__}: {e}")
                with self._lock:
                    now = time.monotonic()
                    if any(self._bucket(k).retry_after <= now for k in self._dirty):
                        self._wake.set()  # the others wait for their pause to end (the 0.5 s tick finds them)
                    self._lock.notify_all()
            except Exception:
                _log.exception("compaction planning failed; trying again")
                self._stop.wait(1.0)

    def _tables(self) -> list[str]:
        return [f"{db}.{t}" for db in self.catalog.list_databases() for t in self.catalog.list_tables(db)]

    def _reconcile(self) -> None:
        """Mark every owned bucket with more than one sorted run (or any level-0 file) dirty: catches lost events."""
        marked = 0
        for table_id in self._tables():
            try:
                table = self.catalog.get_table(table_id)
                splits = table.new_scan(None, None, all_levels=True).plan()
            except Exception as e:
                _log.info("reconcile: skipping %s: %s", table_id, e)
                continue
            with self._lock:
                for s in splits:
                    key = (table_id, s.partition, s.bucket)
                    runs, l0 = sorted_runs(s)
                    if (runs > 1 or l0 > 0) and self.ownership.owns(*key) and key not in self._dirty:
                        self._dirty.add(key)
                        marked += 1
        if marked:
            _log.debug("reconcile: %d bucket(s) to look at", marked)

    def _compact_table(self, table_id: str, keys: list[BucketKey]) -> None:
        """Plan the due units of a table's dirty buckets as one plan at its latest snapshot, and run it.

        1. each owned bucket's unit (full when a trigger owes it one); a bucket with nothing due is settled;
        2. buckets whose unit needs a file a pending plan holds wait for that plan to end;
        3. the most sorted runs first, up to the IO budget; the rest wait for the next round;
        4. RequestCompaction, then `_execute`.
        """
        try:
            table = self.catalog.get_table(table_id)
        except NotFoundError as e:
            for key in keys:
                self._fail_waits(key, f"the table is gone: {e}")
            return
        snap = table.latest_snapshot()
        at = snap.id if snap is not None else 0
        splits = ({(s.partition, s.bucket): s for s in table.new_scan(None, snap, all_levels=True).plan()}
                  if snap is not None else {})
        history = compaction_history(table)  # once per table: each bucket's plan would read it again
        always_full = full_compaction_required(table)
        now = time.monotonic()
        candidates: list[_Candidate] = []
        worst = 0
        for key in keys:
            if not self.ownership.owns(*key):
                self._fail_waits(key, OWNERSHIP_MOVED)
                continue
            split = splits.get((key[1], key[2]))
            if split is None:  # no files (left): nothing a trigger named is live any more
                self._settle(key, at, True, "", at)
                continue
            runs, l0 = sorted_runs(split)
            worst = max(worst, runs)
            self.metrics.sorted_runs.observe(runs)
            self.metrics.level0_files.observe(l0)
            b = self._bucket(key)
            full = b.full_owed_at >= 0 or self.trigger.due(b.commits_since_full, now - b.last_full)
            unit = plan_bucket(table, split, full, history)
            if unit is None:
                self._settle(key, at, full or always_full, "", at)
                continue
            candidates.append(_Candidate(runs, key, split, unit, full or always_full))
        self.metrics.max_sorted_runs.set(worst)
        candidates = self._without_held(table_id, candidates)
        if not candidates:
            return
        candidates.sort(key=lambda c: -c.runs)
        chosen: list[_Candidate] = []
        spent = 0
        for c in candidates:
            size = sum(f.file_size for f in c.unit.files)
            if chosen and (spent + size > self.max_plan_bytes or len(chosen) >= self.max_plan_buckets):
                self._redo([c.key], 0.0, "waiting for the next plan (the IO budget of one plan is spent)")
                continue
            chosen.append(c)
            spent += size
        units = [catalog_pb2.CompactionUnit(partition=c.split.partition, bucket=c.split.bucket,
                                            total_buckets=c.split.total_buckets,
                                            input_files=[file_to_proto(f) for f in c.unit.files],
                                            output_level=c.unit.output_level)
                 for c in chosen]
        max_level = table.options.num_levels() - 1
        plan_full = all(c.full for c in chosen) and all(u.output_level == max_level for u in units)
        try:
            plan = self.timeline.request(table_id, units, plan_full)
        except grpc.RpcError as e:
            # an input was removed or reserved after this round looked (the held check above runs first);
            # a plan left REQUESTED by a lost reply holds inputs too: recovery adopts such plans
            _log.info("cannot plan %d bucket(s) of %s: %s", len(units), table_id, e.details())
            with self._lock:
                self._recover = True
            for c in chosen:
                self._attempt_failed(c.key, f"plan refused by the catalog: {e.details()}")
            return
        origin = _Origin(at, {c.key: c.full for c in chosen}, {c.key: c.full or c.unit.file_rewrite for c in chosen})
        self._execute(table_id, plan, origin)

    def _without_held(self, table_id: str, candidates: list[_Candidate]) -> list[_Candidate]:
        """The candidates none of whose unit's files is in a pending plan; the others look again shortly.

        The catalog refuses a plan naming a file a pending plan holds, and would refuse the whole plan,
        so a bucket held by a background plan (or another replica's, or one nobody runs) must not keep
        the other buckets of a trigger from being compacted.
        """
        if not candidates:
            return candidates
        try:
            pending = self.timeline.plans(table_id, [S.COMPACTION_PLAN_STATE_REQUESTED,
                                                     S.COMPACTION_PLAN_STATE_INFLIGHT])
        except grpc.RpcError as e:
            _log.info("cannot list the pending plans of %s: %s", table_id, e.details())
            return candidates  # RequestCompaction checks again
        holders = {f.file_name: p for p in pending for u in p.units for f in u.input_files}
        free = []
        for c in candidates:
            p = next((holders[f.file_name] for f in c.unit.files if f.file_name in holders), None)
            if p is None:
                free.append(c)
                continue
            state = S.Name(p.state).removeprefix("COMPACTION_PLAN_STATE_")
            run_by = f", run by {p.owner}" if p.owner else ""
            self._redo([c.key], HELD_RETRY_S, f"its files are in plan {p.plan_id} ({state}{run_by}), "
                                              "which has to end first")
            with self._lock:
                self._recover = True  # a plan that nobody runs any more is adopted
        return free

    def _execute(self, table_id: str, plan: Any, origin: _Origin | None = None) -> None:
        """Start a plan, run it on Spark and commit it; `origin` None for a plan found on the timeline."""
        started = time.monotonic()
        keys = tuple((table_id, u.partition, u.bucket) for u in plan.units)
        with self._lock:
            if origin is not None:
                self._origins[plan.plan_id] = origin
                while len(self._origins) > MAX_ORIGINS:
                    del self._origins[next(iter(self._origins))]
            else:
                origin = self._origins.get(plan.plan_id)
        try:
            plan = self.timeline.start(table_id, plan.plan_id, self.compactor_id)
        except grpc.RpcError as e:  # abandoned (inputs gone) or taken: look at the buckets again
            _log.info("plan %s of %s did not start: %s", plan.plan_id, table_id, e.details())
            self._redo(keys, FAILURE_BACKOFF_S, f"plan {plan.plan_id} did not start ({e.details()}); looking again")
            return
        with self._lock:
            self.running = RunningPlan(table_id, plan.plan_id, len(plan.units), plan.full, started, keys)
            for k in keys:
                self._bucket(k).note = f"running in plan {plan.plan_id}"
        self.metrics.pending_plans.set(1)
        try:
            self._run_plan(table_id, plan, keys, origin, started)
        finally:
            with self._lock:
                self.running = None
                self._lock.notify_all()
            self.metrics.pending_plans.set(0)
            self.metrics.oldest_plan_age.set(0)

    def _run_plan(self, table_id: str, plan: Any, keys: tuple[BucketKey, ...], origin: _Origin | None,
                  started: float) -> None:
        task_full = origin.task_full if origin is not None else {}
        tasks = [BucketTask(table_id=table_id, snapshot_id=plan.base_snapshot_id, partition=u.partition,
                            bucket=u.bucket, unit_files=tuple(f.file_name for f in u.input_files),
                            output_level=u.output_level, full=task_full.get(k, plan.full),
                            file_prefix=plan.output_file_prefix)
                 for u, k in zip(plan.units, keys, strict=True)]
        try:
            outcomes = self.spark.run(self.warehouse, tasks, job_group=f"{table_id}/plan-{plan.plan_id}")
        except Exception as e:  # the job itself failed (Spark down): undo and try later
            _log.exception("Spark job of plan %s of %s failed", plan.plan_id, table_id)
            self._rollback(table_id, plan, f"Spark job failed: {e}")
            for k in keys:
                self._attempt_failed(k, f"Spark job failed: {e}")
            return
        failed = [o for o in outcomes if o.error]
        self.metrics.task_failures.inc(len(failed))
        for o in failed:
            _log.warning("plan %s of %s: bucket %d failed: %s", plan.plan_id, table_id, o.task.bucket, o.error)
        done = [o for o in outcomes if o.changes]
        if not done:
            self._rollback(table_id, plan, "; ".join(o.error or "" for o in failed)[:500] or "nothing to compact",
                           outcome="failed" if failed else "empty")
            self._outcomes(plan, keys, outcomes, origin, None)
            return
        changes = [common_pb2.FileChanges.FromString(o.changes) for o in done if o.changes]
        identifier = int(plan.plan_id) * 1000 + plan.attempts  # a retried completion repeats it
        try:
            reply = self.timeline.complete(table_id, plan.plan_id, self.compactor_id, identifier, changes)
        except grpc.RpcError as e:
            _log.info("plan %s of %s did not commit: %s", plan.plan_id, table_id, e.details())
            self._rollback(table_id, plan, f"commit refused: {e.details()}", requeue=plan.attempts < MAX_ATTEMPTS,
                           outcome="conflict")
            for k in keys:
                self._attempt_failed(k, f"commit of plan {plan.plan_id} refused: {e.details()}")
            return
        elapsed = time.monotonic() - started
        self.metrics.plans.labels("completed").inc()
        self.metrics.plan_seconds.observe(elapsed)
        self.metrics.bytes_read.inc(sum(o.bytes_read for o in done))
        self.metrics.bytes_written.inc(sum(o.bytes_written for o in done))
        self.metrics.update_amplification()
        with self._lock:
            self.completed += 1
        self._outcomes(plan, keys, outcomes, origin, reply.snapshot_id)
        _log.info("plan %s of %s: %d bucket(s) compacted in snapshot %d (%.2f s)", plan.plan_id, table_id,
                  len(done), reply.snapshot_id, elapsed)

    def _outcomes(self, plan: Any, keys: tuple[BucketKey, ...], outcomes: Sequence[TaskOutcome],
                  origin: _Origin | None, snapshot_id: int | None) -> None:
        """Each bucket's outcome: failed (tried again), or settled (its changes committed in `snapshot_id`, or
        nothing changed). A plan this compactor did not make settles nothing: its buckets are looked at again."""
        now = time.monotonic()
        for o, k in zip(outcomes, keys, strict=True):
            if o.error:
                self._attempt_failed(k, o.error)
                continue
            if o.task.full:
                with self._lock:
                    b = self._bucket(k)
                    b.commits_since_full, b.last_full = 0, now
            if origin is None:
                self._redo([k], 0.0, "queued")
            elif o.changes and snapshot_id is not None:
                self._settle(k, origin.snapshot_id, origin.full.get(k, False), plan.plan_id, snapshot_id)
            else:
                self._settle(k, origin.snapshot_id, origin.full.get(k, False), "", origin.snapshot_id)

    def _rollback(self, table_id: str, plan: Any, reason: str, requeue: bool = False, outcome: str = "failed") -> None:
        self.metrics.plans.labels(outcome).inc()
        try:
            self.timeline.rollback(table_id, plan.plan_id, reason, requeue)
        except grpc.RpcError as e:
            _log.warning("rollback of plan %s of %s failed: %s", plan.plan_id, table_id, e.details())
        with self._lock:
            self.failed += outcome != "empty"

    def _recover_plans(self) -> None:
        """Roll back the INFLIGHT plans of owned buckets left by other owners; run them and REQUESTED ones."""
        for table_id in self._tables():
            try:
                plans = self.timeline.plans(table_id, [S.COMPACTION_PLAN_STATE_REQUESTED,
                                                       S.COMPACTION_PLAN_STATE_INFLIGHT])
            except grpc.RpcError as e:
                _log.warning("cannot list the plans of %s: %s", table_id, e.details())
                continue
            for plan in plans:
                if self._stop.is_set():
                    return
                first = plan.units[0]
                if not self.ownership.owns(table_id, first.partition, first.bucket):
                    continue
                if plan.state == S.COMPACTION_PLAN_STATE_INFLIGHT:
                    running = self.running
                    if running is not None and running.plan_id == plan.plan_id:
                        continue
                    try:
                        back = self.timeline.rollback(table_id, plan.plan_id,
                                                      f"owner {plan.owner} is gone; taken over by "
                                                      f"{self.compactor_id}", requeue=True)
                    except grpc.RpcError as e:
                        _log.warning("cannot roll back plan %s of %s: %s", plan.plan_id, table_id, e.details())
                        continue
                    _log.warning("rolled back plan %s of %s left INFLIGHT by %s (%d file(s) deleted): now %s",
                                 plan.plan_id, table_id, plan.owner, len(back.deleted_paths),
                                 catalog_pb2.CompactionPlanState.Name(back.plan.state))
                    plan = back.plan
                if plan.state == S.COMPACTION_PLAN_STATE_REQUESTED:
                    if plan.attempts >= MAX_ATTEMPTS:
                        self._retire(table_id, plan)
                    else:
                        self._execute(table_id, plan)

    def _retire(self, table_id: str, plan: Any) -> None:
        """End a plan that failed MAX_ATTEMPTS times (ROLLED_BACK, inputs released); its buckets are re-planned."""
        try:
            self.timeline.start(table_id, plan.plan_id, self.compactor_id)
            self.timeline.rollback(table_id, plan.plan_id, f"gave up after {plan.attempts} attempts", False)
        except grpc.RpcError as e:
            _log.warning("cannot retire plan %s of %s: %s", plan.plan_id, table_id, e.details())
        self._redo([(table_id, u.partition, u.bucket) for u in plan.units], FAILURE_BACKOFF_S,
                   f"plan {plan.plan_id} was given up after {plan.attempts} attempts; looking again")
