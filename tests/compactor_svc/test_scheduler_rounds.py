"""The compactor's planning rounds (`compactor_svc.scheduler`) on real tables, with the catalog's timeline and the
Spark runner faked: which tables a round takes, which stall, what the gentle lookup-compact count counts, and
what is forgotten of a dropped table."""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import pyarrow as pa
import pytest

from compactor_svc import scheduler as scheduler_module
from compactor_svc.buckets import sorted_runs
from compactor_svc.fair_queue import Demand
from compactor_svc.metrics import CompactorMetrics
from compactor_svc.ownership import Ownership
from compactor_svc.scheduler import Scheduler
from compactor_svc.server import Settings
from compactor_svc.triggers import FullCompactionTrigger
from compactor_svc.waits import BucketKey
from lsmlake.catalog.filesystem import FileSystemCatalog
from lsmlake.metastore import PlanConflictError
from lsmlake.proto_gen.lsmlake.v1 import catalog_pb2
from lsmlake.rpc.catalog_client import CompactionTimeline
from lsmlake.rpc.convert import file_to_proto
from lsmlake.spark.compaction_job import SparkCompactor
from lsmlake.table.postpone import every_bucket

# writers leave compaction to the compactor; force-up-level-0: a level-0 file is due at once
DV = {"bucket": "1", "deletion-vectors.enabled": "true", "write-only": "true"}
GENTLE = {**DV, "lookup-compact": "gentle", "lookup-compact.max-interval": "5"}  # trigger 5: every 5th trigger


class _Refused(PlanConflictError):
    def __init__(self) -> None:
        super().__init__("an input is held")


class FakeTimeline:
    """The catalog's timeline: pending plans to report, RequestCompaction accepted or refused."""

    def __init__(self) -> None:
        self.pending: list[catalog_pb2.CompactionPlan] = []
        self.refuse = False
        self.requested: list[tuple[str, list[catalog_pb2.CompactionUnit]]] = []

    def plans(self, table_id: str, states: Sequence[int]) -> list[catalog_pb2.CompactionPlan]:
        return list(self.pending)

    def request(self, table_id: str, units: Sequence[catalog_pb2.CompactionUnit], full: bool) -> Any:
        if self.refuse:
            raise _Refused()
        self.requested.append((table_id, list(units)))
        return catalog_pb2.CompactionPlan(plan_id=f"p{len(self.requested)}", units=units)


class Lake:
    """A warehouse, a scheduler owning every bucket, and the plans it ran (Spark faked: nothing is compacted)."""

    def __init__(self, root: Path, monkeypatch: pytest.MonkeyPatch, round_budget_s: float = 60.0) -> None:
        self.catalog = FileSystemCatalog(str(root / "wh"))
        self.catalog.create_database("db")
        self.timeline = FakeTimeline()
        ownership = Ownership()
        ownership.update({0}, 1)
        self.scheduler = Scheduler(str(root / "wh"), cast(CompactionTimeline, self.timeline),
                                   cast(SparkCompactor, None), ownership, CompactorMetrics(), "c1",
                                   FullCompactionTrigger(), reconcile_interval_s=3600.0, round_budget_s=round_budget_s)
        self.executed: list[str] = []
        self.on_execute = lambda: None
        monkeypatch.setattr(self.scheduler.runner, "execute", self._execute)

    def _execute(self, table_id: str, plan: catalog_pb2.CompactionPlan, origin: object = None) -> None:
        self.executed.append(table_id)
        self.on_execute()

    def table(self, name: str, options: dict[str, str], commits: int = 1) -> BucketKey:
        """A primary-key table with `commits` commits (level-0 files); its first bucket's key."""
        t = self.catalog.create_table(f"db.{name}", "k BIGINT NOT NULL, v BIGINT", primary_keys=["k"], options=options)
        for _ in range(commits):
            self.commit(name)
        split = every_bucket(t, t.latest_snapshot())[0]
        return (f"db.{name}", split.partition, split.bucket)

    def commit(self, name: str) -> None:
        self.catalog.get_table(f"db.{name}").write_arrow(
            pa.table({"k": pa.array(range(20), pa.int64()), "v": pa.array(range(20), pa.int64())}))

    def trigger(self, *names: str) -> None:
        for name in names:
            self.scheduler.request(f"db.{name}", {}, None, False)

    def round(self) -> None:
        self.scheduler._round()


@pytest.fixture
def fast_retries(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(scheduler_module, "HELD_RETRY_S", 0.0)


def _holding(key: BucketKey, lake: Lake) -> catalog_pb2.CompactionPlan:
    """A pending plan of another compactor that holds every file of the bucket."""
    t = lake.catalog.get_table(key[0])
    (split,) = every_bucket(t, t.latest_snapshot())
    return catalog_pb2.CompactionPlan(
        plan_id="other", state=catalog_pb2.COMPACTION_PLAN_STATE_INFLIGHT, owner="c2",
        units=[catalog_pb2.CompactionUnit(input_files=[file_to_proto(f) for f in split.files])])


def test_a_gentle_count_counts_only_triggers_whose_plan_is_sent(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fast_retries: None) -> None:
    lake = Lake(tmp_path, monkeypatch)
    key = lake.table("t", GENTLE)
    state = lake.scheduler.buckets.state(key)

    lake.trigger("t")
    lake.round()  # one level-0 file, not enough for universal compaction: a trigger that found nothing
    assert state.lookup_triggers.count == 1 and not lake.timeline.requested

    lake.scheduler.buckets.redo([key], 0.0, "looking again")
    lake.round()  # a retry that finds nothing is no trigger of its own
    assert state.lookup_triggers.count == 1

    state.lookup_triggers.count = 4  # the next trigger moves level 0 up
    lake.timeline.pending = [_holding(key, lake)]
    lake.trigger("t")
    lake.round()  # planned, but its file is held: dropped, not counted
    assert state.lookup_triggers.count == 4 and not lake.timeline.requested
    lake.timeline.pending = []
    lake.round()  # the retry moves level 0 up
    assert state.lookup_triggers.count == 0 and lake.executed == ["db.t"]
    (_, (unit,)), = lake.timeline.requested
    assert unit.output_level > 0

    state.lookup_triggers.count = 4
    lake.timeline.refuse = True
    lake.trigger("t")
    lake.round()  # refused by the catalog: not counted
    assert state.lookup_triggers.count == 4 and lake.executed == ["db.t"]


def test_a_gentle_count_ignores_a_plan_dropped_for_the_io_budget(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    lake = Lake(tmp_path, monkeypatch)
    key = lake.table("t", {**GENTLE, "bucket": "2"})
    t = lake.catalog.get_table("db.t")
    keys = [("db.t", s.partition, s.bucket) for s in every_bucket(t, t.latest_snapshot())]
    assert len(keys) == 2 and key in keys
    lake.scheduler.max_plan_bytes = 1  # one bucket per plan
    for k in keys:
        lake.scheduler.buckets.state(k).lookup_triggers.count = 4
    lake.trigger("t")
    lake.round()
    counts = sorted(lake.scheduler.buckets.state(k).lookup_triggers.count for k in keys)
    assert counts == [0, 4] and len(lake.timeline.requested) == 1  # the one left for the next plan kept its count


def test_a_table_stalls_past_its_stop_trigger_not_at_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Writers wait only when a bucket has more sorted runs than `num-sorted-run.stop-trigger` (Paimon's rule)."""
    lake = Lake(tmp_path, monkeypatch)
    key = lake.table("t", {"bucket": "1", "write-only": "true", "num-sorted-run.stop-trigger": "3"}, commits=3)
    t = lake.catalog.get_table("db.t")
    assert sorted_runs(every_bucket(t, t.latest_snapshot())[0])[0] == 3
    assert not lake.scheduler._demand("db.t", [key]).stalled
    lake.commit("t")
    assert lake.scheduler._demand("db.t", [key]).stalled


def test_a_round_past_its_budget_puts_the_other_tables_back_in_their_place(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    clock = SimpleNamespace(now=1000.0)
    monkeypatch.setattr(scheduler_module, "time", SimpleNamespace(monotonic=lambda: clock.now))
    lake = Lake(tmp_path, monkeypatch, round_budget_s=10.0)
    lake.table("a", DV)
    kb = lake.table("b", DV)

    def overrun() -> None:
        clock.now += 11.0

    lake.on_execute = overrun
    lake.trigger("a", "b")
    lake.round()  # a first (level, by name); its plan overruns the budget: b is put back unplanned
    b = lake.scheduler.buckets.state(kb)
    assert lake.executed == ["db.a"] and lake.scheduler.pending() == 1
    assert b.note.startswith("waiting for its turn") and b.retry_after <= time.monotonic() and not b.retrying
    assert lake.scheduler.queue.served("db.b") == 0 < lake.scheduler.queue.served("db.a")
    lake.trigger("a")
    lake.round()  # b keeps its place: before a, served since
    assert lake.executed == ["db.a", "db.b"]


def test_the_round_budget_is_a_flag() -> None:
    base = ["--warehouse", "wh", "--catalog", "c:1", "--kafka", "k:1"]
    assert Settings.from_args(base, env={}).round_budget_s == 60.0
    assert Settings.from_args([*base, "--round-budget", "2.5"], env={}).round_budget_s == 2.5
    with pytest.raises(SystemExit):
        Settings.from_args([*base, "--round-budget", "0"], env={})


def test_reconciliation_forgets_dropped_tables(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    lake = Lake(tmp_path, monkeypatch)
    ka = lake.table("a", GENTLE)
    lake.table("b", GENTLE)
    q = lake.scheduler.queue
    q.order([Demand("db.a"), Demand("db.b")])
    q.charge(Demand("db.a"), 10**6)
    lake.scheduler.buckets.state(ka).lookup_triggers.count = 3
    lake.catalog.drop_table("db.a")
    lake.scheduler._reconcile()
    assert "db.a" not in {k[0] for k in lake.scheduler.buckets._states}
    lake.table("a", GENTLE)  # created again under the same name: nothing inherited
    assert lake.scheduler.buckets.state(ka).lookup_triggers.count == 0
    q.order([Demand("db.a"), Demand("db.b")])
    assert q.served("db.a") == q.served("db.b") == 0
