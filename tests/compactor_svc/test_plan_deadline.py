"""A plan whose Spark job never finishes does not hold the compactor (`compactor_svc.plan_runs`), on a real local
Spark: the job of table A hangs (one of its input files is a FIFO nobody writes to, so its task blocks reading
it, as on a hung mount); table B's plan runs and commits meanwhile on the other plan slot; at A's deadline its job
is cancelled, the plan rolled back (not requeued) with nothing of its outputs left, and its bucket planned again.
The catalog's timeline is a stand-in that commits on the warehouse; Spark is real."""

from __future__ import annotations

import os
import shutil
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, cast

import numpy as np
import pyarrow as pa
import pytest

from compactor_svc.buckets import Buckets
from compactor_svc.metrics import CompactorMetrics
from compactor_svc.ownership import Ownership
from compactor_svc.plan_runs import PlanDeadline, PlanRunner
from compactor_svc.state import CompactorState
from lsmlake.catalog.filesystem import FileSystemCatalog
from lsmlake.proto_gen.lsmlake.v1 import catalog_pb2
from lsmlake.rpc.catalog_client import CompactionTimeline
from lsmlake.rpc.convert import changes_from_proto, file_to_proto
from lsmlake.spark.compaction_job import SparkCompactor, task_prefix
from lsmlake.table.compact import commit_compaction, plan_bucket, split_dir

pytestmark = pytest.mark.integration
if shutil.which("java") is None:
    pytest.fail("Spark needs Java 17 (`java` is not on PATH)", pytrace=False)

DEADLINE_S = 40.0  # room for B's job to run while A's hangs, on a loaded 2-core machine
WAIT_S = 180.0


class Timeline:
    """The catalog's compaction timeline as far as PlanRunner uses it: commits on the warehouse, records the rest."""

    def __init__(self, warehouse: str, plans: dict[str, catalog_pb2.CompactionPlan]) -> None:
        self.catalog = FileSystemCatalog(warehouse)
        self.plans = plans
        self.completed: list[str] = []
        self.rollbacks: list[tuple[str, str, bool]] = []
        self.changed = threading.Condition()

    def start(self, table_id: str, plan_id: str, owner: str) -> catalog_pb2.CompactionPlan:
        return self.plans[plan_id]

    def complete(self, table_id: str, plan_id: str, owner: str, identifier: int, changes: list[Any]) -> Any:
        result = commit_compaction(self.catalog.get_table(table_id), [changes_from_proto(c) for c in changes])
        with self.changed:
            self.completed.append(plan_id)
            self.changed.notify_all()
        return catalog_pb2.CompleteCompactionResponse(snapshot_id=result.snapshot_id)

    def rollback(self, table_id: str, plan_id: str, reason: str, requeue: bool) -> Any:
        with self.changed:
            self.rollbacks.append((plan_id, reason, requeue))
            self.changed.notify_all()

    def wait_for(self, what: Any, timeout_s: float = WAIT_S) -> None:
        with self.changed:
            assert self.changed.wait_for(what, timeout_s), (self.completed, self.rollbacks)


def _table(warehouse: str, name: str) -> Any:
    cat = FileSystemCatalog(warehouse)
    cat.create_database("db", ignore_if_exists=True)
    t = cat.create_table(f"db.{name}", "k BIGINT NOT NULL, v BIGINT", primary_keys=["k"],
                         options={"bucket": "1", "write-only": "true"})
    for v in range(3):  # three overlapping level-0 files
        keys = np.arange(v * 100, v * 100 + 500, dtype=np.int64)
        t.write_arrow(pa.table({"k": keys, "v": np.full(len(keys), v, np.int64)}))
    return t


def _plan(t: Any, plan_id: str) -> catalog_pb2.CompactionPlan:
    split = t.plan()[0]
    unit = plan_bucket(t, split, full=True)
    assert unit is not None
    return catalog_pb2.CompactionPlan(
        plan_id=plan_id, base_snapshot_id=split.snapshot_id, full=True, attempts=1,
        output_file_prefix=task_prefix(f"plan{plan_id}x"),
        units=[catalog_pb2.CompactionUnit(partition=split.partition, bucket=split.bucket,
                                          total_buckets=split.total_buckets,
                                          input_files=[file_to_proto(f) for f in unit.files],
                                          output_level=unit.output_level)])


@pytest.fixture
def compactor() -> Iterator[SparkCompactor]:
    c = SparkCompactor("local[2]")
    try:
        yield c
    finally:
        c.stop(timeout=30)


def test_a_hung_plan_is_cancelled_at_its_deadline_while_another_tables_plan_commits(
        tmp_path: Path, compactor: SparkCompactor) -> None:
    wh = str(tmp_path / "wh")
    a, b = _table(wh, "a"), _table(wh, "b")
    expected_b = b.to_arrow().sort_by("k")
    plans = {"1": _plan(a, "1"), "2": _plan(b, "2")}
    timeline = Timeline(wh, plans)
    state, ownership, metrics = CompactorState(), Ownership(), CompactorMetrics()
    ownership.update({0}, 1)
    buckets = Buckets(ownership, metrics, state.lock)
    runner = PlanRunner(wh, cast(CompactionTimeline, timeline), compactor, ownership, metrics, "c1", buckets, state,
                        lambda: False, PlanDeadline(DEADLINE_S, 0.0), concurrent_plans=2)
    # A's first input file becomes a FIFO: its task blocks reading it
    split_a = a.plan()[0]
    hung = os.path.join(split_dir(a, split_a), plans["1"].units[0].input_files[0].file_name)
    kept = str(tmp_path / "kept.parquet")
    shutil.move(hung, kept)
    os.mkfifo(hung)
    try:
        compactor.start()
        assert runner.launch("db.a", plans["1"])
        until = time.monotonic() + WAIT_S
        while state.tasks_running() < 1:  # A's task runs (its heartbeat says so); it cannot end without its input
            assert time.monotonic() < until, "A's task never ran"
            time.sleep(0.1)
        [running] = state.running
        assert running.plan_id == "1" and running.deadline_s == DEADLINE_S
        assert runner.has_free_slot()  # the second slot

        assert runner.launch("db.b", plans["2"])
        timeline.wait_for(lambda: "2" in timeline.completed)
        # B committed while A's job still hangs: A's plan runs and has neither completed nor been rolled back
        assert [r.plan_id for r in state.running] == ["1"] and timeline.rollbacks == []
        assert state.running[0].tasks_done == 0 and state.running[0].tasks_total == 1
        got_b = FileSystemCatalog(wh).get_table("db.b")
        assert got_b.to_arrow().sort_by("k").equals(expected_b)
        assert {f.level for s in got_b.new_scan(None, None, all_levels=True).plan() for f in s.files} == {5}
        assert metrics.plan_tasks_finished._value.get() >= 1  # B's heartbeat

        timeline.wait_for(lambda: timeline.rollbacks)
        [(plan_id, reason, requeue)] = timeline.rollbacks
        assert plan_id == "1" and "deadline" in reason and requeue is False
        until = time.monotonic() + WAIT_S
        while state.running or state.launched_count():
            assert time.monotonic() < until
            time.sleep(0.05)
        assert "1" not in timeline.completed
        assert metrics.plans.labels("expired")._value.get() == 1
        assert metrics.plans.labels("completed")._value.get() == 1
        key = ("db.a", split_a.partition, split_a.bucket)
        st = buckets.state(key)
        assert st.failures == 1 and "deadline" in st.note and st.retrying  # planned again after a pause
        prefix = plans["1"].output_file_prefix
        assert not [n for n in os.listdir(split_dir(a, split_a)) if prefix in n]
    finally:
        os.remove(hung)
        shutil.move(kept, hung)
        runner.close()
    # A's files are intact and its bucket compacts once its input reads again
    table_a = FileSystemCatalog(wh).get_table("db.a")
    plans["3"] = _plan(table_a, "3")
    runner.execute("db.a", plans["3"])
    assert "3" in timeline.completed
    assert table_a.to_arrow().num_rows == 700
