"""A waited full compaction through the compactor service, on real processes: catalog_svc, compactor_svc
(Spark local[2]) and the embedded Kafka broker, driven by `lsmlake.Client`.

`Client.compact(full=True, wait=True)` returns only when every named bucket is compacted - every file it
held when the request arrived rewritten into one sorted run on the highest level (level-0 files committed
later may sit beside it) - or lists the bucket in `not_compacted` with the reason:

- a multi-bucket, partitioned table: every bucket one sorted run, twice (level 0 only; then max level + 0);
- the same with a long history, which makes planning slow;
- some buckets held by a plan nobody runs when the request arrives: they are compacted after it;
- the compactor's own background compaction running when the request arrives, with writes going on;
- writes landing during the compaction: their level-0 files stay, every older file is rewritten;
- a bucket whose data file is gone: reported as timed out within a short deadline, then as failed;
- buckets owned by another member of the compactor group: reported as owned elsewhere.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import tests.support.writer_procs as procs
from compactor_svc.event_feed import GROUP_ID
from lsmlake import Client
from lsmlake.catalog.filesystem import FileSystemCatalog
from lsmlake.client.compaction import CompactResult
from lsmlake.format.data_file_meta import DataFileMeta
from lsmlake.kafka.broker import EmbeddedBroker
from lsmlake.kafka.client import consumer
from lsmlake.proto_gen.lsmlake.v1 import (
    catalog_pb2,
    catalog_pb2_grpc,
    common_pb2,
    compactor_pb2,
    compactor_pb2_grpc,
)
from lsmlake.rpc.convert import changes_to_proto, file_to_proto
from lsmlake.rpc.events import TOPICS
from lsmlake.table.compact import split_dir
from lsmlake.table.file_store_table import FileStoreTable

pytestmark = pytest.mark.integration

S = catalog_pb2.CompactionPlanState
REGIONS = ("ap", "eu", "us")
NUM_LEVELS = 6
MAX_LEVEL = NUM_LEVELS - 1
QUIET = {"num-sorted-run.compaction-trigger": "1000", "num-sorted-run.stop-trigger": "100000",
         "num-levels": str(NUM_LEVELS)}  # no background compaction: the test decides what is compacted
WAIT_S = 240.0

BucketId = tuple[str, int]  # (region or "", bucket)


@dataclass
class Lake:
    warehouse: Path
    catalog: procs.Service
    compactor: procs.Service
    bootstrap: str

    @property
    def cstub(self) -> Any:
        return catalog_pb2_grpc.CatalogServiceStub(self.catalog.channel)

    @property
    def stub(self) -> Any:
        return compactor_pb2_grpc.CompactorServiceStub(self.compactor.channel)

    def client(self) -> Client:
        return Client(f"127.0.0.1:{self.catalog.port}", compactor=f"127.0.0.1:{self.compactor.port}",
                      warehouse=str(self.warehouse), timeout_s=60)

    def table(self, name: str) -> FileStoreTable:
        return FileSystemCatalog(str(self.warehouse)).get_table(f"db.{name}")

    def owned(self) -> list[int]:
        return list(self.stub.CompactionStatus(compactor_pb2.CompactionStatusRequest(), timeout=30).owned_partitions)


def _wait_owning(lake: Lake, count: int, timeout_s: float = 90.0) -> None:
    deadline = time.monotonic() + timeout_s
    while len(lake.owned()) != count:
        assert time.monotonic() < deadline, f"the compactor owns {lake.owned()}, not {count} partitions"
        time.sleep(0.2)


@pytest.fixture(scope="module")
def lake(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lake]:
    with EmbeddedBroker() as broker:
        warehouse = tmp_path_factory.mktemp("full-wait") / "wh"
        cat = procs.catalog(warehouse, broker.bootstrap)
        try:
            comp = procs.compactor(warehouse, cat.port, broker.bootstrap, "--compactor-id", "compactor-w",
                                   "--reconcile-interval", "3600")
            try:
                out = Lake(warehouse, cat, comp, broker.bootstrap)
                _wait_owning(out, 4)
                yield out
            finally:
                comp.stop()
        finally:
            cat.stop()


# -- tables and writes ------------------------------------------------------------------------------

def _create(lake: Lake, name: str, buckets: int, options: dict[str, str], partitioned: bool = True) -> Any:
    stub = lake.cstub
    stub.CreateDatabase(catalog_pb2.CreateDatabaseRequest(name="db", ignore_if_exists=True), timeout=30)
    ident = common_pb2.TableIdentifier(database="db", table=name)
    stub.CreateTable(catalog_pb2.CreateTableRequest(
        table=ident, columns=[catalog_pb2.Column(name="id", type="BIGINT NOT NULL"),
                              catalog_pb2.Column(name="region", type="STRING NOT NULL"),
                              catalog_pb2.Column(name="n", type="BIGINT")],
        primary_keys=["id", "region"], partition_keys=["region"] if partitioned else [],
        options={"bucket": str(buckets), **options}), timeout=30)
    return ident


class Writer:
    """Commits rounds of upserts through the catalog: one level-0 file per bucket and round."""

    def __init__(self, lake: Lake, ident: Any, partitioned: bool = True, seed: int = 1) -> None:
        self.lake = lake
        self.ident = ident
        self.partitioned = partitioned
        self.rng = random.Random(seed)
        self.model: dict[tuple[int, str], int] = {}
        self.rounds = 0

    def round(self, rows: int = 3_000) -> None:
        r = self.rounds
        self.rounds += 1
        ids = self.rng.sample(range(20_000), rows)
        regions = [REGIONS[i % 3] if self.partitioned else "all" for i in ids]
        w = self.lake.table(self.ident.table).new_write()
        w.write(pa.table({"id": pa.array(ids, pa.int64()), "region": regions, "n": pa.array([r] * rows, pa.int64())}))
        self.lake.cstub.Commit(catalog_pb2.CommitRequest(
            table=self.ident, commit_user="loader", commit_identifier=r + 1, kind=common_pb2.COMMIT_KIND_APPEND,
            changes=[changes_to_proto(m) for m in w.prepare_commit()]), timeout=60)
        self.model.update(((i, g), r) for i, g in zip(ids, regions, strict=True))

    def check_rows(self) -> None:
        got = {(r["id"], r["region"]): r["n"] for r in self.lake.table(self.ident.table).to_arrow().to_pylist()}
        assert got == self.model


class Background:
    """A Writer committing rounds in a thread until stopped."""

    def __init__(self, writer: Writer, pause_s: float = 0.3) -> None:
        self.writer = writer
        self.pause_s = pause_s
        self.stop_event = threading.Event()
        self.errors: list[BaseException] = []
        self.thread = threading.Thread(target=self._run)

    def _run(self) -> None:
        try:
            while not self.stop_event.is_set():
                self.writer.round(1_000)
                self.stop_event.wait(self.pause_s)
        except BaseException as e:
            self.errors.append(e)

    def __enter__(self) -> Background:
        self.thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop_event.set()
        self.thread.join(60)
        assert not self.errors, repr(self.errors[0])


# -- what the table holds ------------------------------------------------------------------------------

def _bucket_files(table: FileStoreTable, snapshot_id: int | None = None) -> dict[BucketId, list[DataFileMeta]]:
    """The files of every bucket of a snapshot (default: the latest), by (region, bucket)."""
    snap = table.snapshot(snapshot_id)
    out: dict[BucketId, list[DataFileMeta]] = {}
    for s in table.new_scan(None, snap, all_levels=True).plan():
        region = str(s.partition_values[0]) if s.partition_values else ""
        out[(region, s.bucket)] = list(s.files)
    return out


def _sorted_runs(files: list[DataFileMeta]) -> int:
    levels = [f.level for f in files]
    return levels.count(0) + len({lv for lv in levels if lv > 0})


def _check_result(lake: Lake, name: str, result: CompactResult, buckets: int) -> None:
    """Every bucket named (as of `request_snapshot_id`) is compacted: in its reported snapshot, each file it held
    at the request is gone or on the max level (one sorted run), and the only other files are newer level-0
    files; and in the latest snapshot no file of the request is below the max level."""
    table = lake.table(name)
    assert result.not_compacted == () and not result.timed_out, result.not_compacted
    assert result.buckets_queued == buckets and result.buckets_elsewhere == 0
    at_request = _bucket_files(table, result.request_snapshot_id)
    assert len(at_request) == buckets
    compacted = {(c.partition.get("region", ""), c.bucket): c for c in result.compacted}
    assert set(compacted) == set(at_request), (sorted(compacted), sorted(at_request))
    assert set(result.plan_ids) == {c.plan_id for c in result.compacted if c.plan_id}
    for key, c in compacted.items():
        assert c.snapshot_id >= result.request_snapshot_id
        before = {f.file_name for f in at_request[key]}
        files = _bucket_files(table, c.snapshot_id)[key]
        assert {f.level for f in files} <= {0, MAX_LEVEL}, (key, c, [(f.file_name, f.level) for f in files])
        for f in files:
            assert f.level == MAX_LEVEL or f.file_name not in before, (key, c, f.file_name, f.level)
    for key, files in _bucket_files(table).items():
        if key in at_request:
            before = {f.file_name for f in at_request[key]}
            assert all(f.level == MAX_LEVEL for f in files if f.file_name in before), key


# -- the tests ------------------------------------------------------------------------------------------

def test_a_waited_full_compaction_leaves_every_bucket_one_sorted_run(lake: Lake) -> None:
    ident = _create(lake, "many", 4, QUIET)
    writer = Writer(lake, ident)
    for _ in range(3):
        writer.round()
    table = lake.table("many")
    assert all(_sorted_runs(fs) == 3 for fs in _bucket_files(table).values())
    with lake.client() as client:
        result = client.compact("db.many", full=True, wait=True, timeout_s=WAIT_S)
        _check_result(lake, "many", result, 12)
        assert result.plan_ids and result.complete and result.wait_limit_s is not None
        # nothing was written since: every bucket is now exactly one sorted run on the max level
        assert all({f.level for f in fs} == {MAX_LEVEL} for fs in _bucket_files(table).values())
        writer.check_rows()

        # max level + level 0 (a bucket of the demo: L0 on top of earlier compactions)
        for _ in range(2):
            writer.round()
        result = client.compact("db.many", full=True, wait=True, timeout_s=WAIT_S)
        _check_result(lake, "many", result, 12)
        assert all({f.level for f in fs} == {MAX_LEVEL} for fs in _bucket_files(table).values())
        writer.check_rows()

        # asked again with nothing to do: every bucket is reported compact, no plan runs
        again = client.compact("db.many", full=True, wait=True, timeout_s=WAIT_S)
        _check_result(lake, "many", again, 12)
        assert again.plan_ids == () and all(c.plan_id is None for c in again.compacted)


def test_a_table_with_a_long_history(lake: Lake) -> None:
    """Many snapshots make planning slow (the demo's Kafka ingestion commits often): the answer still waits
    for the plan, instead of returning while the buckets are being planned."""
    ident = _create(lake, "history", 4, QUIET)
    writer = Writer(lake, ident, seed=7)
    for _ in range(120):
        writer.round(60)
    with lake.client() as client:
        result = client.compact("db.history", full=True, wait=True, timeout_s=WAIT_S)
    _check_result(lake, "history", result, 12)
    assert all({f.level for f in fs} == {MAX_LEVEL} for fs in _bucket_files(lake.table("history")).values())
    writer.check_rows()


def test_buckets_held_by_a_pending_plan_are_compacted_after_it(lake: Lake) -> None:
    """A plan nobody runs (its request's reply was lost) holds three buckets' files when the full compaction is
    asked for: the catalog refuses any plan naming them. The other buckets are compacted at once, the plan is
    adopted and run, and the three buckets are then compacted fully too."""
    ident = _create(lake, "held", 4, QUIET)
    writer = Writer(lake, ident, seed=2)
    for _ in range(3):
        writer.round()
    table = lake.table("held")
    splits = table.new_scan(None, None, all_levels=True).plan()
    held = splits[:3]
    units = [catalog_pb2.CompactionUnit(partition=s.partition, bucket=s.bucket, total_buckets=s.total_buckets,
                                        input_files=[file_to_proto(f) for f in s.files], output_level=3)
             for s in held]
    orphan = lake.cstub.RequestCompaction(catalog_pb2.RequestCompactionRequest(table=ident, units=units, full=False),
                                          timeout=30).plan
    with lake.client() as client:
        result = client.compact("db.held", full=True, wait=True, timeout_s=WAIT_S)
    _check_result(lake, "held", result, 12)
    assert all({f.level for f in fs} == {MAX_LEVEL} for fs in _bucket_files(table).values())
    plans = {p.plan_id: p for p in lake.cstub.ListCompactionPlans(
        catalog_pb2.ListCompactionPlansRequest(table=ident), timeout=30).plans}
    assert plans[orphan.plan_id].state == S.COMPACTION_PLAN_STATE_COMPLETED
    # the held buckets were compacted by a later plan than the adopted one
    held_ids = {(str(s.partition_values[0]), s.bucket) for s in held}
    for c in result.compacted:
        if (c.partition["region"], c.bucket) in held_ids:
            assert c.plan_id is not None and int(c.plan_id) > int(orphan.plan_id)
    writer.check_rows()


def test_a_full_compaction_asked_while_a_background_plan_runs(lake: Lake) -> None:
    """The demo's case: the compactor's universal compaction runs on some buckets and writes go on while the
    full compaction is asked for."""
    ident = _create(lake, "busy", 4, {"num-sorted-run.compaction-trigger": "2", "num-levels": str(NUM_LEVELS)})
    writer = Writer(lake, ident, seed=3)
    deadline = time.monotonic() + 120
    with Background(writer, pause_s=0.2):
        while True:  # until a background plan of this table runs
            inflight = lake.cstub.ListCompactionPlans(catalog_pb2.ListCompactionPlansRequest(
                table=ident, states=[S.COMPACTION_PLAN_STATE_INFLIGHT]), timeout=30).plans
            if inflight:
                break
            assert time.monotonic() < deadline, f"no background plan ran: {lake.compactor.tail()}"
            time.sleep(0.05)
        with lake.client() as client:
            result = client.compact("db.busy", full=True, wait=True, timeout_s=WAIT_S)
    _check_result(lake, "busy", result, 12)
    assert not {p.plan_id for p in inflight} & set(result.plan_ids)  # the background plan is no full one
    writer.check_rows()


def test_writes_during_the_compaction_stay_on_level_0(lake: Lake) -> None:
    ident = _create(lake, "fresh", 4, QUIET)
    writer = Writer(lake, ident, seed=4)
    for _ in range(3):
        writer.round()
    with Background(writer, pause_s=0.1), lake.client() as client:
        result = client.compact("db.fresh", full=True, wait=True, timeout_s=WAIT_S)
    _check_result(lake, "fresh", result, 12)
    table = lake.table("fresh")
    at_request = _bucket_files(table, result.request_snapshot_id)
    # writes landed while the plan ran: its COMPACT snapshots hold level-0 files newer than the request
    newer = [f.file_name for c in result.compacted
             for f in _bucket_files(table, c.snapshot_id)[(c.partition["region"], c.bucket)] if f.level == 0]
    assert newer and not set(newer) & {f.file_name for fs in at_request.values() for f in fs}
    for key, files in _bucket_files(table).items():  # without background compaction: new files stay on level 0
        before = {f.file_name for f in at_request.get(key, [])}
        assert {f.level for f in files} <= {0, MAX_LEVEL}
        assert not [f for f in files if f.level == 0 and f.file_name in before], key
    writer.check_rows()


def test_a_bucket_that_cannot_be_compacted_is_reported(lake: Lake) -> None:
    ident = _create(lake, "broken", 4, QUIET, partitioned=False)
    writer = Writer(lake, ident, partitioned=False, seed=5)
    for _ in range(3):
        writer.round()
    table = lake.table("broken")
    (split,) = [s for s in table.new_scan(None, None, all_levels=True).plan() if s.bucket == 2]
    lost = split.files[0].file_name
    table.io.delete(f"{split_dir(table, split)}/{lost}")
    with lake.client() as client:
        # a short deadline: the answer comes before it and says what the unfinished buckets wait for
        t0 = time.monotonic()
        quick = client.compact("db.broken", full=True, wait=True, timeout_s=4.0)
        assert time.monotonic() - t0 < 4.0
        assert quick.timed_out and quick.wait_limit_s is not None and 3.0 <= quick.wait_limit_s < 4.0
        assert [(n.bucket, n.reason.startswith("timed out after")) for n in quick.not_compacted
                if n.bucket == 2] == [(2, True)], quick.not_compacted
        assert {c.bucket for c in quick.compacted} | {n.bucket for n in quick.not_compacted} == {0, 1, 2, 3}

        result = client.compact("db.broken", full=True, wait=True, timeout_s=WAIT_S)
    assert not result.timed_out
    (failed,) = result.not_compacted
    assert failed.bucket == 2 and failed.partition == {}
    assert failed.reason.startswith("plan failed 3 times") and lost in failed.reason, failed.reason
    assert sorted(c.bucket for c in result.compacted) == [0, 1, 3]
    files = _bucket_files(table)
    assert all({f.level for f in files[("", b)]} == {MAX_LEVEL} for b in (0, 1, 3))
    assert {f.level for f in files[("", 2)]} == {0}
    lake.cstub.DropTable(catalog_pb2.DropTableRequest(table=ident), timeout=30)  # no more retries of it


def test_buckets_owned_by_another_replica_are_reported(lake: Lake) -> None:
    """Another member of the compactor group takes half the event partitions: the buckets on them are listed
    as owned elsewhere, the rest are compacted."""
    ident = _create(lake, "shared", 4, QUIET)
    writer = Writer(lake, ident, seed=6)
    for _ in range(2):
        writer.round()
    stop = threading.Event()
    member = consumer(lake.bootstrap, GROUP_ID, TOPICS, client_id="other-compactor")

    def poll() -> None:
        while not stop.is_set():
            member.poll(timeout_ms=200)

    thread = threading.Thread(target=poll)
    thread.start()
    try:
        _wait_owning(lake, 2)
        with lake.client() as client:
            result = client.compact("db.shared", full=True, wait=True, timeout_s=WAIT_S)
        assert result.buckets_queued + result.buckets_elsewhere == 12 and result.buckets_elsewhere > 0
        assert len(result.not_compacted) == result.buckets_elsewhere
        assert all(n.reason.startswith("owned by another compactor") for n in result.not_compacted)
        assert len(result.compacted) == result.buckets_queued and not result.complete
        files = _bucket_files(lake.table("shared"))
        for c in result.compacted:
            assert {f.level for f in files[(c.partition["region"], c.bucket)]} == {MAX_LEVEL}
        for n in result.not_compacted:
            assert {f.level for f in files[(n.partition["region"], n.bucket)]} == {0}
    finally:
        stop.set()
        thread.join(30)
        member.close(autocommit=False)
    _wait_owning(lake, 4)
