"""What the compactor does with a plan whose commit the catalog refuses (`compactor_svc.plan_runs`), with the
timeline and Spark faked: a conflict with what the plan was planned against is never run again as it is (it
would conflict again every time); its buckets are planned afresh. Other refusals put the plan back as before."""

from __future__ import annotations

from typing import Any, cast

import pytest

from compactor_svc.buckets import Buckets
from compactor_svc.metrics import CompactorMetrics
from compactor_svc.ownership import Ownership
from compactor_svc.plan_runs import PlanRunner
from compactor_svc.state import CompactorState
from lsmlake.errors import CommitConflictError, LakeError, StorageError
from lsmlake.proto_gen.lsmlake.v1 import catalog_pb2, common_pb2
from lsmlake.rpc.catalog_client import CompactionTimeline
from lsmlake.spark.compaction_job import BucketTask, SparkCompactor, TaskOutcome

UNITS = [catalog_pb2.CompactionUnit(partition=b"", bucket=0, output_level=5)]


class RefusingTimeline:
    """Starts every plan; refuses every completion with `error`; records each rollback's requeue."""

    def __init__(self, error: LakeError) -> None:
        self.error = error
        self.rollbacks: list[bool] = []

    def start(self, table_id: str, plan_id: str, owner: str) -> catalog_pb2.CompactionPlan:
        return catalog_pb2.CompactionPlan(plan_id=plan_id, base_snapshot_id=3, attempts=1, units=UNITS)

    def complete(self, *args: Any) -> Any:
        raise self.error

    def rollback(self, table_id: str, plan_id: str, reason: str, requeue: bool) -> Any:
        self.rollbacks.append(requeue)


class OneBucketDone:
    """Spark: every task compacts its bucket (changes with no files, enough to be committed)."""

    def run(self, warehouse: str, tasks: list[BucketTask], job_group: str | None = None,
            **watch: Any) -> list[TaskOutcome]:
        changes = common_pb2.FileChanges(bucket=0, total_buckets=1).SerializeToString()
        return [TaskOutcome(t, changes, None, 1, 0.1, 0, 0) for t in tasks]


@pytest.mark.parametrize(("error", "requeued"), [
    (CommitConflictError("the deletion vectors of bucket 0 changed since this commit was planned"), False),
    (StorageError("cannot write the manifest: No space left on device"), True),
])
def test_a_conflicting_plan_is_planned_afresh_and_other_refusals_are_retried(error: LakeError,
                                                                            requeued: bool) -> None:
    state = CompactorState()
    ownership = Ownership()
    ownership.update({0}, 1)
    metrics = CompactorMetrics()
    buckets = Buckets(ownership, metrics, state.lock)
    timeline = RefusingTimeline(error)
    runner = PlanRunner("/nowhere", cast(CompactionTimeline, timeline), cast(SparkCompactor, OneBucketDone()),
                        ownership, metrics, "c1", buckets, state, lambda: False)
    runner.execute("db.t", catalog_pb2.CompactionPlan(plan_id="7", units=UNITS))
    assert timeline.rollbacks == [requeued]
