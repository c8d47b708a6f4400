"""Running a compaction plan through the catalog's timeline, and recovering the plans others left.

A plan of one table goes: StartCompaction, one Spark job with one task per bucket, then CompleteCompaction
(the COMPACT commit); a conflict or a failure rolls it back (its outputs deleted) and the buckets are looked
at again later.

Plans run side by side, up to a bound (`concurrent_plans`), each on a thread of its own, so that one table's
slow or stuck job does not hold the others. Each plan has a deadline (`PlanDeadline`: a base plus an allowance per
input byte); a job still running at its deadline (a lost worker, a hung task) is cancelled, the plan rolled back
(its outputs deleted) and its buckets planned afresh. The job's tasks finishing are the plan's heartbeat, in
the status and the metrics.

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
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from compactor_svc.buckets import FAILURE_BACKOFF_S, MAX_ATTEMPTS, Buckets
from compactor_svc.metrics import CompactorMetrics
from compactor_svc.ownership import Ownership
from compactor_svc.state import CompactorState, PlanOrigin, RunningPlan
from compactor_svc.waits import BucketKey
from lsmlake.errors import CommitConflictError, InvalidInputError, LakeError
from lsmlake.proto_gen.lsmlake.v1 import catalog_pb2, common_pb2
from lsmlake.rpc.catalog_client import CompactionTimeline
from lsmlake.spark.compaction_job import BucketTask, JobProgress, SparkCompactor, TaskOutcome

_log = logging.getLogger(__name__)

S = catalog_pb2.CompactionPlanState


GIB = 1 << 30
DEFAULT_DEADLINE_S = 1800.0
DEFAULT_DEADLINE_PER_GIB_S = 600.0
DEFAULT_CONCURRENT_PLANS = 2


@dataclass(frozen=True)
class PlanDeadline:
    """How long a plan may run on Spark: `base_s` plus `per_gib_s` per GiB of its input files."""

    base_s: float = DEFAULT_DEADLINE_S
    per_gib_s: float = DEFAULT_DEADLINE_PER_GIB_S

    def __post_init__(self) -> None:
        if not self.base_s > 0 or self.per_gib_s < 0:
            raise InvalidInputError(f"a plan deadline needs a positive base (got {self.base_s:g} s) and a "
                                    f"non-negative allowance per GiB (got {self.per_gib_s:g} s)")

    def for_bytes(self, input_bytes: int) -> float:
        return self.base_s + self.per_gib_s * input_bytes / GIB


def plan_input_bytes(plan: catalog_pb2.CompactionPlan) -> int:
    return sum(f.file_size for u in plan.units for f in u.input_files)


class PlanRunner:
    """Runs plans: on the calling thread (`concurrent_plans` 1) or up to `concurrent_plans` at once on threads of
    their own (`launch`); the plans running, their heartbeats and the counts are in `state`."""

    def __init__(self, warehouse: str, timeline: CompactionTimeline, spark: SparkCompactor, ownership: Ownership,
                 metrics: CompactorMetrics, compactor_id: str, buckets: Buckets, state: CompactorState,
                 should_stop: Callable[[], bool], deadline: PlanDeadline | None = None,
                 concurrent_plans: int = 1) -> None:
        if concurrent_plans < 1:
            raise InvalidInputError(f"concurrent_plans must be at least 1, got {concurrent_plans}")
        self.warehouse = warehouse
        self.timeline = timeline
        self.spark = spark
        self.ownership = ownership
        self.metrics = metrics
        self.compactor_id = compactor_id
        self.buckets = buckets
        self.state = state
        self.should_stop = should_stop
        self.deadline = deadline or PlanDeadline()
        self.concurrent_plans = concurrent_plans
        self._pool = (ThreadPoolExecutor(concurrent_plans, thread_name_prefix="plan")
                      if concurrent_plans > 1 else None)
        self._slots = threading.Lock()  # a free slot is checked and taken at once
        metrics.pending_plans.set_function(state.launched_count)
        metrics.running_plans.set_function(lambda: len(state.running))
        metrics.oldest_plan_age.set_function(state.oldest_age)
        metrics.heartbeat_age.set_function(state.heartbeat_age)
        metrics.tasks_running.set_function(state.tasks_running)

    def has_free_slot(self) -> bool:
        """Whether a plan launched now would start at once (always, when plans run on the calling thread)."""
        return self._pool is None or self.state.launched_count() < self.concurrent_plans

    def launch(self, table_id: str, plan: catalog_pb2.CompactionPlan, origin: PlanOrigin | None = None) -> bool:
        """Run a plan (`execute`): on a plan thread when there are several, else here. False when every slot is
        taken (the plan is left as it is); True also for a plan already launched (it is not run twice)."""
        if self._pool is None:
            self.execute(table_id, plan, origin)
            return True
        with self._slots:
            if self.state.is_launched(plan.plan_id):
                return True
            if not self.has_free_slot():
                return False
            self.state.launched(plan.plan_id)
        self._pool.submit(self._execute_launched, table_id, plan, origin)
        return True

    def _execute_launched(self, table_id: str, plan: catalog_pb2.CompactionPlan, origin: PlanOrigin | None) -> None:
        try:
            self.execute(table_id, plan, origin)
        except Exception:
            _log.exception("plan %s of %s failed unexpectedly", plan.plan_id, table_id)
            self.buckets.redo([(table_id, u.partition, u.bucket) for u in plan.units], FAILURE_BACKOFF_S,
                              f"plan {plan.plan_id} failed unexpectedly; looking again")
        finally:
            self.state.plan_ended(plan.plan_id)

    def close(self, grace_s: float = 120.0) -> None:
        """Wait for the plans running on plan threads to end; after `grace_s` their Spark jobs are cancelled (their
        plans rolled back and planned again later: a stop must not wait for a hung plan's deadline)."""
        if self._pool is None:
            return
        deadline = time.monotonic() + grace_s
        while self.state.launched_count() and time.monotonic() < deadline:
            time.sleep(0.2)
        if self.state.launched_count():
            _log.warning("stopping: cancelling %d running plan(s) after %.0f s", self.state.launched_count(), grace_s)
            self.spark.cancel_all()
        self._pool.shutdown(wait=True, cancel_futures=True)

    def execute(self, table_id: str, plan: catalog_pb2.CompactionPlan, origin: PlanOrigin | None = None) -> None:
        """Start a plan, run it on Spark and commit it; `origin` None for a plan found on the timeline."""
        started = time.monotonic()
        keys = tuple((table_id, u.partition, u.bucket) for u in plan.units)
        origin = self.state.origin(plan.plan_id, origin)
        try:
            plan = self.timeline.start(table_id, plan.plan_id, self.compactor_id)
        except LakeError as e:  # abandoned (inputs gone) or taken: look at the buckets again
            _log.info("plan %s of %s did not start: %s", plan.plan_id, table_id, e)
            self.buckets.redo(keys, FAILURE_BACKOFF_S,
                              f"plan {plan.plan_id} did not start ({e}); looking again")
            return
        deadline_s = self.deadline.for_bytes(plan_input_bytes(plan))
        self.state.plan_started(RunningPlan(table_id, plan.plan_id, len(plan.units), plan.full, started, keys,
                                            deadline_s))
        self.buckets.note(keys, f"running in plan {plan.plan_id}")
        try:
            self._run(table_id, plan, keys, origin, started, deadline_s)
        finally:
            self.state.plan_ended(plan.plan_id)

    def _run(self, table_id: str, plan: catalog_pb2.CompactionPlan, keys: tuple[BucketKey, ...],
             origin: PlanOrigin | None, started: float, deadline_s: float) -> None:
        task_full = origin.task_full if origin is not None else {}
        tasks = [BucketTask(table_id=table_id, snapshot_id=plan.base_snapshot_id, partition=u.partition,
                            bucket=u.bucket, unit_files=tuple(f.file_name for f in u.input_files),
                            output_level=u.output_level, full=task_full.get(k, plan.full),
                            file_prefix=plan.output_file_prefix)
                 for u, k in zip(plan.units, keys, strict=True)]
        def beat(p: JobProgress) -> None:
            self.metrics.plan_tasks_finished.inc(self.state.heartbeat(plan.plan_id, p.done, p.active, p.total))

        try:
            outcomes = self.spark.run(self.warehouse, tasks, job_group=f"{table_id}/plan-{plan.plan_id}",
                                      deadline_s=deadline_s, on_progress=beat)
        except Exception as e:  # the job itself failed (Spark down): undo and try later
            _log.exception("Spark job of plan %s of %s failed", plan.plan_id, table_id)
            self._rollback(table_id, plan, f"Spark job failed: {e}")
            for k in keys:
                self.buckets.attempt_failed(k, f"Spark job failed: {e}")
            return
        if any(o.expired for o in outcomes):
            # a lost worker or a hung task: the plan as it is may meet the same fate again, so it is not requeued;
            # its buckets are planned afresh from the latest snapshot (with a new output prefix)
            reason = f"plan {plan.plan_id} passed its deadline of {deadline_s:g} s; its Spark job was cancelled"
            _log.warning("%s of %s: rolled back, its %d bucket(s) are planned again", reason, table_id, len(keys))
            self._rollback(table_id, plan, reason, outcome="expired")
            for k in keys:
                self.buckets.attempt_failed(k, reason)
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
        changes = [common_pb2.FileChanges.FromString(c) for o in done for c in o.serialized()]
        identifier = int(plan.plan_id) * 1000 + plan.attempts  # a retried completion repeats it
        try:
            reply = self.timeline.complete(table_id, plan.plan_id, self.compactor_id, identifier, changes)
        except LakeError as e:
            _log.info("plan %s of %s did not commit: %s", plan.plan_id, table_id, e)
            # a conflict is with what the plan was planned against (its inputs or their deletion vectors changed
            # since its snapshot): run again as it is, it conflicts again every time; its buckets are planned
            # afresh instead, from the latest snapshot
            again = plan.attempts < MAX_ATTEMPTS and not isinstance(e, CommitConflictError)
            self._rollback(table_id, plan, f"commit refused: {e}", requeue=again,
                           outcome="conflict")
            for k in keys:
                self.buckets.attempt_failed(k, f"commit of plan {plan.plan_id} refused: {e}")
            return
        elapsed = time.monotonic() - started
        self.metrics.plans.labels("completed").inc()
        self.metrics.plan_seconds.observe(elapsed)
        self.metrics.bytes_read.inc(sum(o.bytes_read for o in done))
        self.metrics.bytes_written.inc(sum(o.bytes_written for o in done))
        self.metrics.update_amplification()
        self.state.count_completed()
        self._outcomes(plan, keys, outcomes, origin, reply.snapshot_id)
        _log.info("plan %s of %s: %d bucket(s) compacted in snapshot %d (%.2f s)", plan.plan_id, table_id,
                  len(done), reply.snapshot_id, elapsed)

    def _outcomes(self, plan: catalog_pb2.CompactionPlan, keys: tuple[BucketKey, ...],
                  outcomes: Sequence[TaskOutcome], origin: PlanOrigin | None, snapshot_id: int | None) -> None:
        """Each bucket's outcome: failed (tried again), or settled (its changes committed in `snapshot_id`, or
        nothing changed). A plan this compactor did not make settles nothing: its buckets are looked at again."""
        now = time.monotonic()
        for o, k in zip(outcomes, keys, strict=True):
            if o.error:
                self.buckets.attempt_failed(k, o.error)
                continue
            if o.task.full:
                self.buckets.full_done(k, now)
            if origin is None:
                self.buckets.redo([k], 0.0, "queued")
            elif o.changes and snapshot_id is not None:
                self.buckets.settle(k, origin.snapshot_id, origin.full.get(k, False), plan.plan_id, snapshot_id)
            else:
                self.buckets.settle(k, origin.snapshot_id, origin.full.get(k, False), "", origin.snapshot_id)

    def _rollback(self, table_id: str, plan: catalog_pb2.CompactionPlan, reason: str, requeue: bool = False,
                  outcome: str = "failed") -> None:
        self.metrics.plans.labels(outcome).inc()
        try:
            self.timeline.rollback(table_id, plan.plan_id, reason, requeue)
        except LakeError as e:
            _log.warning("rollback of plan %s of %s failed: %s", plan.plan_id, table_id, e)
        if outcome != "empty":
            self.state.count_failed()

    def recover(self, table_ids: Sequence[str], inflight: bool = True) -> bool:
        """Roll back the INFLIGHT plans of owned buckets left by other owners; run them and REQUESTED ones.

        `inflight` False: adopt only the REQUESTED plans (the periodic look for plans others requested); an INFLIGHT
        plan's owner may still be at work, and only a change of ownership says it is not. False when every plan
        slot was taken before all were run, or a plan waits for one of this compactor's running plans of its buckets to
        end (the caller looks again soon), or the plans could not be listed.

        One listing call of every table's plans in those states, whatever the number of tables (the periodic look
        runs every few seconds); only the plans of `table_ids` are looked at.
        """
        states = [S.COMPACTION_PLAN_STATE_REQUESTED] + ([S.COMPACTION_PLAN_STATE_INFLIGHT] if inflight else [])
        try:
            listed = self.timeline.plans(None, states)
        except LakeError as e:
            _log.warning("cannot list the pending compaction plans: %s", e)
            return False
        by_table: dict[str, list[catalog_pb2.CompactionPlan]] = {t: [] for t in table_ids}
        for p in listed:
            by_table.get(f"{p.table.database}.{p.table.table}", []).append(p)
        complete = True
        for table_id, plans in by_table.items():
            for plan in plans:
                if self.should_stop():
                    return True
                first = plan.units[0]
                if not self.ownership.owns(table_id, first.partition, first.bucket):
                    continue
                if self.state.is_launched(plan.plan_id):
                    continue  # running here (or about to)
                if plan.state == S.COMPACTION_PLAN_STATE_INFLIGHT:
                    try:
                        back = self.timeline.rollback(table_id, plan.plan_id,
                                                      f"owner {plan.owner} is gone; taken over by "
                                                      f"{self.compactor_id}", requeue=True)
                    except LakeError as e:
                        _log.warning("cannot roll back plan %s of %s: %s", plan.plan_id, table_id, e)
                        continue
                    _log.warning("rolled back plan %s of %s left INFLIGHT by %s (%d file(s) deleted): now %s",
                                 plan.plan_id, table_id, plan.owner, len(back.deleted_paths),
                                 catalog_pb2.CompactionPlanState.Name(back.plan.state))
                    plan = back.plan
                if plan.state == S.COMPACTION_PLAN_STATE_REQUESTED:
                    if plan.attempts >= MAX_ATTEMPTS:
                        self._retire(table_id, plan)
                        continue
                    running = {k for r in self.state.running for k in r.keys}
                    if any((table_id, u.partition, u.bucket) in running for u in plan.units):
                        complete = False  # two plans of one bucket would conflict: after the running one ends
                        continue
                    _log.info("running plan %s of %s found REQUESTED on the timeline (%d bucket(s)%s)",
                              plan.plan_id, table_id, len(plan.units), ", full" if plan.full else "")
                    if not self.launch(table_id, plan):
                        return False  # every plan slot is taken: a later round runs it
        return complete

    def _retire(self, table_id: str, plan: catalog_pb2.CompactionPlan) -> None:
        """End a plan that failed MAX_ATTEMPTS times (ROLLED_BACK, inputs released); its buckets are re-planned."""
        try:
            self.timeline.start(table_id, plan.plan_id, self.compactor_id)
            self.timeline.rollback(table_id, plan.plan_id, f"gave up after {plan.attempts} attempts", False)
        except LakeError as e:
            _log.warning("cannot retire plan %s of %s: %s", plan.plan_id, table_id, e)
        self.buckets.redo([(table_id, u.partition, u.bucket) for u in plan.units], FAILURE_BACKOFF_S,
                          f"plan {plan.plan_id} was given up after {plan.attempts} attempts; looking again")
