"""lsmlake on a Spark standalone cluster (`spark_cluster`: a master and workers as separate processes), not
`local[*]`: the compactor service compacts an S3 warehouse on it with the worker's Python given by
`spark.pyspark.python` and the storage settings lsmlake hands the executors; the Spark data source reads a table on
it; and a worker killed with SIGKILL in the middle of a plan does not block the compactor: another table's plan
commits while that plan hangs, and at its deadline the plan is cancelled, rolled back and run again, with no
acknowledged row lost.
"""

from __future__ import annotations

import os
import platform
import random
import shutil
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import tests.support.writer_procs as procs
from lsmlake.catalog.filesystem import FileSystemCatalog
from lsmlake.errors import InvalidInputError
from lsmlake.kafka.broker import EmbeddedBroker
from lsmlake.proto_gen.lsmlake.v1 import catalog_pb2, catalog_pb2_grpc, common_pb2, compactor_pb2, compactor_pb2_grpc
from lsmlake.rpc.convert import changes_to_proto
from lsmlake.spark.compaction_job import SparkCompactor
from tests.integration.interop.test_interop_pypaimon import pypaimon_read
from tests.support.s3_server import S3Server
from tests.support.spark_cluster import SparkCluster
from tests.support.writer_procs import Service, free_port

pytestmark = pytest.mark.integration

S = catalog_pb2.CompactionPlanState
WAIT_S = 240.0
NO_AUTO_COMPACTION = {"num-sorted-run.compaction-trigger": "1000", "num-sorted-run.stop-trigger": "100000"}


@pytest.fixture(scope="module")
def broker() -> Iterator[EmbeddedBroker]:
    with EmbeddedBroker() as b:
        yield b


def _create(stub: Any, name: str, buckets: int) -> common_pb2.TableIdentifier:
    stub.CreateDatabase(catalog_pb2.CreateDatabaseRequest(name="db", ignore_if_exists=True), timeout=30)
    ident = common_pb2.TableIdentifier(database="db", table=name)
    stub.CreateTable(catalog_pb2.CreateTableRequest(
        table=ident, columns=[catalog_pb2.Column(name="id", type="BIGINT NOT NULL"),
                              catalog_pb2.Column(name="n", type="BIGINT")],
        primary_keys=["id"], options={"bucket": str(buckets), **NO_AUTO_COMPACTION}), timeout=30)
    return ident


def _commit_rounds(stub: Any, ident: common_pb2.TableIdentifier, warehouse: str, rounds: int,
                   seed: int) -> dict[int, int]:
    """`rounds` overlapping commits through the catalog (each acknowledged); the model of what they left."""
    table = FileSystemCatalog(warehouse).get_table(f"db.{ident.table}")
    rng = random.Random(seed)
    model: dict[int, int] = {}
    for r in range(rounds):
        ids = rng.sample(range(50_000), 20_000)
        w = table.new_write()
        w.write(pa.table({"id": pa.array(ids, pa.int64()), "n": pa.array([r] * len(ids), pa.int64())}))
        stub.Commit(catalog_pb2.CommitRequest(table=ident, commit_user="loader", commit_identifier=r + 1,
                                              kind=common_pb2.COMMIT_KIND_APPEND,
                                              changes=[changes_to_proto(m) for m in w.prepare_commit()]), timeout=60)
        model.update((i, r) for i in ids)
    return model


def _rows(warehouse: str, name: str) -> dict[int, int]:
    return {r["id"]: r["n"] for r in FileSystemCatalog(warehouse).get_table(f"db.{name}").to_arrow().to_pylist()}


def _compacted(warehouse: str, name: str) -> bool:
    """Every bucket of the table is one sorted run above level 0 (what a full compaction leaves)."""
    t = FileSystemCatalog(warehouse).get_table(f"db.{name}")
    levels = [{f.level for f in s.files} for s in t.new_scan(None, None, all_levels=True).plan()]
    return bool(levels) and all(len(lv) == 1 and 0 not in lv for lv in levels)


def _wait_owned(stub: Any, service: Service) -> None:
    until = time.monotonic() + WAIT_S
    while not stub.CompactionStatus(compactor_pb2.CompactionStatusRequest(), timeout=30).owned_partitions:
        assert time.monotonic() < until, service.tail()
        time.sleep(0.2)


def _metric(port: int, name: str, labels: str = "") -> float:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
        text = r.read().decode()
    for line in text.splitlines():
        if line.startswith(f"{name}{labels} ") or (not labels and line.startswith(f"{name} ")):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


def test_the_compactor_service_compacts_an_s3_warehouse_on_the_cluster(
        broker: EmbeddedBroker, spark_cluster: SparkCluster, s3_server: S3Server, tmp_path: Path) -> None:
    prefix = f"wh-cluster-{random.Random().randrange(1 << 30):x}"
    warehouse = f"s3://{s3_server.bucket}/{prefix}"  # the services get their S3 settings from the environment
    env = s3_server.env()
    # the workers' Python, as spark.pyspark.python names it: it leaves a mark that it ran
    marker = tmp_path / "worker-python-ran"
    python = tmp_path / "python.sh"
    python.write_text(f"#!/bin/sh\ntouch '{marker}'\nexec '{sys.executable}' \"$@\"\n")
    python.chmod(0o755)
    services: list[Service] = []
    try:
        cat = Service("catalog_svc", ["--warehouse", warehouse, "--metastore", f"sqlite:///{tmp_path}/meta.sqlite",
                                      "--kafka", broker.bootstrap], tmp_path, env=env)
        services.append(cat)
        cstub = catalog_pb2_grpc.CatalogServiceStub(cat.channel)
        ident = _create(cstub, "t", 4)
        model = _commit_rounds(cstub, ident, s3_server.warehouse(prefix), 4, 1)
        comp = Service("compactor_svc", ["--warehouse", warehouse, "--catalog", f"127.0.0.1:{cat.port}",
                                         "--kafka", broker.bootstrap, "--spark-master", spark_cluster.master,
                                         "--spark-conf", f"spark.pyspark.python={python}",
                                         "--spark-conf", "spark.executor.memory=512m",
                                         "--reconcile-interval", "3600"], tmp_path, env=env)
        services.append(comp)
        stub = compactor_pb2_grpc.CompactorServiceStub(comp.channel)
        _wait_owned(stub, comp)
        reply = stub.TriggerCompaction(compactor_pb2.TriggerCompactionRequest(table=ident, full=True, wait=True),
                                       timeout=WAIT_S)
        assert not reply.timed_out and len(reply.compacted) == 4, (reply, comp.tail())
        assert marker.exists(), "the workers did not run the interpreter spark.pyspark.python names"
        # the readers agree with what was acknowledged: lsmlake's, and pypaimon's through the moto endpoint
        wh = s3_server.warehouse(prefix)
        assert _rows(wh, "t") == model
        assert _compacted(wh, "t")
        assert comp.stop() == 0, comp.tail()
    finally:
        for s in reversed(services):
            s.stop()


def test_the_spark_data_source_reads_on_the_cluster(spark_cluster: SparkCluster, tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    from pyspark.sql import SparkSession

    import lsmlake.spark

    warehouse = str(tmp_path / "wh")
    cat = FileSystemCatalog(warehouse)
    cat.create_database("db", ignore_if_exists=True)
    t = cat.create_table("db.r", "id BIGINT NOT NULL, v STRING, dt STRING NOT NULL", partition_keys=["dt"],
                         primary_keys=["dt", "id"], options={"bucket": "2"})
    t.write_arrow(pa.table({"id": list(range(1000)), "v": [f"v{i}" for i in range(1000)],
                            "dt": ["d1", "d2"] * 500}))
    t.write_arrow(pa.table({"id": [0, 1], "v": ["new", None], "dt": ["d1", "d2"], "_row_kind": ["+U", "-D"]}))
    monkeypatch.setenv("PYSPARK_PYTHON", sys.executable)  # the workers' Python must import lsmlake
    spark = (SparkSession.builder.master(spark_cluster.master).appName("lsmlake-cluster-read")
             .config("spark.ui.enabled", "false").config("spark.executor.memory", "512m")
             .config("spark.driver.memory", "512m").config("spark.sql.session.timeZone", "UTC").getOrCreate())
    try:
        assert spark.sparkContext.master == spark_cluster.master
        lsmlake.spark.register(spark)
        got = spark.read.format("lsmlake").option("warehouse", warehouse).load("db.r").toArrow()
    finally:
        spark.stop()
    want = t.to_arrow()
    key = ["dt", "id"]
    assert got.num_rows == 999
    assert got.select(["id", "v", "dt"]).sort_by([(k, "ascending") for k in key]).to_pylist() == \
        want.select(["id", "v", "dt"]).sort_by([(k, "ascending") for k in key]).to_pylist()


def test_workers_whose_python_differs_are_refused_at_start_naming_the_difference(
        spark_cluster: SparkCluster, tmp_path: Path) -> None:
    """The workers' interpreter sees another numpy than the compactor's (a distribution's metadata earlier on its
    path): the compactor's session does not start, and the error says what differs where."""
    fake = tmp_path / "site"
    (fake / "numpy-0.0.1.dist-info").mkdir(parents=True)
    (fake / "numpy-0.0.1.dist-info" / "METADATA").write_text("Metadata-Version: 2.1\nName: numpy\nVersion: 0.0.1\n")
    python = tmp_path / "python.sh"
    python.write_text(f"#!/bin/sh\nexport PYTHONPATH='{fake}':$PYTHONPATH\nexec '{sys.executable}' \"$@\"\n")
    python.chmod(0o755)
    compactor = SparkCompactor(spark_cluster.master, conf={"spark.pyspark.python": str(python),
                                                           "spark.executor.memory": "512m"})
    try:
        with pytest.raises(InvalidInputError) as e:
            compactor.start()
    finally:
        compactor.stop()
    import numpy

    assert os.environ.get("PYSPARK_PYTHON") != str(python)  # put back after the start
    assert "numpy 0.0.1 on " in str(e.value) and f"spark.pyspark.python = {python}:" in str(e.value)
    assert f"{numpy.__version__} on the driver" in str(e.value) and "pyarrow" not in str(e.value)


def _data_file(warehouse: Path, name: str) -> Path:
    folder = warehouse / "db.db" / name / "bucket-0"
    return sorted(p for p in folder.iterdir() if p.name.startswith("data-"))[0]


def test_a_worker_killed_mid_plan_blocks_no_other_table_and_the_plan_runs_again(
        broker: EmbeddedBroker, spark_cluster: SparkCluster, tmp_path: Path) -> None:
    """Table A's plan hangs on the cluster (an input file of A is a FIFO nobody writes to: its task blocks reading
    it, wherever it runs) and its worker is killed with SIGKILL; a new worker with two cores joins, Spark gives A's
    task to it (where it hangs again) and B's plan runs and commits on the other core while A's still runs. At A's
    deadline its job is cancelled and its plan rolled back; with its input readable again the plan that follows
    commits. Every acknowledged row of both tables is there."""
    deadline_s = 90.0
    warehouse = tmp_path / "wh"
    services: list[Service] = []
    fifo: Path | None = None
    kept = tmp_path / "kept.parquet"
    try:
        cat = procs.catalog(warehouse, broker.bootstrap)
        services.append(cat)
        cstub = catalog_pb2_grpc.CatalogServiceStub(cat.channel)
        a, b = _create(cstub, "a", 1), _create(cstub, "b", 1)
        model_a = _commit_rounds(cstub, a, str(warehouse), 3, 2)
        model_b = _commit_rounds(cstub, b, str(warehouse), 3, 3)
        fifo = _data_file(warehouse, "a")
        shutil.move(fifo, kept)
        os.mkfifo(fifo)
        metrics_port = free_port()
        comp = procs.compactor(warehouse, cat.port, broker.bootstrap, "--spark-master", spark_cluster.master,
                               "--plan-deadline", str(deadline_s), "--plan-deadline-per-gib", "0",
                               "--concurrent-plans", "2", "--reconcile-interval", "3600",
                               "--metrics-port", str(metrics_port))
        services.append(comp)
        stub = compactor_pb2_grpc.CompactorServiceStub(comp.channel)
        _wait_owned(stub, comp)

        stub.TriggerCompaction(compactor_pb2.TriggerCompactionRequest(table=a, full=True), timeout=60)
        until = time.monotonic() + WAIT_S
        while _metric(metrics_port, "lsmlake_compactor_plan_tasks_running") < 1:  # A's task runs on the worker
            assert time.monotonic() < until, comp.tail()
            time.sleep(0.2)
        [plan_a] = stub.CompactionStatus(compactor_pb2.CompactionStatusRequest(), timeout=30).running
        first_attempt = _workers_opening_a_fifo()
        spark_cluster.kill_worker()
        spark_cluster.start_worker(cores=2)

        reply = stub.TriggerCompaction(compactor_pb2.TriggerCompactionRequest(table=b, full=True, wait=True),
                                       timeout=WAIT_S)
        assert not reply.timed_out and len(reply.compacted) == 1, (reply, comp.tail())
        # B committed while A's plan still runs: it was not held behind A (B's plan thread leaves the running list
        # just after its commit, which the wait above already saw)
        until = time.monotonic() + 30
        running = stub.CompactionStatus(compactor_pb2.CompactionStatusRequest(), timeout=30).running
        while len(running) > 1 and time.monotonic() < until:
            time.sleep(0.2)
            running = stub.CompactionStatus(compactor_pb2.CompactionStatusRequest(), timeout=30).running
        assert [r.plan_id for r in running] == [plan_a.plan_id], running
        assert running[0].table.table == "a" and running[0].running_ms < deadline_s * 1000
        assert _rows(str(warehouse), "b") == model_b and _compacted(str(warehouse), "b")

        # A's input reads again (the hung task keeps the FIFO it opened); its plan ends at its deadline. The task's
        # attempt on the new worker must be waiting on the FIFO first: one the driver hands out only after the swap
        # (it may learn of the lost worker late) would read the file and commit the plan before its deadline
        until = time.monotonic() + WAIT_S
        while not _workers_opening_a_fifo() - first_attempt:
            assert time.monotonic() < until, f"no attempt of A's task on the new worker: {comp.tail()}"
            time.sleep(0.2)
        fifo.unlink()
        shutil.move(kept, fifo)
        fifo = None
        until = time.monotonic() + deadline_s + WAIT_S
        while True:
            plans = cstub.ListCompactionPlans(catalog_pb2.ListCompactionPlansRequest(table=a), timeout=30).plans
            first = next(p for p in plans if p.plan_id == plan_a.plan_id)
            if any(p.state == S.COMPACTION_PLAN_STATE_COMPLETED for p in plans):
                break
            assert time.monotonic() < until, (plans, comp.tail())
            time.sleep(0.5)
        assert first.state == S.COMPACTION_PLAN_STATE_ROLLED_BACK and "deadline" in first.reason, first
        assert _metric(metrics_port, "lsmlake_compactor_plans_total", '{outcome="expired"}') == 1
        assert _rows(str(warehouse), "a") == model_a and _compacted(str(warehouse), "a")
        assert pypaimon_read(str(warehouse), "db.a").num_rows == len(model_a)
        assert comp.stop() == 0, comp.tail()
    finally:
        if fifo is not None:
            fifo.unlink(missing_ok=True)
            shutil.move(kept, fifo)
        for s in reversed(services):
            s.stop()


#: the number of the openat system call, in which a reader of a FIFO nobody writes to waits (`/proc/PID/syscall`)
_OPENAT = {"x86_64": "257", "aarch64": "56"}.get(platform.machine(), "257")


def _workers_opening_a_fifo() -> set[int]:
    """The PySpark worker processes waiting in an open (a FIFO with no writer: every other open returns at once)."""
    found = set()
    for pid in (d for d in os.listdir("/proc") if d.isdigit()):
        try:
            call = Path(f"/proc/{pid}/syscall").read_text().split()[:1]
            command = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:  # gone meanwhile, or not ours to read
            continue
        if call == [_OPENAT] and b"pyspark" in command:
            found.add(int(pid))
    return found
