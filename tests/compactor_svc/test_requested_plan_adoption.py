"""The periodic look for plans others requested (`PlanRunner.recover(..., inflight=False)`), with the timeline and
Spark faked: it runs the REQUESTED plans whose first bucket this compactor owns (a full one as full), leaves those
of other owners and every INFLIGHT plan alone, and a plan of a bucket one of its running plans compacts waits. One
look lists the plans of every table in one call, whatever the number of tables."""

from __future__ import annotations

import time
from typing import Any, cast

from compactor_svc.buckets import Buckets
from compactor_svc.metrics import CompactorMetrics
from compactor_svc.ownership import Ownership
from compactor_svc.plan_runs import PlanRunner
from compactor_svc.state import CompactorState, RunningPlan
from lsmlake.proto_gen.lsmlake.v1 import catalog_pb2, common_pb2
from lsmlake.rpc.catalog_client import CompactionTimeline
from lsmlake.spark.compaction_job import BucketTask, SparkCompactor, TaskOutcome

S = catalog_pb2.CompactionPlanState
TABLE = "db.t"


class Timeline:
    """Plans of tables; records each listing call (its table, None for every table, and states), the plans started
    and rolled back, and completes any."""

    def __init__(self, plans: list[catalog_pb2.CompactionPlan]) -> None:
        self.plans_by_id = {p.plan_id: p for p in plans}
        self.listed: list[tuple[str | None, set[S.ValueType]]] = []
        self.started: list[str] = []
        self.rolled_back: list[str] = []

    def plans(self, table_id: str | None, states: list[S.ValueType]) -> list[catalog_pb2.CompactionPlan]:
        self.listed.append((table_id, set(states)))
        return [p for p in self.plans_by_id.values() if p.state in states
                and table_id in (None, f"{p.table.database}.{p.table.table}")]

    def start(self, table_id: str, plan_id: str, owner: str) -> catalog_pb2.CompactionPlan:
        self.started.append(plan_id)
        p = self.plans_by_id[plan_id]
        p.state, p.owner = S.COMPACTION_PLAN_STATE_INFLIGHT, owner
        return p

    def complete(self, *args: Any) -> catalog_pb2.CompleteCompactionResponse:
        return catalog_pb2.CompleteCompactionResponse(snapshot_id=9)

    def rollback(self, table_id: str, plan_id: str, reason: str, requeue: bool) -> Any:
        self.rolled_back.append(plan_id)


class Spark:
    """Every task compacts its bucket; records each task's `full`."""

    def __init__(self) -> None:
        self.full: dict[str, bool] = {}

    def run(self, warehouse: str, tasks: list[BucketTask], job_group: str | None = None,
            **watch: Any) -> list[TaskOutcome]:
        changes = common_pb2.FileChanges(bucket=0, total_buckets=1).SerializeToString()
        for t in tasks:
            self.full[str(job_group)] = t.full
        return [TaskOutcome(t, changes, None, 1, 0.1, 0, 0) for t in tasks]


def _buckets(ownership: Ownership, owned: bool, n: int, table: str = TABLE) -> list[int]:
    return [b for b in range(64) if (ownership.partition_of(table, b"", b) == 0) == owned][:n]


def _plan(plan_id: str, bucket: int, state: S.ValueType, full: bool = False,
          table: str = TABLE) -> catalog_pb2.CompactionPlan:
    database, name = table.split(".")
    return catalog_pb2.CompactionPlan(
        plan_id=plan_id, state=state, full=full, owner="other",
        table=common_pb2.TableIdentifier(database=database, table=name),
        units=[catalog_pb2.CompactionUnit(partition=b"", bucket=bucket, total_buckets=64, output_level=5)])


def test_requested_plans_of_owned_buckets_run_the_others_are_left_alone() -> None:
    ownership = Ownership()
    ownership.update({0}, 2)
    mine = _buckets(ownership, True, 4)
    (theirs,) = _buckets(ownership, False, 1)
    R, INFLIGHT = S.COMPACTION_PLAN_STATE_REQUESTED, S.COMPACTION_PLAN_STATE_INFLIGHT
    timeline = Timeline([_plan("1", mine[0], R), _plan("2", mine[1], R, full=True), _plan("3", theirs, R),
                         _plan("4", mine[2], INFLIGHT), _plan("5", mine[3], R)])
    state = CompactorState()
    # a plan of this compactor compacts plan 5's bucket now
    state.plan_started(RunningPlan(TABLE, "99", 1, False, time.monotonic(), ((TABLE, b"", mine[3]),)))
    metrics = CompactorMetrics()
    spark = Spark()
    runner = PlanRunner("/nowhere", cast(CompactionTimeline, timeline), cast(SparkCompactor, spark), ownership,
                        metrics, "c1", Buckets(ownership, metrics, state.lock), state, lambda: False)

    assert runner.recover([TABLE], inflight=False) is False  # plan 5 waits for plan 99
    assert timeline.listed == [(None, {R})]
    assert timeline.started == ["1", "2"]
    assert timeline.rolled_back == []
    assert spark.full == {f"{TABLE}/plan-1": False, f"{TABLE}/plan-2": True}
    assert state.completed == 2

    state.plan_ended("99")
    assert runner.recover([TABLE], inflight=False) is True
    assert timeline.started == ["1", "2", "5"]
    assert timeline.plans_by_id["3"].state == R and timeline.plans_by_id["4"].owner == "other"


def test_one_look_is_one_listing_call_whatever_the_number_of_tables() -> None:
    ownership = Ownership()
    ownership.update({0}, 2)
    tables = [f"db.t{i}" for i in range(20)]
    R = S.COMPACTION_PLAN_STATE_REQUESTED
    plans = [_plan(str(i + 1), _buckets(ownership, True, 1, t)[0], R, table=t) for i, t in enumerate(tables)]
    plans.append(_plan("21", _buckets(ownership, False, 1, tables[0])[0], R, table=tables[0]))  # another owner's
    plans.append(_plan("22", _buckets(ownership, True, 1, "db.gone")[0], R, table="db.gone"))  # not a known table
    timeline = Timeline(plans)
    state = CompactorState()
    metrics = CompactorMetrics()
    runner = PlanRunner("/nowhere", cast(CompactionTimeline, timeline), cast(SparkCompactor, Spark()), ownership,
                        metrics, "c1", Buckets(ownership, metrics, state.lock), state, lambda: False)

    assert runner.recover(tables, inflight=False) is True
    assert timeline.listed == [(None, {R})]
    assert sorted(timeline.started, key=int) == [str(i + 1) for i in range(20)]
    assert timeline.plans_by_id["21"].state == R and timeline.plans_by_id["22"].state == R

    # the recovery after a change of ownership lists INFLIGHT plans too, in one call as well
    runner.timeline = cast(CompactionTimeline, idle := Timeline([]))
    assert runner.recover(tables) is True
    assert idle.listed == [(None, {R, S.COMPACTION_PLAN_STATE_INFLIGHT})]
