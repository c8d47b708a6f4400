"""The fault round's kill -9 of the compactor in the middle of a job, on an S3 warehouse.

catalog_svc (PostgreSQL metastore), writer_svc and compactor_svc (Spark local[2]) run as separate processes
against a warehouse in the local S3 server, given only its `s3://` URI and the AWS_* environment. A full
compaction of a 16-bucket table runs as one plan; once the job has written some of its outputs to S3 (found by
the plan's file prefix) and before it commits, the compactor is killed with SIGKILL while writes go on through the
writer. The plan is left INFLIGHT; the compactor restarted under the same id rolls it back (deleting the dead
run's outputs from S3) and runs it again.

The table sums a count per key (`cnt`) and keeps the last round that wrote it (`last`), so a lost acknowledged
write reads as a smaller count and a duplicated one (a file committed twice, inputs kept beside their outputs)
as a larger one.
"""

from __future__ import annotations

import contextlib
import random
import threading
import time
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pyarrow as pa
import pytest

from lsmlake import Client
from lsmlake.kafka.broker import EmbeddedBroker
from lsmlake.proto_gen.lsmlake.v1 import catalog_pb2, catalog_pb2_grpc, common_pb2, compactor_pb2, compactor_pb2_grpc
from tests.support import s3_cluster
from tests.support.s3_server import S3Server

pytestmark = pytest.mark.integration

S = catalog_pb2.CompactionPlanState
TABLE = "s3f.t"
IDENT = common_pb2.TableIdentifier(database="s3f", table="t")
BUCKETS = 16  # 16 tasks on 2 Spark slots: the first outputs are on S3 well before the last task ends
ROUNDS = 4
ROWS = 30_000
KEY_SPACE = 80_000
WAIT_S = 240.0
EVENT_PARTITIONS = 4  # of the compactor's event topic (compactor_svc.event_feed's default)


@pytest.fixture(scope="module")
def broker() -> Iterator[EmbeddedBroker]:
    with EmbeddedBroker() as b:
        yield b


class Model:
    """Per key: how many acknowledged writes carried it, and the round of the last one."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.cnt: Counter[int] = Counter()
        self.last: dict[int, int] = {}

    def acknowledged(self, ids: list[int], r: int) -> None:
        with self.lock:
            self.cnt.update(ids)
            self.last.update((i, r) for i in ids)

    def expected(self) -> dict[int, tuple[int, int]]:
        with self.lock:
            return {i: (c, self.last[i]) for i, c in self.cnt.items()}


def _rows(ids: list[int], r: int) -> pa.Table:
    return pa.table({"id": pa.array(ids, pa.int64()), "cnt": pa.array([1] * len(ids), pa.int64()),
                     "last": pa.array([r] * len(ids), pa.int64())})


class Load:
    """Writes through the writer while the compactor dies and recovers; each write counts once acknowledged."""

    def __init__(self, client: Client, model: Model, first_round: int) -> None:
        self.client = client
        self.model = model
        self.round = first_round
        self.done = threading.Event()
        self.errors: list[BaseException] = []
        self.thread = threading.Thread(target=self._run, name="s3-load")

    def _run(self) -> None:
        rng = random.Random(self.round)
        try:
            for _ in range(10_000):  # bounded; stopped long before
                if self.done.is_set():
                    return
                ids = rng.sample(range(KEY_SPACE), 500)
                self.client.write(TABLE, _rows(ids, self.round), commit_now=True)
                self.model.acknowledged(ids, self.round)
                self.round += 1
                self.done.wait(0.2)
        except BaseException as e:
            self.errors.append(e)

    def __enter__(self) -> Load:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.done.set()
        self.thread.join(120)


def _plans(stub: catalog_pb2_grpc.CatalogServiceStub,
           *states: catalog_pb2.CompactionPlanState.ValueType) -> list[catalog_pb2.CompactionPlan]:
    return list(stub.ListCompactionPlans(catalog_pb2.ListCompactionPlansRequest(table=IDENT, states=list(states)),
                                         timeout=30).plans)


def test_compactor_killed_mid_job_on_s3_loses_and_duplicates_nothing(
        s3_server: S3Server, pg_url: str, broker: EmbeddedBroker, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    for k, v in s3_server.env().items():  # the Client reads the table's files with its environment's settings
        monkeypatch.setenv(k, v)
    started = time.monotonic()
    wh = s3_cluster.S3Warehouse.fresh(s3_server)
    cat = s3_cluster.catalog(wh, tmp_path, pg_url, broker.bootstrap)
    services = [cat]
    client: Client | None = None
    try:
        cstub = catalog_pb2_grpc.CatalogServiceStub(cat.channel)
        # no automatic compaction: the only plan is the trigger's, so the test knows which job it kills
        compactor_args = ("--compactor-id", "compactor-s3", "--reconcile-interval", "3600")
        with ThreadPoolExecutor(2) as pool:  # the compactor's JVM starts while the writer does
            starting = [pool.submit(s3_cluster.writer, wh, tmp_path, cat.port, "--commit-interval", "0.2"),
                        pool.submit(s3_cluster.compactor, wh, tmp_path, cat.port, broker.bootstrap, *compactor_args)]
            for f in starting:
                with contextlib.suppress(AssertionError):  # raised again by result() below, once both are in
                    services.append(f.result())
        writer, compactor = (f.result() for f in starting)
        client = Client(f"127.0.0.1:{cat.port}", writer=f"127.0.0.1:{writer.port}",
                        compactor=f"127.0.0.1:{compactor.port}", timeout_s=120)
        client.create_database("s3f")
        client.create_table(TABLE, "id BIGINT NOT NULL, cnt BIGINT, last BIGINT", primary_keys=["id"], options={
            "bucket": str(BUCKETS), "merge-engine": "aggregation", "fields.cnt.aggregate-function": "sum",
            "fields.last.aggregate-function": "last_value", "num-sorted-run.compaction-trigger": "1000",
            "num-sorted-run.stop-trigger": "100000"})
        model = Model()
        rng = random.Random(7)
        for r in range(ROUNDS):  # overlapping rounds: every bucket gets ROUNDS level-0 files to merge
            ids = rng.sample(range(KEY_SPACE), ROWS)
            client.write(TABLE, _rows(ids, r), commit_now=True)
            model.acknowledged(ids, r)

        status = compactor_pb2_grpc.CompactorServiceStub(compactor.channel)
        deadline = time.monotonic() + WAIT_S
        # the Kafka group has given the compactor every partition of the event topic: one trigger, one plan
        request = compactor_pb2.CompactionStatusRequest()
        while len(status.CompactionStatus(request, timeout=30).owned_partitions) < EVENT_PARTITIONS:
            assert time.monotonic() < deadline, f"the compactor never took the buckets: {compactor.tail()}"
            time.sleep(0.2)
        result = client.compact(TABLE, full=True, wait=False)
        assert result.buckets_queued == BUCKETS, result

        with Load(client, model, ROUNDS) as load:
            deadline = time.monotonic() + WAIT_S
            while not (inflight := _plans(cstub, S.COMPACTION_PLAN_STATE_INFLIGHT)):
                assert time.monotonic() < deadline, f"no plan in flight: {compactor.tail()}"
                time.sleep(0.05)
            (plan,) = inflight
            prefix = plan.output_file_prefix
            assert plan.owner == "compactor-s3" and prefix.startswith("data-compact-"), plan
            while not (written := {n for n in wh.data_files(TABLE) if n.startswith(prefix)}):
                (now,) = [p for p in _plans(cstub) if p.plan_id == plan.plan_id]
                assert now.state == S.COMPACTION_PLAN_STATE_INFLIGHT, \
                    f"plan {plan.plan_id} ended before any output was seen on S3: {now}"
                assert time.monotonic() < deadline, f"plan {plan.plan_id} wrote nothing: {compactor.tail()}"
                time.sleep(0.05)
            compactor.kill()
            killed = time.monotonic()
            # what the dead run left on S3: every file it wrote before the kill, none committed
            partial = {n for n in wh.data_files(TABLE) if n.startswith(prefix)}
            assert written <= partial
            (left,) = [p for p in _plans(cstub) if p.plan_id == plan.plan_id]
            assert left.state == S.COMPACTION_PLAN_STATE_INFLIGHT and left.attempts == 1, left
            assert not partial & wh.referenced(TABLE), "a killed run's output is in a snapshot"

            compactor = s3_cluster.compactor(wh, tmp_path, cat.port, broker.bootstrap, *compactor_args)
            services.append(compactor)
            serving = time.monotonic()
            deadline = time.monotonic() + WAIT_S
            while True:
                (p,) = [p for p in _plans(cstub) if p.plan_id == plan.plan_id]
                if p.state == S.COMPACTION_PLAN_STATE_COMPLETED:
                    recovered = time.monotonic()
                    break
                assert p.state in (S.COMPACTION_PLAN_STATE_INFLIGHT, S.COMPACTION_PLAN_STATE_REQUESTED), p
                assert time.monotonic() < deadline, f"plan {plan.plan_id} never completed: {p}\n{compactor.tail()}"
                time.sleep(0.2)
        assert not load.errors, f"{load.errors[0]!r}\n{writer.tail()}"
        assert load.round > ROUNDS, "writes went on while the compactor was down"

        # rolled back (the dead run's outputs deleted) and run again by the restarted compactor
        assert p.owner == "compactor-s3" and p.attempts == 2, p
        files = wh.data_files(TABLE)
        referenced = wh.referenced(TABLE)
        assert not partial & files, f"outputs of the killed run left on S3: {sorted(partial & files)[:5]}"
        assert files <= referenced, f"files no snapshot uses: {sorted(files - referenced)[:5]}"
        used = {n for n in referenced if n.startswith("data-")}
        assert used <= files, f"files of retained snapshots missing on S3: {sorted(used - files)[:5]}"
        ours = {n for n in files if n.startswith(prefix)}
        assert ours, "the re-run's outputs are committed"
        table = wh.table(TABLE)
        snap = table.snapshots.snapshot(p.committed_snapshot_id)
        assert snap is not None and snap.commit_kind == "COMPACT"

        # no acknowledged row lost or duplicated: the Client's read (planned by the catalog, read from S3)
        got = client.scan(TABLE)
        ids = got["id"].to_pylist()
        assert len(ids) == len(set(ids))
        read = dict(zip(ids, zip(got["cnt"].to_pylist(), got["last"].to_pylist(), strict=True), strict=True))
        expected = model.expected()
        lost = sum(1 for i, (c, _) in expected.items() if read.get(i, (0, 0))[0] < c)
        doubled = sum(1 for i, (c, _) in expected.items() if read.get(i, (0, 0))[0] > c)
        print(f"\n{len(expected):,} keys, {sum(model.cnt.values()):,} acknowledged rows ({load.round - ROUNDS} "
              f"writes during the fault); {len(partial)} output file(s) of the killed run deleted; killed after "
              f"{killed - started:.0f} s, restarted compactor serving {serving - killed:.0f} s after the kill, "
              f"plan completed {recovered - serving:.0f} s later")
        assert (lost, doubled) == (0, 0), f"{lost} keys lost rows, {doubled} keys duplicated rows"
        assert read == expected
        # orphan cleanup through the catalog on S3 finds nothing of ours to delete and keeps what is used
        cstub.RemoveOrphanFiles(catalog_pb2.RemoveOrphanFilesRequest(table=IDENT, older_than_ms=1), timeout=120)
        assert wh.data_files(TABLE) == files
        again = client.scan(TABLE)
        assert again.num_rows == len(expected) and again.sort_by("id").equals(got.sort_by("id"))
        for s in (writer, compactor):
            assert s.stop() == 0, s.tail()
    finally:
        if client is not None:
            client.close()
        for s in reversed(services):
            s.stop()
