"""What to compact and when: the compactor's planning thread.

Events (a writer added files to a bucket, a compaction finished), operator triggers and a periodic
reconciliation mark owned buckets *dirty* (`buckets.py`). The planning thread takes the dirty buckets, re-reads
each table's latest snapshot (events are only hints: duplicates, replays and losses are harmless), asks the
compaction engine for each bucket's due unit (universal compaction, force-up-level-0 for deletion-vector
and lookup tables, full compaction when the engine's own schedule or the Hudi-style trigger says so),
orders the due buckets by sorted runs (most first) and cuts the plan at an IO budget. A plan of one table
is requested from the catalog's timeline (RequestCompaction), then run and committed (`plan_runs.py`), on a plan
thread of its own when several plans may run at once: the planning thread goes on with the other tables while a
job runs, and when every plan slot is taken a table waits for the next round, keeping its place in the queue.

Triggers: an operator's trigger marks the named owned buckets dirty (a full one also makes them owe a full
compaction, and a waited one learns of their outcomes: `buckets.py`). A bucket whose files a pending plan
holds is left out of the next plan and looked at again shortly.

`lookup-compact = gentle` counts compaction triggers per bucket, as Paimon's writer does: a look counts only
when its plan is sent (or nothing was due); a plan that is dropped (held files, the IO budget, a refused
request) and the retry after it do not count, so they neither bring level 0 up early nor put it off.

A table with a feature lsmlake does not maintain (`lsmlake.table.features`) is never planned: a trigger naming it
is refused at once, its dirty buckets are dropped with the reason (logged once per table and reason), and the
reconciliation does not mark it; `lake health` shows the reason as the table's error.

Recovery of the plans other owners left (`plan_runs.py`) runs when buckets are gained (at start and at
every rebalance) and after a plan request fails (its reply lost, or its inputs held by a pending plan). Plans others
request on the catalog's timeline (the console's "compact now" and "full compaction") reach no compactor by an
event, so every `requested_interval_s` the planning thread also looks for the REQUESTED plans of the tables and
runs those whose first bucket it owns (`PlanRunner.recover` without INFLIGHT plans, whose owners may still be at
work); the others are left to their owners. A look costs one ListCompactionPlans call whatever the number of
tables: the catalog lists every table's REQUESTED plans at once, each naming its table.
"""

from __future__ import annotations

import logging
import time
from collections import defaultdict
from dataclasses import dataclass

from compactor_svc.buckets import Buckets, sorted_runs
from compactor_svc.fair_queue import DatabaseWeights, Demand, FairQueue
from compactor_svc.metrics import CompactorMetrics
from compactor_svc.ownership import Ownership
from compactor_svc.plan_policy import Candidate, choose_plan
from compactor_svc.plan_runs import PlanDeadline, PlanRunner
from compactor_svc.state import CompactorState, PlanOrigin, RunningPlan
from compactor_svc.triggers import FullCompactionTrigger
from compactor_svc.waits import NOT_ASSIGNED, OWNED_ELSEWHERE, OWNERSHIP_MOVED, BucketKey, CompactionWait
from lsmlake.catalog.filesystem import FileSystemCatalog
from lsmlake.errors import LakeError, NotFoundError
from lsmlake.format.bucket import POSTPONE_BUCKET
from lsmlake.format.snapshot import Snapshot
from lsmlake.mergetree.compact.force_up_level0 import TriggerCount
from lsmlake.mergetree.compact.unit import CompactUnit
from lsmlake.mergetree.levels import writers_stall
from lsmlake.proto_gen.lsmlake.v1 import catalog_pb2
from lsmlake.rpc.catalog_client import CompactionTimeline
from lsmlake.rpc.convert import file_to_proto
from lsmlake.runtime.background import BackgroundLoop
from lsmlake.spark.compaction_job import SparkCompactor
from lsmlake.table import features
from lsmlake.table.compact import compaction_history, full_compaction_required, plan_bucket
from lsmlake.table.file_store_table import FileStoreTable
from lsmlake.table.postpone import every_bucket
from lsmlake.table.scan import Split

_log = logging.getLogger(__name__)

S = catalog_pb2.CompactionPlanState
HELD_RETRY_S = 1.0  # a bucket whose files a pending plan holds is looked at again after this
TICK_S = 0.5  # the planning thread looks at the dirty buckets at least this often
RETRY_ROUND_S = 1.0  # after a round that failed as a whole
REQUESTED_INTERVAL_S = 5.0  # how often the timeline is looked at for plans others requested
ROUND_BUDGET_S = 60.0  # a round takes no new table after this long: the rest wait, keeping their queue place


@dataclass(frozen=True)
class _TableView:
    """A table at one snapshot with its buckets' files: read once per new snapshot, by the queue and the planner."""

    table: FileStoreTable
    snap: Snapshot | None
    splits: dict[tuple[bytes, int], Split]


def _unit_proto(c: Candidate) -> catalog_pb2.CompactionUnit:
    return catalog_pb2.CompactionUnit(partition=c.split.partition, bucket=c.split.bucket,
                                      total_buckets=c.split.total_buckets,
                                      input_files=[file_to_proto(f) for f in c.unit.files],
                                      output_level=c.unit.output_level)


class Scheduler:
    def __init__(self, warehouse: str, timeline: CompactionTimeline, spark: SparkCompactor, ownership: Ownership,
                 metrics: CompactorMetrics, compactor_id: str, trigger: FullCompactionTrigger,
                 max_plan_bytes: int = 2 << 30, max_plan_buckets: int = 64, reconcile_interval_s: float = 30.0,
                 round_budget_s: float = ROUND_BUDGET_S, weights: DatabaseWeights | None = None,
                 deadline: PlanDeadline | None = None, concurrent_plans: int = 1,
                 requested_interval_s: float = REQUESTED_INTERVAL_S) -> None:
        self.warehouse = warehouse
        self.catalog = FileSystemCatalog(warehouse)
        self.timeline = timeline
        self.ownership = ownership
        self.metrics = metrics
        self.compactor_id = compactor_id
        self.trigger = trigger
        self.max_plan_bytes = max_plan_bytes
        self.max_plan_buckets = max_plan_buckets
        self.reconcile_interval_s = reconcile_interval_s
        self.requested_interval_s = requested_interval_s
        self.state = CompactorState()
        self.buckets = Buckets(ownership, metrics, self.state.lock)
        self.queue = FairQueue()
        self.weights = weights or DatabaseWeights()
        self.round_budget_s = round_budget_s
        self._views: dict[str, _TableView] = {}  # each dirty table at its latest snapshot read (splits are kept)
        self._loop = BackgroundLoop("compaction-planner", self._step, TICK_S, initial_delay_s=TICK_S,
                                    what="compaction planning", logger=_log)
        self.runner = PlanRunner(warehouse, timeline, spark, ownership, metrics, compactor_id, self.buckets,
                                 self.state, self._loop.is_stopping, deadline, concurrent_plans)
        self._reconcile_due = 0.0
        self._requested_due = 0.0
        self._refused: dict[str, str] = {}  # table -> why it is not compacted (as last logged)

    @property
    def running(self) -> list[RunningPlan]:
        return self.state.running

    @property
    def completed(self) -> int:
        return self.state.completed

    @property
    def failed(self) -> int:
        return self.state.failed

    def pending(self) -> int:
        return self.buckets.pending()

    # -- inputs --------------------------------------------------------------------------------------

    def start(self) -> Scheduler:
        self._loop.start()
        return self

    def stop(self, timeout_s: float = 120.0) -> None:
        """Stop after the running plans (a Spark job is not interrupted at once: its plan would only be rolled back;
        one still running after `timeout_s` is cancelled)."""
        self._loop.stop(timeout_s)
        self.runner.close(timeout_s)

    def on_event(self, key: BucketKey, snapshot_id: int, compaction: bool) -> None:
        """A data-files or compaction-results event of an owned bucket."""
        self.buckets.on_event(key, snapshot_id, compaction)
        self._loop.wake()

    def on_ownership_change(self, gained: set[int], lost: set[int]) -> None:
        if lost:
            self.buckets.forget_lost()
        if gained:
            self.state.ask_recovery()
            self._reconcile_due = 0.0  # look at every gained bucket now
        self._loop.wake()

    def request(self, table_id: str, partition: dict[str, str], bucket: int | None, full: bool,
                wait: bool = False) -> CompactionWait:
        """Queue the owned buckets of a table (optionally one partition or bucket) as of its latest snapshot.

        The returned `CompactionWait` names the queued buckets and those owned elsewhere; with `wait`, the
        planning thread records each queued bucket's outcome in it until `wait` returns.
        """
        table = self.catalog.get_table(table_id)
        features.check(table.schema, table_id, for_write=True, compaction=True)
        snap = table.latest_snapshot()
        queued: list[BucketKey] = []
        elsewhere: list[BucketKey] = []
        for split in every_bucket(table, snap):
            if bucket is not None and split.bucket != bucket:
                continue
            if partition and not self._partition_matches(table, split, partition):
                continue
            key = (table_id, split.partition, split.bucket)
            (queued if self.ownership.owns(*key) else elsewhere).append(key)
        w = CompactionWait(queued, elsewhere, snap.id if snap is not None else 0, full,
                           OWNED_ELSEWHERE if self.ownership.partitions else NOT_ASSIGNED)
        self.buckets.queue(w, wait)
        self._loop.wake()
        return w

    def wait(self, w: CompactionWait, timeout_s: float) -> None:
        """Wait until every bucket of `w` is settled or failed, at most `timeout_s`; the rest time out."""
        self.buckets.wait(w, timeout_s)

    @staticmethod
    def _partition_matches(table: FileStoreTable, split: Split, partition: dict[str, str]) -> bool:
        from lsmlake.format.partition import partition_value_string

        names = list(table.schema.partition_keys)
        types = table.schema.types_of(names)
        values = {n: partition_value_string(v, t) for n, t, v in zip(names, types, split.partition_values,
                                                                      strict=True)}
        return all(values.get(k) == v for k, v in partition.items())

    # -- the planning thread --------------------------------------------------------------------------

    def _step(self) -> None:
        if self.ownership.partitions == 0:
            return  # no assignment yet
        try:
            self._round()
        except Exception:
            _log.exception("compaction planning failed; trying again")
            self._loop.sleep(RETRY_ROUND_S)

    def _round(self) -> None:
        """Recover plans (or adopt the REQUESTED ones) and reconcile when due, then plan and run the ready dirty
        buckets, table by table."""
        self._recover()
        if time.monotonic() >= self._reconcile_due:
            self._reconcile_due = time.monotonic() + self.reconcile_interval_s
            self._reconcile()
        ready = self.buckets.take_ready()
        by_table: dict[str, list[BucketKey]] = defaultdict(list)
        for k in ready:
            by_table[k[0]].append(k)
        started = time.monotonic()
        self._views = {t: v for t, v in self._views.items() if t in by_table}  # only dirty tables' files are kept
        for demand in self.queue.order([self._demand(t, keys) for t, keys in by_table.items()]):
            keys = by_table[demand.table]
            if self._loop.is_stopping():
                self.buckets.redo(keys, 0.0, "queued", looked=False)
                continue
            if time.monotonic() - started > self.round_budget_s:  # the others keep their place in the queue
                self.buckets.redo(keys, 0.0, "waiting for its turn (other tables were planned first)", looked=False)
                continue
            if not self.runner.has_free_slot():  # likewise, until a running plan ends
                self.buckets.redo(keys, HELD_RETRY_S, f"waiting for a plan slot ({self.runner.concurrent_plans} "
                                                      "plans run)", looked=False)
                continue
            try:
                self.queue.charge(demand, self._compact_table(demand.table, keys))
            except Exception as e:
                _log.exception("planning %s failed", demand.table)
                for k in keys:
                    self.buckets.attempt_failed(k, f"planning failed: {type(e).__name__}: {e}")
        if self.buckets.round_done():
            self._loop.wake()  # the others wait for their pause to end (the 0.5 s tick finds them)

    def _recover(self) -> None:
        """Recover the plans others left when asked, else adopt the REQUESTED ones when it is time to look."""
        now = time.monotonic()
        if self.state.take_recovery():
            self._requested_due = now + self.requested_interval_s  # this looks at the REQUESTED plans too
            if not self.runner.recover(self.catalog.table_ids()):
                self.state.ask_recovery()
        elif now >= self._requested_due:
            self._requested_due = now + self.requested_interval_s
            self.runner.recover(self.catalog.table_ids(), inflight=False)  # what it could not run: at the next look

    def _demand(self, table_id: str, keys: list[BucketKey]) -> Demand:
        """The table's place in the fair queue: its (or its database's) priority and share, and whether its writers
        stall (a dirty bucket past the stop trigger, as of the table's latest snapshot)."""
        try:
            view = self._view(table_id)
        except Exception:  # gone or unreadable: planning reports it
            return Demand(table_id)
        o = view.table.options
        worst = max((sorted_runs(s)[0] for s in (view.splits.get((k[1], k[2])) for k in keys) if s is not None),
                    default=0)
        return self.weights.demand(table_id, o, writers_stall(worst, o.stop_trigger()))

    def _view(self, table_id: str) -> _TableView:
        """The table at its latest snapshot; the buckets' files are listed again only when the snapshot changed."""
        table = self.catalog.get_table(table_id)
        snap = table.latest_snapshot()
        cached = self._views.get(table_id)
        # the whole snapshot is compared, not its id: a table dropped and created again starts at snapshot 1 again
        if cached is not None and snap is not None and cached.snap == snap and cached.table.schema == table.schema:
            return cached
        view = _TableView(table, snap, {(s.partition, s.bucket): s for s in every_bucket(table, snap)})
        self._views[table_id] = view
        return view

    def _reconcile(self) -> None:
        """Mark every owned bucket with more than one sorted run (or any level-0 file) dirty: catches lost events.
        Forget what the queue and the buckets remember of dropped tables."""
        marked = 0
        tables = self.catalog.table_ids()
        self.queue.retain(set(tables))
        self.buckets.retain_tables(set(tables))
        self._refused = {t: r for t, r in self._refused.items() if t in tables}
        for table_id in tables:
            try:
                table = self.catalog.get_table(table_id)
                if self._refuses(table_id, table):
                    continue
                splits = every_bucket(table, table.latest_snapshot())
            except Exception as e:
                _log.info("reconcile: skipping %s: %s", table_id, e)
                continue
            marked += self.buckets.mark(table_id, splits)
        if marked:
            _log.debug("reconcile: %d bucket(s) to look at", marked)

    def _compact_table(self, table_id: str, keys: list[BucketKey]) -> int:
        """Plan the due units of a table's dirty buckets as one plan at its latest snapshot, and run it; the
        plan's input bytes (0 when nothing ran).

        1. each owned bucket's unit (full when a trigger owes it one); a bucket with nothing due is settled;
        2. buckets whose unit needs a file a pending plan holds wait for that plan to end;
        3. the plan's buckets (`plan_policy.choose_plan`: the most sorted runs first, up to the IO budget); the
           rest wait for the next round;
        4. RequestCompaction, then `PlanRunner.execute`.
        """
        try:
            view = self._view(table_id)
        except NotFoundError as e:
            for key in keys:
                self.buckets.fail_waits(key, f"the table is gone: {e}")
            self.queue.forget(table_id)
            self._views.pop(table_id, None)
            return 0
        table, snap, splits = view.table, view.snap, view.splits
        if self._refuses(table_id, table):
            reason = self._refused[table_id]
            self.buckets.note(keys, f"not compacted: {reason}")
            for key in keys:
                self.buckets.fail_waits(key, reason)
            return 0
        at = snap.id if snap is not None else 0
        candidates = self._due_units(table, keys, splits, at)
        candidates = self._without_held(table_id, candidates)
        if not candidates:
            return 0
        choice = choose_plan(candidates, self.max_plan_bytes, self.max_plan_buckets, table.options.num_levels() - 1)
        for c in choice.deferred:
            self.buckets.redo([c.key], 0.0, "waiting for the next plan (the IO budget of one plan is spent)")
        chosen = choice.chosen
        units = [_unit_proto(c) for c in chosen]
        try:
            plan = self.timeline.request(table_id, units, choice.full)
        except LakeError as e:
            # an input was removed or reserved after this round looked (the held check above runs first);
            # a plan left REQUESTED by a lost reply holds inputs too: recovery adopts such plans
            _log.info("cannot plan %d bucket(s) of %s: %s", len(units), table_id, e)
            self.state.ask_recovery()
            for c in chosen:
                self.buckets.attempt_failed(c.key, f"plan refused by the catalog: {e}")
            return 0
        for c in chosen:
            self.buckets.count_trigger(c.key, c.triggers)
        origin = PlanOrigin(at, {c.key: c.full for c in chosen},
                            {c.key: c.full or c.unit.file_rewrite for c in chosen})
        if not self.runner.launch(table_id, plan, origin):  # the slot was taken meanwhile: recovery runs it
            self.state.ask_recovery()
        return choice.input_bytes

    def _due_units(self, table: FileStoreTable, keys: list[BucketKey], splits: dict[tuple[bytes, int], Split],
                   at: int) -> list[Candidate]:
        """The owned buckets among `keys` with a unit due at snapshot `at` (full when a trigger owes one); the
        others are settled (nothing due) or their waits failed (no longer owned)."""
        history = compaction_history(table)  # once per table: each bucket's plan would read it again
        always_full = full_compaction_required(table)
        now = time.monotonic()
        candidates: list[Candidate] = []
        worst = 0
        for key in keys:
            if not self.ownership.owns(*key):
                self.buckets.fail_waits(key, OWNERSHIP_MOVED)
                continue
            split = splits.get((key[1], key[2]))
            if split is None:  # no files (left): nothing a trigger named is live any more
                self.buckets.settle(key, at, True, "", at)
                continue
            runs, l0 = sorted_runs(split)
            worst = max(worst, runs)
            self.metrics.sorted_runs.observe(runs)
            self.metrics.level0_files.observe(l0)
            b = self.buckets.state(key)
            full = b.full_owed_at >= 0 or self.trigger.due(b.commits_since_full, now - b.last_full)
            retry = self.buckets.is_retry(key)
            triggers = TriggerCount(b.lookup_triggers.count)
            # postponed rows go to their buckets as soon as they are seen: until then no reader sees them
            unit = plan_bucket(table, split, full, history, triggers) if split.bucket != POSTPONE_BUCKET \
                else CompactUnit(0, split.files)
            if unit is None:
                if not retry:
                    self.buckets.count_trigger(key, triggers)
                self.buckets.settle(key, at, full or always_full, "", at)
                continue
            candidates.append(Candidate(runs, key, split, unit, full or always_full, triggers))
        self.metrics.max_sorted_runs.set(worst)
        return candidates

    def _refuses(self, table_id: str, table: FileStoreTable) -> bool:
        """Whether lsmlake must not compact the table (`features`); the reason is logged once per table and reason."""
        reason = features.refusal(table.schema, table_id, for_write=True, compaction=True)
        if reason is None:
            self._refused.pop(table_id, None)
            return False
        if self._refused.get(table_id) != reason:
            _log.warning("not compacting %s: %s", table_id, reason)
            self._refused[table_id] = reason
        return True

    def _without_held(self, table_id: str, candidates: list[Candidate]) -> list[Candidate]:
        """The candidates none of whose unit's files is in a pending plan; the others look again shortly.

        The catalog refuses a plan naming a file a pending plan holds, and would refuse the whole plan,
        so a bucket held by a background plan (or another replica's, or one nobody runs) must not keep
        the other buckets of a trigger from being compacted.
        """
        # a bucket a plan of this compactor is running waits for it, whether or not its new files are held (two
        # plans of one bucket would conflict, and plans run side by side now)
        running = {k for r in self.state.running for k in r.keys}
        for c in candidates:
            if c.key in running:
                self.buckets.redo([c.key], HELD_RETRY_S, "a plan of this compactor is compacting it")
        candidates = [c for c in candidates if c.key not in running]
        if not candidates:
            return candidates
        try:
            pending = self.timeline.plans(table_id, [S.COMPACTION_PLAN_STATE_REQUESTED,
                                                     S.COMPACTION_PLAN_STATE_INFLIGHT])
        except LakeError as e:
            _log.info("cannot list the pending plans of %s: %s", table_id, e)
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
            self.buckets.redo([c.key], HELD_RETRY_S, f"its files are in plan {p.plan_id} ({state}{run_by}), "
                                                     "which has to end first")
            if not self.state.is_launched(p.plan_id):
                # a plan that nobody runs any more is adopted; one of this compactor's own runs, and ends by itself
                self.state.ask_recovery()
        return free

