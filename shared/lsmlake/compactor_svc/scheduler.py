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
from dataclasses import dataclass, field
from typing import Any

import grpc

from ..catalog import FileSystemCatalog
from ..catalog_svc.convert import file_to_proto
from ..compaction.table_compact import plan_bucket
from ..proto_gen.lsmlake.v1 import catalog_pb2, common_pb2
from ..scan import Split
from ..table import FileStoreTable
from .metrics import CompactorMetrics
from .ownership import Ownership
from .spark_exec import BucketTask, SparkCompactor
from .timeline_client import TimelineClient
from .triggers import FullCompactionTrigger

_log = logging.getLogger(__name__)

BucketKey = tuple[str, bytes, int]  # table id, partition bytes, bucket
S = catalog_pb2.CompactionPlanState
MAX_ATTEMPTS = 3
FAILURE_BACKOFF_S = 5.0


@dataclass
class _Bucket:
    commits_since_full: int = 0
    last_full: float = field(default_factory=time.monotonic)
    last_snapshot: int = 0
    retry_after: float = 0.0  # after a failed run, wait before trying the bucket again


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
        self._dirty: dict[BucketKey, bool] = {}  # -> full compaction asked for
        self._buckets: dict[BucketKey, _Bucket] = {}
        self._recover = False
        self._reconcile_due = 0.0
        self._identifier = 0
        self.running: RunningPlan | None = None
        self.completed = 0
        self.failed = 0
        self.results: list[tuple[float, str, int, tuple[BucketKey, ...]]] = []  # (time, plan, snapshot, keys)
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
            self._dirty[key] = self._dirty.get(key, False)
            self.metrics.pending_buckets.set(len(self._dirty))
        self._wake.set()

    def on_ownership_change(self, gained: set[int], lost: set[int]) -> None:
        with self._lock:
            if lost:
                for key in [k for k in self._dirty if not self.ownership.owns(*k)]:
                    del self._dirty[key]
                for key in [k for k in self._buckets if not self.ownership.owns(*k)]:
                    del self._buckets[key]
            if gained:
                self._recover = True
                self._reconcile_due = 0.0  # look at every gained bucket now
        self._wake.set()

    def request(self, table_id: str, partition: dict[str, str], bucket: int | None,
                full: bool) -> tuple[list[BucketKey], int]:
        """Queue the owned buckets of a table (optionally one partition or bucket); (queued, owned elsewhere)."""
        table = self.catalog.get_table(table_id)
        queued, elsewhere = [], 0
        for split in table.new_scan(None, None, all_levels=True).plan():
            if bucket is not None and split.bucket != bucket:
                continue
            if partition and not self._partition_matches(table, split, partition):
                continue
            key = (table_id, split.partition, split.bucket)
            if self.ownership.owns(*key):
                queued.append(key)
            else:
                elsewhere += 1
        with self._lock:
            for key in queued:
                self._dirty[key] = self._dirty.get(key, False) or full
                self._bucket(key).retry_after = 0.0
        self._wake.set()
        return queued, elsewhere

    @staticmethod
    def _partition_matches(table: FileStoreTable, split: Split, partition: dict[str, str]) -> bool:
        from ..partition import partition_value_string

        names = list(table.schema.partition_keys)
        types = table.schema.types_of(names)
        values = {n: partition_value_string(v, t) for n, t, v in zip(names, types, split.partition_values,
                                                                      strict=True)}
        return all(values.get(k) == v for k, v in partition.items())

    def pending(self) -> int:
        return len(self._dirty)

    def wait_for(self, keys: list[BucketKey], since: float, timeout_s: float) -> list[tuple[str, int]]:
        """Wait until none of `keys` is dirty or running; the (plan id, snapshot id) committed for them since."""
        wanted = set(keys)
        deadline = time.monotonic() + timeout_s
        with self._lock:
            while True:
                busy = wanted & set(self._dirty) or (self.running is not None and wanted & set(self.running.keys))
                if not busy:
                    break
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError("the compaction did not finish within the deadline")
                self._lock.wait(min(left, 0.5))
            return [(p, s) for t, p, s, ks in self.results if t >= since and wanted & set(ks)]

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
                    ready = {k: f for k, f in self._dirty.items() if self._bucket(k).retry_after <= now}
                    for k in ready:
                        del self._dirty[k]
                    self.metrics.pending_buckets.set(len(self._dirty))
                by_table: dict[str, dict[BucketKey, bool]] = defaultdict(dict)
                for k, full in ready.items():
                    by_table[k[0]][k] = full
                for table_id, keys in by_table.items():
                    if self._stop.is_set():
                        break
                    self._compact_table(table_id, keys)
                with self._lock:
                    if self._dirty:
                        self._wake.set()
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
                        self._dirty[key] = False
                        marked += 1
        if marked:
            _log.debug("reconcile: %d bucket(s) to look at", marked)

    def _compact_table(self, table_id: str, keys: dict[BucketKey, bool]) -> None:
        try:
            table = self.catalog.get_table(table_id)
        except Exception as e:
            _log.info("skipping %s: %s", table_id, e)
            return
        snap = table.latest_snapshot()
        if snap is None:
            return
        splits = {(s.partition, s.bucket): s for s in table.new_scan(None, snap, all_levels=True).plan()}
        now = time.monotonic()
        candidates = []
        worst = 0
        for key, forced_full in keys.items():
            split = splits.get((key[1], key[2]))
            if split is None or not self.ownership.owns(*key):
                continue
            runs, l0 = sorted_runs(split)
            worst = max(worst, runs)
            self.metrics.sorted_runs.observe(runs)
            self.metrics.level0_files.observe(l0)
            b = self._bucket(key)
            full = forced_full or self.trigger.due(b.commits_since_full, now - b.last_full)
            unit = plan_bucket(table, split, full)
            if unit is None:
                continue
            candidates.append((runs, key, split, unit, full))
        self.metrics.max_sorted_runs.set(worst)
        if not candidates:
            return
        candidates.sort(key=lambda c: -c[0])
        chosen, spent = [], 0
        for c in candidates:
            size = sum(f.file_size for f in c[3].files)
            if chosen and (spent + size > self.max_plan_bytes or len(chosen) >= self.max_plan_buckets):
                with self._lock:  # over budget: the next round takes it
                    self._dirty[c[1]] = self._dirty.get(c[1], False) or c[4]
                continue
            chosen.append(c)
            spent += size
        units = [catalog_pb2.CompactionUnit(partition=split.partition, bucket=split.bucket,
                                            total_buckets=split.total_buckets,
                                            input_files=[file_to_proto(f) for f in unit.files],
                                            output_level=unit.output_level)
                 for _, _, split, unit, _ in chosen]
        max_level = table.options.num_levels() - 1
        plan_full = all(full for *_, full in chosen) and all(u.output_level == max_level for u in units)
        try:
            plan = self.timeline.request(table_id, units, plan_full)
        except grpc.RpcError as e:
            # typically: some input is in another pending plan; its completion event brings the bucket back.
            # That plan may be one nobody runs: a request whose reply was lost (the catalog recorded it, then
            # died or timed out) leaves a REQUESTED plan holding the inputs. Recovery adopts such plans.
            _log.info("cannot plan %d bucket(s) of %s: %s", len(units), table_id, e.details())
            with self._lock:
                self._recover = True
            return
        self._execute(table_id, plan, {key: full or unit.file_rewrite for _, key, _, unit, full in chosen})

    def _execute(self, table_id: str, plan: Any, full_by_key: dict[BucketKey, bool] | None = None) -> None:
        started = time.monotonic()
        keys = tuple((table_id, u.partition, u.bucket) for u in plan.units)
        try:
            plan = self.timeline.start(table_id, plan.plan_id, self.compactor_id)
        except grpc.RpcError as e:  # abandoned (inputs gone) or taken: look at the buckets again
            _log.info("plan %s of %s did not start: %s", plan.plan_id, table_id, e.details())
            self._redo(keys)
            return
        with self._lock:
            self.running = RunningPlan(table_id, plan.plan_id, len(plan.units), plan.full, started, keys)
        self.metrics.pending_plans.set(1)
        try:
            self._run_plan(table_id, plan, keys, full_by_key or {}, started)
        finally:
            with self._lock:
                self.running = None
                self._lock.notify_all()
            self.metrics.pending_plans.set(0)
            self.metrics.oldest_plan_age.set(0)

    def _run_plan(self, table_id: str, plan: Any, keys: tuple[BucketKey, ...], full_by_key: dict[BucketKey, bool],
                  started: float) -> None:
        tasks = [BucketTask(table_id=table_id, snapshot_id=plan.base_snapshot_id, partition=u.partition,
                            bucket=u.bucket, unit_files=tuple(f.file_name for f in u.input_files),
                            output_level=u.output_level, full=full_by_key.get(k, plan.full),
                            file_prefix=plan.output_file_prefix)
                 for u, k in zip(plan.units, keys, strict=True)]
        try:
            outcomes = self.spark.run(self.warehouse, tasks, job_group=f"{table_id}/plan-{plan.plan_id}")
        except Exception as e:  # the job itself failed (Spark down): undo and try later
            _log.exception("Spark job of plan %s of %s failed", plan.plan_id, table_id)
            self._give_up(table_id, plan, f"Spark job failed: {e}", keys)
            return
        failed = [o for o in outcomes if o.error]
        self.metrics.task_failures.inc(len(failed))
        for o in failed:
            _log.warning("plan %s of %s: bucket %d failed: %s", plan.plan_id, table_id, o.task.bucket, o.error)
        done = [o for o in outcomes if o.changes]
        if not done:
            self._give_up(table_id, plan, "; ".join(o.error or "" for o in failed)[:500] or "nothing to compact",
                          keys, requeue=False, outcome="failed" if failed else "empty")
            return
        changes = [common_pb2.FileChanges.FromString(o.changes) for o in done]
        identifier = int(plan.plan_id) * 1000 + plan.attempts  # a retried completion repeats it
        try:
            reply = self.timeline.complete(table_id, plan.plan_id, self.compactor_id, identifier, changes)
        except grpc.RpcError as e:
            _log.info("plan %s of %s did not commit: %s", plan.plan_id, table_id, e.details())
            self._give_up(table_id, plan, f"commit refused: {e.details()}", keys,
                          requeue=plan.attempts < MAX_ATTEMPTS, outcome="conflict")
            return
        elapsed = time.monotonic() - started
        self.metrics.plans.labels("completed").inc()
        self.metrics.plan_seconds.observe(elapsed)
        self.metrics.bytes_read.inc(sum(o.bytes_read for o in done))
        self.metrics.bytes_written.inc(sum(o.bytes_written for o in done))
        self.metrics.update_amplification()
        now = time.monotonic()
        with self._lock:
            self.completed += 1
            for o, k in zip(outcomes, keys, strict=True):
                if o.error:
                    self._bucket(k).retry_after = now + FAILURE_BACKOFF_S
                    self._dirty[k] = self._dirty.get(k, False)
                elif o.task.full:
                    b = self._bucket(k)
                    b.commits_since_full, b.last_full = 0, now
            self.results.append((time.time(), plan.plan_id, reply.snapshot_id, keys))
            del self.results[:-1000]
        _log.info("plan %s of %s: %d bucket(s) compacted in snapshot %d (%.2f s)", plan.plan_id, table_id,
                  len(done), reply.snapshot_id, elapsed)

    def _give_up(self, table_id: str, plan: Any, reason: str, keys: tuple[BucketKey, ...], requeue: bool = False,
                 outcome: str = "failed") -> None:
        self.metrics.plans.labels(outcome).inc()
        try:
            self.timeline.rollback(table_id, plan.plan_id, reason, requeue)
        except grpc.RpcError as e:
            _log.warning("rollback of plan %s of %s failed: %s", plan.plan_id, table_id, e.details())
        with self._lock:
            self.failed += outcome != "empty"
        self._redo(keys, backoff=outcome != "empty")

    def _redo(self, keys: tuple[BucketKey, ...], backoff: bool = True) -> None:
        now = time.monotonic()
        with self._lock:
            for k in keys:
                if self.ownership.owns(*k):
                    if backoff:
                        self._bucket(k).retry_after = now + FAILURE_BACKOFF_S
                    self._dirty[k] = self._dirty.get(k, False)

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
        self._redo(tuple((table_id, u.partition, u.bucket) for u in plan.units))
