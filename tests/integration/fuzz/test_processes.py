"""Bad input against the services as real processes: Kafka garbage through a writer, and a burst of
undecodable and hostile requests at catalog, writer and compactor, after which every process is alive,
SERVING and still does its job."""

from __future__ import annotations

import base64
import json
import random
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

import tests.support.writer_procs as procs
from lsmlake.catalog.filesystem import FileSystemCatalog
from lsmlake.ingest.kafka_offsets import committed_offsets
from lsmlake.kafka.broker import EmbeddedBroker, ensure_topics
from lsmlake.kafka.client import consumer, producer
from lsmlake.proto_gen.lsmlake.v1 import (
    catalog_pb2,
    catalog_pb2_grpc,
    common_pb2,
    compactor_pb2,
    compactor_pb2_grpc,
    writer_pb2,
    writer_pb2_grpc,
)
from tests.support.fuzz.lake import check_refusal

pytestmark = pytest.mark.integration

TIMEOUT_S = 120.0
TOPIC, DEAD_LETTERS = "lake.ingest.db.events", "lake.deadletter.db.events"
IDENT = common_pb2.TableIdentifier(database="db", table="events")
GARBAGE = [
    b"\xff\xfe not utf-8", b"\xc3\x28", b"{not json", b'{"id": 1,}', b"", b"[]", b"42", b'"text"', b"null",
    b'{"id": "abc"}', b'{"id": 1.5}', b'{"id": 9223372036854775808}', b'{"name": "no key"}', b'{"id": null}',
    b'{"id": 7, "qty": 2147483648}', b'{"id": 7, "qty": "many"}', b'{"id": 7, "name": 5}',
    b'{"id": 7, "_row_kind": "+X"}', b'{"id": 1}{"id": 2}',
    b'{"id": 7, "name": ' + b"[" * 50_000 + b"]" * 50_000 + b"}",
    b"\x00" * 64, b'{"op": "c", "after": {"id": 1}}',  # a Debezium event is a plain row without "id": not here
]


@pytest.fixture(scope="module")
def broker() -> Iterator[EmbeddedBroker]:
    with EmbeddedBroker() as b:
        yield b


@pytest.fixture(scope="module")
def services(broker: EmbeddedBroker, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """Catalog, a writer ingesting `lake.ingest.db.events`, and a compactor (Spark local[1]), as processes."""
    warehouse = Path(tmp_path_factory.mktemp("procs")) / "wh"
    started: list[procs.Service] = []
    try:
        cat = procs.catalog(warehouse, broker.bootstrap)
        started.append(cat)
        stub = catalog_pb2_grpc.CatalogServiceStub(cat.channel)
        stub.CreateDatabase(catalog_pb2.CreateDatabaseRequest(name="db"), timeout=30)
        stub.CreateTable(catalog_pb2.CreateTableRequest(
            table=IDENT, columns=[catalog_pb2.Column(name="id", type="BIGINT NOT NULL"),
                                  catalog_pb2.Column(name="name", type="STRING"),
                                  catalog_pb2.Column(name="qty", type="INT")],
            primary_keys=["id"], options={"bucket": "2"}), timeout=30)
        ensure_topics(broker.bootstrap, [TOPIC, DEAD_LETTERS], 4, timeout_s=30)
        writer = procs.writer(warehouse, cat.port, "--kafka", broker.bootstrap, "--ingest", "db.events:json",
                              "--commit-interval", "0.3")
        started.append(writer)
        with pytest.MonkeyPatch.context() as mp:  # a JVM starts slowly on a loaded machine
            mp.setattr(procs, "START_TIMEOUT_S", 300.0)
            compactor = procs.Service("compactor_svc", [
                "--warehouse", str(warehouse), "--catalog", f"127.0.0.1:{cat.port}", "--kafka", broker.bootstrap,
                "--spark-master", "local[1]"], warehouse.parent)
        started.append(compactor)
        yield {"warehouse": warehouse, "catalog": cat, "writer": writer, "compactor": compactor}
    finally:
        for s in reversed(started):
            s.stop()


def _produce(bootstrap: str, messages: list[tuple[bytes, bytes | None]]) -> list[tuple[int, int]]:
    """Send in order and wait for every acknowledgement; (partition, offset) of each message."""
    p = producer(bootstrap, linger_ms=5)
    try:
        futures = [p.send(TOPIC, key=k, value=v) for k, v in messages]
        p.flush(timeout=60)
        return [(md.partition, md.offset) for md in (f.get(timeout=60) for f in futures)]
    finally:
        p.close(timeout=10)


def _dead_letters(bootstrap: str, expected: int) -> dict[tuple[int, int], dict[str, Any]]:
    """The dead letters by the (partition, offset) of their original, read until `expected` and a while after."""
    c = consumer(bootstrap, f"dlq-{uuid.uuid4().hex[:8]}", [DEAD_LETTERS])
    seen: dict[tuple[int, int], dict[str, Any]] = {}
    try:
        deadline = time.monotonic() + TIMEOUT_S
        quiet_until = None
        while time.monotonic() < deadline and (quiet_until is None or time.monotonic() < quiet_until):
            for records in c.poll(timeout_ms=300).values():
                for r in records:
                    d = json.loads(r.value)
                    seen[(d["partition"], d["offset"])] = d
            if len(seen) >= expected and quiet_until is None:
                quiet_until = time.monotonic() + 3  # a moment more: nothing unexpected follows
    finally:
        c.close()
    return seen


def _serving(s: procs.Service) -> None:
    assert s.proc.poll() is None, f"{s.log.name} exited: {s.tail()}"
    status = health_pb2_grpc.HealthStub(s.channel).Check(health_pb2.HealthCheckRequest(), timeout=30).status
    assert status == health_pb2.HealthCheckResponse.SERVING, s.tail()


def test_kafka_garbage_is_dead_lettered_and_the_valid_rows_applied(broker: EmbeddedBroker,
                                                                    services: dict[str, Any]) -> None:
    rng = random.Random(20261122)
    messages: list[tuple[bytes, bytes | None]] = []
    valid: dict[int, dict[str, Any]] = {}
    kinds: list[str] = []
    for i in range(400):
        roll = rng.random()
        if roll < 0.2:
            junk = rng.choice(GARBAGE) if rng.random() < 0.8 else b"\xff" + rng.randbytes(rng.randrange(0, 40))
            messages.append((b"k%d" % i, junk))
            kinds.append("garbage")
        elif roll < 0.23:
            messages.append((b"k%d" % i, None))  # a tombstone: skipped, neither a row nor a dead letter
            kinds.append("tombstone")
        else:
            row = {"id": i, "name": rng.choice(["a", "é" * 1000, "", "x" * 100_000]),
                   "qty": rng.randrange(-(2**31), 2**31)}
            valid[i] = row
            messages.append((str(i).encode(), json.dumps(row, ensure_ascii=False).encode()))
            kinds.append("valid")
    where = _produce(broker.bootstrap, messages)
    ends: dict[int, int] = {}
    for p, o in where:
        ends[p] = max(ends.get(p, 0), o + 1)
    catalog = FileSystemCatalog(str(services["warehouse"]))
    deadline = time.monotonic() + TIMEOUT_S
    while committed_offsets(catalog, "db.events", TOPIC, list(ends)) != ends:
        assert time.monotonic() < deadline, f"the writer did not consume everything: {services['writer'].tail()}"
        time.sleep(0.3)  # polling interval, bounded by the deadline

    rows = {r["id"]: r for r in catalog.get_table("db.events").to_arrow().to_pylist()}
    assert rows == valid, "the table must hold exactly the valid messages"
    garbage_at = {w for w, k in zip(where, kinds, strict=True) if k == "garbage"}
    letters = _dead_letters(broker.bootstrap, len(garbage_at))
    assert set(letters) == garbage_at, "the dead-letter topic must hold exactly the garbage"
    for (p, o), d in letters.items():
        assert d["reason"].strip() and d["topic"] == TOPIC
        original = messages[where.index((p, o))][1]
        got = d["original"].encode() if d["encoding"] == "utf-8" else base64.b64decode(d["original"])
        assert got == original, "a dead letter must carry its message byte for byte"
    _serving(services["writer"])


def _garbage_burst(s: procs.Service, service: Any, rng: random.Random) -> int:
    """Every method of the service, 20 undecodable or random payloads each; the number of refusals."""
    refused = 0
    for m in service.methods:
        path = f"/{service.full_name}/{m.name}"
        for _ in range(20):
            payload = rng.choice([b"\x0f" + rng.randbytes(8), rng.randbytes(rng.randrange(0, 200)), b"\xff" * 100])
            try:
                if m.client_streaming:
                    s.channel.stream_unary(path)(iter([payload] * 3), timeout=30)
                elif m.server_streaming:
                    list(s.channel.unary_stream(path)(payload, timeout=3))
                else:
                    s.channel.unary_unary(path)(payload, timeout=30)
            except grpc.RpcError as e:
                if not (m.server_streaming and e.code() == grpc.StatusCode.DEADLINE_EXCEEDED):
                    check_refusal(path, e)
                refused += 1
    return refused


def test_processes_survive_a_burst_of_garbage(services: dict[str, Any]) -> None:
    rng = random.Random(7)
    bursts = [(services["catalog"], catalog_pb2.DESCRIPTOR.services_by_name["CatalogService"]),
              (services["writer"], writer_pb2.DESCRIPTOR.services_by_name["WriterService"]),
              (services["compactor"], compactor_pb2.DESCRIPTOR.services_by_name["CompactorService"])]
    for s, service in bursts:
        assert _garbage_burst(s, service, rng) > 0
    for s, _ in bursts:
        _serving(s)
    # and they still work
    reply = writer_pb2_grpc.WriterServiceStub(services["writer"].channel).WriteRows(writer_pb2.WriteRowsRequest(
        table=IDENT, rows_json=['{"id": -1, "name": "after the burst"}'], options={"commit": "now"}),
        timeout=TIMEOUT_S)
    assert reply.rows_written == 1
    table = catalog_pb2_grpc.CatalogServiceStub(services["catalog"].channel).GetTable(
        catalog_pb2.GetTableRequest(table=IDENT), timeout=30).table
    assert table.latest_snapshot_id == reply.snapshot_id or table.latest_snapshot_id > reply.snapshot_id
    status = compactor_pb2_grpc.CompactorServiceStub(services["compactor"].channel).CompactionStatus(
        compactor_pb2.CompactionStatusRequest(), timeout=30)
    assert status.compactor_id
