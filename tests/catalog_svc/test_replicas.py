"""Acceptance: two catalog-svc replicas on one PostgreSQL metastore and one warehouse, 8 committers for 60 s.

Both replicas are real processes on loopback ports sharing the warehouse folder, a fresh PostgreSQL schema
and the embedded Kafka broker. Eight committer threads, each with its own commit user and its own
TableWrite, write small level-0 files with the library and commit them as APPEND snapshots, alternating
between the replicas until a deadline. Lost replies are simulated two ways: an acknowledged commit is sent
again to the other replica (the answer must be `already_committed` with the same snapshot id), and a
commit is first sent with a deadline too short to answer, then retried until acknowledged.

Afterwards, per table: snapshot ids are 1..N in the warehouse and in ListSnapshots of both replicas;
every acknowledged (user, identifier) is exactly one snapshot, which added exactly the files the
committer sent; the rows read by lsmlake (and by pypaimon, for the partitioned table) equal the model of
the acknowledged rows; and the `data-files` topic, consumed from the beginning while the committers run,
holds after dropping duplicates exactly one event per (snapshot, partition, bucket) the snapshot changed,
naming the files it added, and none for anything else.

Every key is written once, so the merged rows do not depend on the order of sequence numbers, which
writers of the same bucket assign independently.
"""

from __future__ import annotations

import dataclasses
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pyarrow as pa
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from pypaimon import CatalogFactory

from lsmlake.catalog.filesystem import FileSystemCatalog
from lsmlake.format.manifest import ADD
from lsmlake.kafka.broker import EmbeddedBroker
from lsmlake.kafka.client import consumer
from lsmlake.proto_gen.lsmlake.v1 import catalog_pb2, catalog_pb2_grpc, common_pb2, events_pb2
from lsmlake.rpc.convert import changes_to_proto
from lsmlake.rpc.events import COMPACTION_RESULTS_TOPIC, DATA_FILES_TOPIC
from lsmlake.table.file_store_table import FileStoreTable
from lsmlake.table.write import TableWrite

pytestmark = pytest.mark.integration

RUN_S = float(os.environ.get("LSMLAKE_REPLICA_TEST_SECONDS", "60"))  # shorter while developing the test
TIMEOUT_S = 30.0  # one RPC, one start, one stop
EVENTS_TIMEOUT_S = 90.0  # after the last commit, for the relays to publish every event
SERVICE = "lsmlake.v1.CatalogService"
DB = "db"
WRITERS = 8
ROWS_PER_COMMIT = 8
RESEND_EVERY = 5  # commit n of a writer with n % 5 == 0 is sent again, after its reply, to the other replica
SHORT_DEADLINE_EVERY = 7  # commit n with n % 7 == 3 is first sent with a deadline too short for any reply
SHORT_DEADLINE_S = 0.002
MAX_ATTEMPTS = 5  # of one commit after an unanswered first try


@dataclasses.dataclass(frozen=True)
class TableSpec:
    """A table the committers write to."""

    name: str
    columns: tuple[tuple[str, str], ...]
    primary_keys: tuple[str, ...]
    partition_keys: tuple[str, ...]
    buckets: int
    pypaimon: bool  # read it with pypaimon too (seconds per thousand files here, so not every table)

    @property
    def ident(self) -> common_pb2.TableIdentifier:
        return common_pb2.TableIdentifier(database=DB, table=self.name)

    @property
    def table_id(self) -> str:
        return f"{DB}.{self.name}"


# "t" takes six writers (most contention); "p" is partitioned, so its events carry non-empty partitions
MAIN = TableSpec("t", (("id", "BIGINT NOT NULL"), ("v", "STRING")), ("id",), (), 4, pypaimon=False)
PARTED = TableSpec("p", (("dt", "STRING NOT NULL"), ("id", "BIGINT NOT NULL"), ("v", "STRING")),
                   ("dt", "id"), ("dt",), 2, pypaimon=True)
TABLES = (MAIN, PARTED)


def _table_of(writer: int) -> TableSpec:
    return PARTED if writer >= WRITERS - 2 else MAIN


# -- the processes -------------------------------------------------------------------------------


@dataclasses.dataclass
class Replica:
    """One running catalog-svc process and a channel to it."""

    name: str
    proc: subprocess.Popen[bytes]
    port: int
    stdout: Path
    stderr: Path
    channel: grpc.Channel
    stub: catalog_pb2_grpc.CatalogServiceStub


def _log_tail(path: Path, lines: int = 60) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError as e:
        return f"(no log: {e})"


def _start_replica(name: str, tmp: Path, warehouse: str, metastore: str, bootstrap: str) -> Replica:
    """Start `catalog-svc --port 0` and wait for its address line and health SERVING."""
    out, err = tmp / f"{name}.stdout.log", tmp / f"{name}.stderr.log"
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    with open(out, "wb") as o, open(err, "wb") as e:  # the child keeps its own copies
        proc = subprocess.Popen(
            [sys.executable, "-m", "catalog_svc", "--warehouse", warehouse, "--metastore", metastore,
             "--port", "0", "--kafka", bootstrap], stdin=subprocess.DEVNULL, stdout=o, stderr=e, env=env)
    try:
        deadline = time.monotonic() + TIMEOUT_S
        prefix = "catalog_svc listening on 127.0.0.1:"
        port = 0
        while not port:
            assert proc.poll() is None, f"{name} exited with {proc.returncode}:\n{_log_tail(err)}"
            assert time.monotonic() < deadline, f"{name} printed no address:\n{_log_tail(err)}"
            first = out.read_text(errors="replace").split("\n", 1)
            if len(first) == 2:  # a complete first line
                assert first[0].startswith(prefix), first[0]
                port = int(first[0].removeprefix(prefix))
            else:
                time.sleep(0.05)  # polling interval, bounded by the deadline
        channel = grpc.insecure_channel(f"127.0.0.1:{port}")
        health = health_pb2_grpc.HealthStub(channel)
        while True:
            try:
                if health.Check(health_pb2.HealthCheckRequest(service=SERVICE), timeout=1.0).status == \
                        health_pb2.HealthCheckResponse.SERVING:
                    break
            except grpc.RpcError:
                pass
            assert proc.poll() is None and time.monotonic() < deadline, f"{name} never SERVING:\n{_log_tail(err)}"
            time.sleep(0.05)
        return Replica(name, proc, port, out, err, channel, catalog_pb2_grpc.CatalogServiceStub(channel))
    except BaseException:
        _terminate(proc)
        raise


def _terminate(proc: subprocess.Popen[bytes]) -> int | None:
    """SIGTERM, then SIGKILL if the process is still there after the grace period; the exit code."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(TIMEOUT_S)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)
    return proc.returncode


@dataclasses.dataclass
class Cluster:
    """The warehouse, the Kafka broker and the two replicas the test runs against."""

    warehouse: str
    bootstrap: str
    replicas: list[Replica]
    on_s3: bool = False

    def dump_logs(self) -> None:
        for r in self.replicas:
            print(f"==== {r.name} (pid {r.proc.pid}, exit {r.proc.poll()}) stderr:\n{_log_tail(r.stderr, 200)}")


@pytest.fixture(params=["local", "s3"])
def cluster(request: pytest.FixtureRequest, pg_url: str, tmp_path: Path) -> Iterator[Cluster]:
    """The replicas on a warehouse folder, or on a local S3 server (moto) where snapshots are published by
    conditional create."""
    on_s3 = request.param == "s3"
    if on_s3:
        warehouse = request.getfixturevalue("s3_server").warehouse()
    else:
        (tmp_path / "warehouse").mkdir()
        warehouse = str(tmp_path / "warehouse")
    with EmbeddedBroker(log_dir=tmp_path / "kafka") as broker:
        replicas: list[Replica] = []
        try:
            for name in ("replica-a", "replica-b"):
                replicas.append(_start_replica(name, tmp_path, warehouse, pg_url, broker.bootstrap))
            yield Cluster(warehouse, broker.bootstrap, replicas, on_s3)
        finally:
            for r in replicas:
                r.channel.close()
                _terminate(r.proc)


# -- the committers ------------------------------------------------------------------------------


@dataclasses.dataclass
class Ack:
    """One acknowledged commit: what was sent and what the reply said."""

    table: TableSpec
    user: str
    identifier: int
    snapshot_id: int
    files: dict[tuple[bytes, int], set[str]]  # (partition, bucket) -> names of the files added
    rows: list[dict[str, Any]]


@dataclasses.dataclass
class Stats:
    """What the committers did, for the printed note."""

    commits: int = 0
    resent: int = 0  # acknowledged, sent again: answered already_committed
    unanswered: int = 0  # first try got no reply in time
    unanswered_but_applied: int = 0  # ... and its retry answered already_committed


class Committer:
    """One writer instance: its own commit user, table and TableWrite; commits until the deadline."""

    def __init__(self, index: int, cluster: Cluster, deadline: float, stop: threading.Event) -> None:
        self.index = index
        self.spec = _table_of(index)
        self.user = f"writer-{index}-{uuid.uuid4().hex[:6]}"
        self.replicas = cluster.replicas
        self.deadline = deadline
        self.stop = stop
        table: FileStoreTable = FileSystemCatalog(cluster.warehouse).get_table(self.spec.table_id)
        self.write: TableWrite = table.new_write()
        self.acks: list[Ack] = []
        self.stats = Stats()
        self.error: BaseException | None = None

    def rows(self, n: int) -> list[dict[str, Any]]:
        """Keys no other commit writes: a block of ROWS_PER_COMMIT ids per (writer, commit)."""
        base = (self.index * 1_000_000 + n) * 100
        out: list[dict[str, Any]] = [{"id": base + i, "v": f"w{self.index}-c{n}-r{i}"}
                                     for i in range(ROWS_PER_COMMIT)]
        if self.spec.partition_keys:
            for i, r in enumerate(out):
                r["dt"] = "2024-01-01" if i % 2 else "2024-01-02"
        return out

    def run(self) -> None:
        try:
            n = 0
            while time.monotonic() < self.deadline and not self.stop.is_set():
                n += 1
                self._one(n)
        except BaseException as e:
            self.error = e
            self.stop.set()  # the others stop too: the test fails anyway

    def _one(self, n: int) -> None:
        rows = self.rows(n)
        self.write.write(pa.Table.from_pylist(rows, schema=self._arrow_schema()))
        messages = self.write.prepare_commit()
        request = catalog_pb2.CommitRequest(
            table=self.spec.ident, commit_user=self.user, commit_identifier=n, kind=common_pb2.COMMIT_KIND_APPEND,
            changes=[changes_to_proto(m) for m in messages])
        here, there = self.replicas[(self.index + n) % 2], self.replicas[(self.index + n + 1) % 2]
        reply = None
        if n % SHORT_DEADLINE_EVERY == 3:
            try:
                reply = here.stub.Commit(request, timeout=SHORT_DEADLINE_S)
            except grpc.RpcError as e:
                assert e.code() == grpc.StatusCode.DEADLINE_EXCEEDED, e
                self.stats.unanswered += 1
                reply = self._retry(request, there)
                if reply.already_committed:
                    self.stats.unanswered_but_applied += 1
        if reply is None:
            reply = here.stub.Commit(request, timeout=TIMEOUT_S)
            assert not reply.already_committed, f"{self.user}/{n}: a first commit answered already_committed"
        assert reply.snapshot_id >= 1
        files = {(m.partition, m.bucket): {f.file_name for f in m.new_files} for m in messages}
        self.acks.append(Ack(self.spec, self.user, n, reply.snapshot_id, files, rows))
        self.stats.commits += 1
        if n % RESEND_EVERY == 0:  # the reply was "lost": the same commit again, to the other replica
            again = there.stub.Commit(request, timeout=TIMEOUT_S)
            assert (again.snapshot_id, again.already_committed) == (reply.snapshot_id, True), \
                f"{self.user}/{n} sent again: {again} after snapshot {reply.snapshot_id}"
            self.stats.resent += 1

    def _retry(self, request: catalog_pb2.CommitRequest, replica: Replica) -> Any:
        """The same request until a replica answers (bounded); the first try may or may not have been applied."""
        for attempt in range(MAX_ATTEMPTS):
            try:
                return replica.stub.Commit(request, timeout=TIMEOUT_S)
            except grpc.RpcError as e:
                if attempt == MAX_ATTEMPTS - 1 or e.code() not in (grpc.StatusCode.UNAVAILABLE,
                                                                   grpc.StatusCode.DEADLINE_EXCEEDED):
                    raise
                replica = self.replicas[attempt % 2]
        raise AssertionError("unreachable")

    def _arrow_schema(self) -> pa.Schema:
        types = {"id": pa.int64(), "v": pa.string(), "dt": pa.string()}
        return pa.schema([pa.field(c, types[c], nullable=c == "v") for c, _ in self.spec.columns])


# -- the checks ----------------------------------------------------------------------------------


def _create_tables(stub: catalog_pb2_grpc.CatalogServiceStub) -> None:
    stub.CreateDatabase(catalog_pb2.CreateDatabaseRequest(name=DB), timeout=TIMEOUT_S)
    for spec in TABLES:
        stub.CreateTable(catalog_pb2.CreateTableRequest(
            table=spec.ident, columns=[catalog_pb2.Column(name=c, type=t) for c, t in spec.columns],
            primary_keys=list(spec.primary_keys), partition_keys=list(spec.partition_keys),
            options={"bucket": str(spec.buckets)}), timeout=TIMEOUT_S)


def _added_files(table: FileStoreTable, snapshot_delta_list: str) -> dict[tuple[bytes, int], set[str]]:
    """(partition, bucket) -> names of the data files a snapshot's delta manifests add."""
    out: dict[tuple[bytes, int], set[str]] = {}
    for meta in table.manifests.read_list(snapshot_delta_list):
        for e in table.manifests.read_manifest(meta.file_name):
            assert e.kind == ADD, f"an APPEND snapshot deleted {e.file.file_name}"
            out.setdefault((e.partition, e.bucket), set()).add(e.file.file_name)
    return out


def _check_table(cluster: Cluster, spec: TableSpec,
                 acks: list[Ack]) -> dict[int, tuple[dict[tuple[bytes, int], set[str]], int]]:
    """Snapshots, commit records, files and rows of one table; the files each snapshot added, and its time."""
    table = FileSystemCatalog(cluster.warehouse).get_table(spec.table_id)
    snapshots = table.snapshots.snapshots()
    ids = [s.id for s in snapshots]
    assert ids == list(range(1, len(ids) + 1)), f"{spec.table_id}: snapshot ids are not 1..N: {ids}"
    for r in cluster.replicas:
        listed = r.stub.ListSnapshots(catalog_pb2.ListSnapshotsRequest(table=spec.ident), timeout=TIMEOUT_S)
        assert [(s.id, s.commit_user, s.commit_identifier) for s in listed.snapshots] == \
            [(s.id, s.commit_user, s.commit_identifier) for s in snapshots], r.name
        assert {s.commit_kind for s in listed.snapshots} <= {common_pb2.COMMIT_KIND_APPEND}

    by_id = {s.id: s for s in snapshots}
    made = [(s.commit_user, s.commit_identifier) for s in snapshots]
    assert len(set(made)) == len(made), f"{spec.table_id}: a commit made two snapshots"
    acked = {(a.user, a.identifier): a.snapshot_id for a in acks}
    assert len(acked) == len(acks)
    assert len(set(acked.values())) == len(acked), f"{spec.table_id}: two commits acknowledged with one snapshot"
    for (user, number), sid in acked.items():
        assert sid in by_id, f"{spec.table_id}: ({user}, {number}) acknowledged snapshot {sid}, which is missing"
        s = by_id[sid]
        assert (s.commit_user, s.commit_identifier, s.commit_kind) == (user, number, "APPEND"), \
            f"{spec.table_id}: snapshot {sid} is {s.commit_user}/{s.commit_identifier}, acknowledged to {user}/{number}"
    unacked = sorted(set(by_id) - set(acked.values()))
    assert not unacked, f"{spec.table_id}: snapshots nobody was acknowledged: {unacked}"

    added = {s.id: _added_files(table, s.delta_manifest_list) for s in snapshots}
    for a in acks:
        assert added[a.snapshot_id] == a.files, f"{spec.table_id}: snapshot {a.snapshot_id} != what {a.user} sent"

    model = sorted(tuple(r[c] for c, _ in spec.columns) for a in acks for r in a.rows)
    got = table.to_arrow()
    assert got.num_rows == len(model), f"{spec.table_id}: {got.num_rows} rows, {len(model)} acknowledged"
    assert sorted(zip(*(got.column(c).to_pylist() for c, _ in spec.columns), strict=True)) == model
    if ids:
        assert by_id[ids[-1]].total_record_count == len(model)

    if spec.pypaimon and not cluster.on_s3:  # pypaimon is given no S3 endpoint by this warehouse URI (issue 33)
        pt = CatalogFactory.create({"warehouse": cluster.warehouse}).get_table(spec.table_id)
        rb = pt.new_read_builder()
        theirs = rb.new_read().to_arrow(rb.new_scan().plan().splits())
        assert sorted(zip(*(theirs.column(c).to_pylist() for c, _ in spec.columns), strict=True)) == model, \
            f"{spec.table_id}: pypaimon reads other rows"
    return {sid: (files, by_id[sid].time_millis) for sid, files in added.items()}


class EventCollector:
    """Consumes both topics from the beginning on its own thread, for the whole test: the events by key.

    Started before the first commit, so that the consumer group join and most of the reading overlap
    with the committers; a bounded poll loop that ends when `close()` sets the stop event.
    """

    def __init__(self, bootstrap: str) -> None:
        self.bootstrap = bootstrap
        self.records = 0
        self.events: dict[tuple[str, int, bytes, int], bytes] = {}  # (table, snapshot, partition, bucket) -> value
        self.problems: list[str] = []  # what must never be on the topics
        self.error: BaseException | None = None
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="event-collector", daemon=True)

    def start(self) -> EventCollector:
        self._thread.start()
        return self

    def keys(self) -> set[tuple[str, int, bytes, int]]:
        with self._lock:
            return set(self.events)

    def close(self) -> bool:
        """Stop polling and close the consumer; whether the thread ended in time."""
        self._stop.set()
        self._thread.join(TIMEOUT_S)
        return not self._thread.is_alive()

    def _run(self) -> None:
        try:
            c = consumer(self.bootstrap, f"replicas-test-{uuid.uuid4().hex[:8]}",
                         [DATA_FILES_TOPIC, COMPACTION_RESULTS_TOPIC])
            try:
                while not self._stop.is_set():
                    for batch in c.poll(timeout_ms=200, max_records=5000).values():
                        for r in batch:
                            self._add(r)
            finally:
                c.close()
        except BaseException as e:
            self.error = e

    def _add(self, r: Any) -> None:
        env = events_pb2.Envelope.FromString(r.value)
        with self._lock:
            self.records += 1
            if r.topic != DATA_FILES_TOPIC or env.WhichOneof("event") != "data_files":
                self.problems.append(f"not a data-files event on {r.topic}: {env}")
                return
            e = env.data_files
            tid = f"{e.table.database}.{e.table.table}"
            if r.key != f"{tid}/{e.partition.hex()}/{e.bucket}".encode():
                self.problems.append(f"key {r.key!r} for {e}")
            key = (tid, e.snapshot_id, e.partition, e.bucket)
            if self.events.setdefault(key, r.value) != r.value:  # duplicates must be the same record
                self.problems.append(f"two different events for {key}")


def _check_events(collector: EventCollector, expected: dict[tuple[str, int], dict[tuple[bytes, int], set[str]]],
                  times: dict[tuple[str, int], int]) -> None:
    """Wait until every (snapshot, partition, bucket) has its event, then check each event against its snapshot."""
    wanted = {(t, sid, p, b) for (t, sid), files in expected.items() for (p, b) in files}
    deadline = time.monotonic() + EVENTS_TIMEOUT_S
    while not wanted <= collector.keys():
        assert collector.error is None, f"the event collector failed: {collector.error!r}"
        missing = sorted({k[:2] for k in wanted - collector.keys()})
        assert time.monotonic() < deadline, f"no events on Kafka for {len(missing)} snapshots: {missing[:20]}"
        time.sleep(0.2)  # polling interval, bounded by the deadline
    assert collector.close(), "the event collector did not stop"
    assert collector.error is None, f"the event collector failed: {collector.error!r}"
    assert not collector.problems, collector.problems[:10]
    extra = sorted(set(collector.events) - wanted)
    assert not extra, f"events for unknown snapshots or unchanged buckets: {extra[:10]}"
    for (tid, sid, partition, bucket), value in collector.events.items():
        e = events_pb2.Envelope.FromString(value).data_files
        assert e.commit_kind == common_pb2.COMMIT_KIND_APPEND and not e.deleted_files, e
        assert e.commit_time_millis == times[(tid, sid)], e
        assert {f.file_name for f in e.new_files} == expected[(tid, sid)][(partition, bucket)], e


def test_two_replicas_eight_committers(cluster: Cluster) -> None:
    try:
        _run(cluster)
    except BaseException:
        cluster.dump_logs()
        raise


def _run(cluster: Cluster) -> None:
    _create_tables(cluster.replicas[0].stub)
    collector = EventCollector(cluster.bootstrap).start()
    try:
        committers, elapsed = _commit_for(cluster, RUN_S / 2 if cluster.on_s3 else RUN_S)
        total = Stats()
        for c in committers:
            for f in dataclasses.fields(Stats):
                setattr(total, f.name, getattr(total, f.name) + getattr(c.stats, f.name))
        print(f"\n{total.commits} commits in {elapsed:.1f} s by {WRITERS} committers on 2 replicas: "
              f"{total.commits / elapsed:.1f} commits/s; {total.resent} acknowledged commits sent again, "
              f"{total.unanswered} first tries unanswered ({total.unanswered_but_applied} of them had been applied)")
        assert total.commits >= WRITERS and total.resent >= 1 and total.unanswered >= 1

        expected: dict[tuple[str, int], dict[tuple[bytes, int], set[str]]] = {}
        times: dict[tuple[str, int], int] = {}
        for spec in TABLES:
            acks = [a for c in committers if c.spec == spec for a in c.acks]
            for sid, (files, time_millis) in _check_table(cluster, spec, acks).items():
                expected[(spec.table_id, sid)] = files
                times[(spec.table_id, sid)] = time_millis
        _check_events(collector, expected, times)
        print(f"{len(expected)} snapshots checked; {collector.records} Kafka records read for "
              f"{sum(len(f) for f in expected.values())} (snapshot, partition, bucket) events")
    finally:
        collector.close()


def _commit_for(cluster: Cluster, seconds: float) -> tuple[list[Committer], float]:
    """Run the committers until the deadline; them and the seconds it took (the last commits end after it)."""
    stop = threading.Event()
    started = time.monotonic()
    committers = [Committer(i, cluster, started + seconds, stop) for i in range(WRITERS)]
    threads = [threading.Thread(target=c.run, name=f"committer-{c.index}", daemon=True) for c in committers]
    for t in threads:
        t.start()
    for t in threads:  # one commit in flight at the deadline, with its retries, bounds the wait
        t.join(max(1.0, started + seconds + 2 * TIMEOUT_S * MAX_ATTEMPTS - time.monotonic()))
    elapsed = time.monotonic() - started
    stop.set()
    assert not any(t.is_alive() for t in threads), "a committer is stuck"
    errors = [(c.user, c.error) for c in committers if c.error is not None]
    if errors:
        raise AssertionError(f"committers failed: {errors}") from errors[0][1]
    return committers, elapsed
