"""The services end to end on an S3 warehouse: the last acknowledged change of a key wins.

catalog_svc (PostgreSQL metastore), two writer_svc replicas (both serving gRPC, replica 0 also ingesting the
table's Kafka topic) and compactor_svc (Spark local[2]) run as separate processes on loopback against a warehouse
in the local S3 server, given only its `s3://` URI and the standard AWS_* environment. A seeded script changes the
same keys through gRPC to either replica and through Kafka, and compacts through the compactor (waited full
compactions, and automatic ones the writes trigger); each step waits for its acknowledgement (the gRPC reply, the
Kafka offsets recorded in a snapshot, the compactor's answer) before the next, so the model is the changes in step
order. After every step the `Client`'s scan (planned by the catalog, read from S3) equals the model; at the end
lsmlake's library and pypaimon read the same rows from the bucket.
"""

from __future__ import annotations

import json
import random
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from lsmlake import Client
from lsmlake.ingest.kafka_offsets import committed_offsets
from lsmlake.kafka.broker import EmbeddedBroker, ensure_topics
from lsmlake.kafka.client import producer
from lsmlake.proto_gen.lsmlake.v1 import compactor_pb2, compactor_pb2_grpc
from tests.support import s3_cluster
from tests.support.s3_server import S3Server

pytestmark = pytest.mark.integration

TABLE = "s3e.t"
TOPIC = f"lake.ingest.{TABLE}"
PARTITIONS = 4
EVENT_PARTITIONS = 4  # of the compactor's event topic (compactor_svc.event_feed's default)
KEYS = 16
TIMEOUT_S = 120.0
SEED = 20261127
# a compaction of each kind after a few writes, so that compacted files and new level-0 files meet in reads
SCRIPT = ("grpc-0", "grpc-1", "kafka", "compact", "grpc-1", "kafka", "grpc-0", "kafka", "compact", "grpc-0",
          "grpc-1", "kafka", "compact")


@pytest.fixture(scope="module")
def broker() -> Iterator[EmbeddedBroker]:
    with EmbeddedBroker() as b:
        yield b


class Script:
    """The model (key -> value) and the steps that change it, each acknowledged before it is applied."""

    def __init__(self, wh: s3_cluster.S3Warehouse, clients: list[Client], bootstrap: str) -> None:
        self.wh = wh
        self.clients = clients
        self.producer = producer(bootstrap)
        self.rng = random.Random(SEED)
        self.model: dict[int, str] = {}
        self.version = 0
        self.kafka_rows = 0
        self.compactions: list[int] = []

    def close(self) -> None:
        self.producer.close(timeout=5)

    def _batch(self) -> list[tuple[int, str, str]]:
        """Changes of random keys (a key may repeat: the later change wins), each with a value of its own."""
        out = []
        for _ in range(self.rng.randint(1, 8)):
            self.version += 1
            out.append((self.rng.randrange(KEYS), self.rng.choice(["+U", "+U", "+U", "-D"]), f"v{self.version}"))
        return out

    def _apply(self, batch: list[tuple[int, str, str]]) -> None:
        for k, kind, v in batch:
            if kind == "-D":
                self.model.pop(k, None)
            else:
                self.model[k] = v

    def step(self, name: str) -> None:
        if name.startswith("grpc-"):
            batch = self._batch()
            rows = [{"k": k, "v": v, "_row_kind": kind} for k, kind, v in batch]
            result = self.clients[int(name[-1])].write(TABLE, rows, commit_now=True)
            assert result.rows == len(rows) and result.snapshot_id > 0
            self._apply(batch)
        elif name == "kafka":
            batch = self._batch()
            self._send(batch)
            self._apply(batch)
        elif name == "compact":
            r = self.clients[0].compact(TABLE, full=True, wait=True, timeout_s=TIMEOUT_S)
            assert r.buckets_elsewhere == 0 and r.complete and not r.timed_out, r
            self.compactions += r.snapshot_ids
        else:
            raise ValueError(name)

    def _send(self, batch: list[tuple[int, str, str]]) -> None:
        """Produce the changes keyed by their key (one partition per key keeps their order) and wait until a
        snapshot records offsets past every one: then they are acknowledged."""
        futures = [self.producer.send(TOPIC, key=str(k).encode(),
                                      value=json.dumps({"k": k, "v": v, "_row_kind": kind}).encode())
                   for k, kind, v in batch]
        self.producer.flush(timeout=30)
        ends: dict[int, int] = {}
        for f in futures:
            md = f.get(timeout=30)
            ends[md.partition] = max(ends.get(md.partition, 0), md.offset + 1)
        catalog = self.wh.catalog()
        deadline = time.monotonic() + TIMEOUT_S
        while True:
            got = committed_offsets(catalog, TABLE, TOPIC, list(ends))
            if all(got.get(p, 0) >= end for p, end in ends.items()):
                break
            assert time.monotonic() < deadline, f"Kafka rows not committed within {TIMEOUT_S:.0f} s: {got} < {ends}"
            time.sleep(0.1)
        self.kafka_rows += len(batch)

    def scan(self) -> dict[int, str]:
        t = self.clients[0].scan(TABLE)
        keys = t["k"].to_pylist()
        assert len(keys) == len(set(keys)), f"a key read twice: {sorted(keys)}"
        return dict(zip(keys, t["v"].to_pylist(), strict=True))


def _wait_owned(compactor: s3_cluster.procs.Service) -> None:
    """Until the compactor owns every partition of its event topic: a trigger before that finds buckets elsewhere."""
    stub = compactor_pb2_grpc.CompactorServiceStub(compactor.channel)
    request = compactor_pb2.CompactionStatusRequest()
    deadline = time.monotonic() + TIMEOUT_S
    while len(stub.CompactionStatus(request, timeout=30).owned_partitions) < EVENT_PARTITIONS:
        assert time.monotonic() < deadline, f"the compactor owns no partition: {compactor.tail()}"
        time.sleep(0.2)


def test_last_acknowledged_change_wins_through_the_services_on_s3(
        s3_server: S3Server, pg_url: str, broker: EmbeddedBroker, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    # the Client reads the files at the location the catalog reports, with the settings of its environment
    for k, v in s3_server.env().items():
        monkeypatch.setenv(k, v)
    wh = s3_cluster.S3Warehouse.fresh(s3_server)
    cat = s3_cluster.catalog(wh, tmp_path, pg_url, broker.bootstrap)
    services = [cat]
    clients: list[Client] = []
    script: Script | None = None
    try:
        with Client(f"127.0.0.1:{cat.port}") as admin:
            admin.create_database("s3e", ignore_if_exists=True)
            admin.create_table(TABLE, "k BIGINT NOT NULL, v STRING", primary_keys=["k"],
                               options={"bucket": "2", "num-sorted-run.compaction-trigger": "3"})
            assert admin.table(TABLE).location == f"{wh.uri}/s3e.db/t", "the catalog reports the S3 location"
        ensure_topics(broker.bootstrap, [TOPIC, f"lake.deadletter.{TABLE}"], PARTITIONS, timeout_s=30)
        replicas = [s3_cluster.writer(wh, tmp_path, cat.port, "--writer-id", "replica-0", "--kafka",
                                      broker.bootstrap, "--ingest", f"{TABLE}:json", "--commit-interval", "0.2"),
                    s3_cluster.writer(wh, tmp_path, cat.port, "--writer-id", "replica-1", "--commit-interval", "0.2")]
        services += replicas
        compactor = s3_cluster.compactor(wh, tmp_path, cat.port, broker.bootstrap, "--reconcile-interval", "5")
        services.append(compactor)
        _wait_owned(compactor)
        clients = [Client(f"127.0.0.1:{cat.port}", writer=f"127.0.0.1:{r.port}",
                          compactor=f"127.0.0.1:{compactor.port}", timeout_s=TIMEOUT_S) for r in replicas]
        script = Script(wh, clients, broker.bootstrap)
        for i, name in enumerate(SCRIPT):
            script.step(name)
            assert script.scan() == script.model, f"after step {i} ({name}) of {SCRIPT}"
        # what the services wrote is on S3 and nowhere else: the library reads the same rows from the bucket
        table = wh.table(TABLE)
        lib = table.to_arrow()
        assert dict(zip(lib["k"].to_pylist(), lib["v"].to_pylist(), strict=True)) == script.model
        theirs = wh.pypaimon_read(TABLE)
        assert dict(zip(theirs["k"].to_pylist(), theirs["v"].to_pylist(), strict=True)) == script.model
        kinds = [s.commit_kind for s in table.snapshots.snapshots()]
        users = {s.commit_user for s in table.snapshots.snapshots() if s.commit_kind == "APPEND"}
        print(f"\n{len(script.model)} keys; {script.version} changes ({script.kafka_rows} through Kafka); "
              f"{len(kinds)} snapshots: {kinds.count('APPEND')} APPEND, {kinds.count('COMPACT')} COMPACT")
        assert kinds.count("COMPACT") >= len([s for s in SCRIPT if s == "compact"]), kinds
        for replica in ("replica-0", "replica-1"):  # a writer's commit users start with its id
            assert any(u.startswith(f"{replica}-") for u in users), users
        assert script.kafka_rows > 0
        for s in (*replicas, compactor):
            assert s.stop() == 0, s.tail()
    finally:
        if script is not None:
            script.close()
        for c in clients:
            c.close()
        for s in reversed(services):
            s.stop()
