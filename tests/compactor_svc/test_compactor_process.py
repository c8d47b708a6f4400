"""The compactor service end to end, on real processes: catalog_svc, writer_svc, compactor_svc (Spark
local[2]) and the embedded Kafka broker.

- a sustained write load for 2 minutes: no bucket ever holds more than `num-sorted-run.stop-trigger` + 1
  sorted runs (the writers' last group commit before they stall), the table equals the model, pypaimon
  reads the same;
- two compactor replicas; one is killed with SIGKILL in the middle of a Spark job: its buckets move to the
  other, the INFLIGHT plan is rolled back (its outputs deleted) and runs again; no row lost or duplicated.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import tests.support.writer_procs as procs
from lsmlake.catalog.filesystem import FileSystemCatalog
from lsmlake.kafka.broker import EmbeddedBroker
from lsmlake.proto_gen.lsmlake.v1 import (
    catalog_pb2,
    catalog_pb2_grpc,
    common_pb2,
    compactor_pb2,
    compactor_pb2_grpc,
    writer_pb2_grpc,
)
from tests.integration.interop.test_interop_pypaimon import pypaimon_read
from tests.writer_svc.test_writer_local import write_requests

pytestmark = pytest.mark.integration

S = catalog_pb2.CompactionPlanState
STOP_TRIGGER = 6
LOAD_SECONDS = 120.0


@pytest.fixture(scope="module")
def broker() -> Iterator[EmbeddedBroker]:
    with EmbeddedBroker() as b:
        yield b


def _create(stub: Any, name: str, buckets: int, options: dict[str, str]) -> common_pb2.TableIdentifier:
    stub.CreateDatabase(catalog_pb2.CreateDatabaseRequest(name="db", ignore_if_exists=True), timeout=30)
    ident = common_pb2.TableIdentifier(database="db", table=name)
    stub.CreateTable(catalog_pb2.CreateTableRequest(
        table=ident, columns=[catalog_pb2.Column(name="id", type="BIGINT NOT NULL"),
                              catalog_pb2.Column(name="v", type="STRING"),
                              catalog_pb2.Column(name="n", type="BIGINT")],
        primary_keys=["id"], options={"bucket": str(buckets), **options}), timeout=30)
    return ident


def _commit_round(cstub: Any, ident: common_pb2.TableIdentifier, table: Any, r: int, ids: list[int],
                  model: dict[int, int]) -> None:
    """Write `ids` with n = r in one level-0 file per bucket, commit it through the catalog as commit r + 1."""
    from lsmlake.rpc.convert import changes_to_proto

    w = table.new_write()
    w.write(pa.table({"id": pa.array(ids, pa.int64()), "v": [f"r{r}"] * len(ids),
                      "n": pa.array([r] * len(ids), pa.int64())}))
    cstub.Commit(catalog_pb2.CommitRequest(table=ident, commit_user="loader", commit_identifier=r + 1,
                                           kind=common_pb2.COMMIT_KIND_APPEND,
                                           changes=[changes_to_proto(m) for m in w.prepare_commit()]), timeout=60)
    model.update((i, r) for i in ids)


def _max_runs(warehouse: Path, table_id: str) -> int:
    table = FileSystemCatalog(str(warehouse)).get_table(table_id)
    worst = 0
    for s in table.new_scan(None, None, all_levels=True).plan():
        levels = [f.level for f in s.files]
        worst = max(worst, levels.count(0) + len({lv for lv in levels if lv > 0}))
    return worst


def test_sustained_load_keeps_every_bucket_in_shape(broker: EmbeddedBroker, tmp_path: Path) -> None:
    warehouse = tmp_path / "wh"
    cat = procs.catalog(warehouse, broker.bootstrap)
    services = [cat]
    try:
        ident = _create(catalog_pb2_grpc.CatalogServiceStub(cat.channel), "load", 4,
                        {"num-sorted-run.stop-trigger": str(STOP_TRIGGER), "num-sorted-run.compaction-trigger": "3"})
        compactor = procs.compactor(warehouse, cat.port, broker.bootstrap, "--reconcile-interval", "5")
        writer = procs.writer(warehouse, cat.port, "--commit-interval", "0.2")
        services += [compactor, writer]
        stub = writer_pb2_grpc.WriterServiceStub(writer.channel)
        model: dict[int, tuple[str, int]] = {}
        lock = threading.Lock()
        errors: list[BaseException] = []
        worst = [0]
        done = threading.Event()
        end = time.monotonic() + LOAD_SECONDS

        def client(t: int) -> None:
            rng = random.Random(t)
            mine: dict[int, tuple[str, int]] = {}
            r = 0
            try:
                while time.monotonic() < end:
                    ids = rng.sample(range(t * 100_000, t * 100_000 + 20_000), 2_000)
                    v = [f"t{t}r{r}" for _ in ids]
                    n = [rng.randrange(1 << 40) for _ in ids]
                    stub.Write(write_requests(ident, pa.table({"id": pa.array(ids, pa.int64()), "v": v,
                                                               "n": pa.array(n, pa.int64())})), timeout=120)
                    mine.update(zip(ids, zip(v, n, strict=True), strict=True))
                    r += 1
            except BaseException as e:
                errors.append(e)
            with lock:
                model.update(mine)

        def monitor() -> None:
            while not done.is_set():
                try:
                    worst[0] = max(worst[0], _max_runs(warehouse, "db.load"))
                except Exception:
                    pass  # a snapshot expiring under the reader: look again
                done.wait(0.3)

        threads = [threading.Thread(target=client, args=(t,)) for t in range(4)]
        watcher = threading.Thread(target=monitor)
        watcher.start()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        done.set()
        watcher.join()
        assert not errors, f"{errors[0]!r}\n{writer.tail()}\n{compactor.tail()}"
        table = FileSystemCatalog(str(warehouse)).get_table("db.load")
        commits = [s for s in table.snapshots.snapshots() if s.commit_kind == "COMPACT"]
        print(f"\n{len(model):,} keys; {len(table.snapshots.ids())} snapshots, {len(commits)} COMPACT; "
              f"most sorted runs seen in a bucket: {worst[0]}")
        assert commits, f"the compactor never committed: {compactor.tail()}"
        assert worst[0] <= STOP_TRIGGER + 1, f"a bucket reached {worst[0]} sorted runs"
        got = table.to_arrow().sort_by("id")
        expected = sorted((k, v, n) for k, (v, n) in model.items())
        assert list(zip(*(got.column(c).to_pylist() for c in ("id", "v", "n")), strict=True)) == expected
        theirs = pypaimon_read(str(warehouse), "db.load").sort_by("id")
        assert theirs.select(["id", "v", "n"]).equals(got.select(["id", "v", "n"]))
        status = compactor_pb2_grpc.CompactorServiceStub(compactor.channel).CompactionStatus(
            compactor_pb2.CompactionStatusRequest(), timeout=30)
        assert status.plans_completed >= 1 and sorted(status.owned_partitions) == [0, 1, 2, 3]
        for s in (writer, compactor):
            assert s.stop() == 0, s.tail()
    finally:
        for s in reversed(services):
            s.stop()


def test_killed_compactor_hands_its_buckets_over(broker: EmbeddedBroker, tmp_path: Path) -> None:
    warehouse = tmp_path / "wh"
    cat = procs.catalog(warehouse, broker.bootstrap)
    services = [cat]
    try:
        cstub = catalog_pb2_grpc.CatalogServiceStub(cat.channel)
        # no automatic compaction: plans come from the trigger below, so the test knows which job to kill
        ident = _create(cstub, "kill", 16, {"num-sorted-run.compaction-trigger": "1000",
                                            "num-sorted-run.stop-trigger": "100000"})
        table = FileSystemCatalog(str(warehouse)).get_table("db.kill")
        model: dict[int, int] = {}
        rng = random.Random(5)
        for r in range(4):  # four overlapping commits: every bucket gets four level-0 files
            _commit_round(cstub, ident, table, r, rng.sample(range(400_000), 150_000), model)
        a = procs.compactor(warehouse, cat.port, broker.bootstrap, "--compactor-id", "compactor-a",
                            "--reconcile-interval", "3600")
        services.append(a)
        astub = compactor_pb2_grpc.CompactorServiceStub(a.channel)
        deadline = time.monotonic() + 60
        while len(astub.CompactionStatus(compactor_pb2.CompactionStatusRequest(), timeout=30).owned_partitions) < 4:
            assert time.monotonic() < deadline, a.tail()
            time.sleep(0.2)
        b = procs.compactor(warehouse, cat.port, broker.bootstrap, "--compactor-id", "compactor-b",
                            "--reconcile-interval", "3600")
        services.append(b)
        bstub = compactor_pb2_grpc.CompactorServiceStub(b.channel)
        deadline = time.monotonic() + 60
        while True:  # the group rebalances: each replica gets some partitions
            owned_a = astub.CompactionStatus(compactor_pb2.CompactionStatusRequest(), timeout=30).owned_partitions
            owned_b = bstub.CompactionStatus(compactor_pb2.CompactionStatusRequest(), timeout=30).owned_partitions
            if owned_a and owned_b and len(owned_a) + len(owned_b) == 4:
                break
            assert time.monotonic() < deadline, f"no rebalance: {owned_a} {owned_b}"
            time.sleep(0.2)
        reply = astub.TriggerCompaction(compactor_pb2.TriggerCompactionRequest(table=ident, full=True), timeout=60)
        assert reply.buckets_queued > 0 and reply.buckets_queued + reply.buckets_elsewhere == 16
        # kill A while its plan is INFLIGHT (its Spark job runs)
        deadline = time.monotonic() + 120
        while True:
            inflight = [p for p in cstub.ListCompactionPlans(catalog_pb2.ListCompactionPlansRequest(
                table=ident, states=[S.COMPACTION_PLAN_STATE_INFLIGHT]), timeout=30).plans if p.owner == "compactor-a"]
            if inflight:
                break
            assert time.monotonic() < deadline, a.tail()
            time.sleep(0.05)
        time.sleep(random.Random(1).uniform(0.2, 1.0))
        a.kill()
        killed_plan = inflight[0].plan_id
        # B takes A's partitions, rolls the plan back and runs it again
        deadline = time.monotonic() + 180
        while True:
            plans = {p.plan_id: p for p in cstub.ListCompactionPlans(
                catalog_pb2.ListCompactionPlansRequest(table=ident), timeout=30).plans}
            p = plans[killed_plan]
            if p.state == S.COMPACTION_PLAN_STATE_COMPLETED:
                break
            assert p.state in (S.COMPACTION_PLAN_STATE_INFLIGHT, S.COMPACTION_PLAN_STATE_REQUESTED), p
            assert time.monotonic() < deadline, f"plan {killed_plan} never completed: {p}\n{b.tail()}"
            time.sleep(0.2)
        assert p.owner == "compactor-b" and p.attempts == 2 and "compactor-a" in p.reason
        got = {r["id"]: r["n"] for r in FileSystemCatalog(str(warehouse)).get_table("db.kill").to_arrow().to_pylist()}
        assert got == model
        theirs = pypaimon_read(str(warehouse), "db.kill")
        assert theirs.num_rows == len(model)
        assert b.stop() == 0, b.tail()
    finally:
        for s in reversed(services):
            s.stop()


def test_a_requested_plan_nobody_runs_is_adopted(broker: EmbeddedBroker, tmp_path: Path) -> None:
    """A RequestCompaction whose reply was lost (the catalog recorded the plan, then died; the compactor's
    retry meets its own plan as a conflict) leaves a REQUESTED plan holding the bucket's files. The owner of
    the bucket, failing to plan it, adopts that plan and runs it instead of waiting for a rebalance."""
    from lsmlake.rpc.convert import file_to_proto

    warehouse = tmp_path / "wh"
    cat = procs.catalog(warehouse, broker.bootstrap)
    services = [cat]
    try:
        cstub = catalog_pb2_grpc.CatalogServiceStub(cat.channel)
        ident = _create(cstub, "orphan", 1, {"num-sorted-run.compaction-trigger": "1000",
                                             "num-sorted-run.stop-trigger": "100000"})
        table = FileSystemCatalog(str(warehouse)).get_table("db.orphan")
        model: dict[int, int] = {}
        for r in range(3):
            _commit_round(cstub, ident, table, r, list(range(r * 50, r * 50 + 200)), model)
        c = procs.compactor(warehouse, cat.port, broker.bootstrap, "--compactor-id", "compactor-c",
                            "--reconcile-interval", "3600")
        services.append(c)
        stub = compactor_pb2_grpc.CompactorServiceStub(c.channel)
        deadline = time.monotonic() + 60
        while len(stub.CompactionStatus(compactor_pb2.CompactionStatusRequest(), timeout=30).owned_partitions) < 4:
            assert time.monotonic() < deadline, c.tail()
            time.sleep(0.2)
        time.sleep(1.0)  # the start-up recovery has run: what follows is not found by it
        (split,) = FileSystemCatalog(str(warehouse)).get_table("db.orphan").plan()
        assert len(split.files) == 3
        top = table.options.num_levels() - 1
        unit = catalog_pb2.CompactionUnit(partition=split.partition, bucket=split.bucket,
                                          total_buckets=split.total_buckets,
                                          input_files=[file_to_proto(f) for f in split.files], output_level=top)
        orphan = cstub.RequestCompaction(catalog_pb2.RequestCompactionRequest(table=ident, units=[unit], full=True),
                                         timeout=30).plan
        stub.TriggerCompaction(compactor_pb2.TriggerCompactionRequest(table=ident, full=True), timeout=60)
        deadline = time.monotonic() + 120
        while True:
            (p,) = [p for p in cstub.ListCompactionPlans(catalog_pb2.ListCompactionPlansRequest(table=ident),
                                                         timeout=30).plans if p.plan_id == orphan.plan_id]
            if p.state == S.COMPACTION_PLAN_STATE_COMPLETED:
                break
            assert time.monotonic() < deadline, f"plan {orphan.plan_id} never ran: {p}\n{c.tail()}"
            time.sleep(0.2)
        assert p.owner == "compactor-c"
        (split,) = FileSystemCatalog(str(warehouse)).get_table("db.orphan").plan()
        assert [f.level for f in split.files] == [top]
        got = {r["id"]: r["n"] for r in FileSystemCatalog(str(warehouse)).get_table("db.orphan").to_arrow().to_pylist()}
        assert got == model
        assert c.stop() == 0, c.tail()
    finally:
        for s in reversed(services):
            s.stop()
