"""Acceptance of the writer service as real processes: catalog_svc + writer_svc + the embedded Kafka broker.

- gRPC: 1,000,000 rows in 100 requests from 8 threads; the table equals the model; pypaimon reads the same;
- Kafka: 200,000 JSON and Debezium messages (updates, deletes, retractions, malformed ones, fields the
  tables do not have); the writer is killed with SIGKILL three times at random moments; after it settles
  the tables equal the model exactly (a `sum` aggregation table counts every message, so a lost or
  duplicated message shows), and the malformed messages sit in the dead-letter topics.
No compactor runs here (that is the compactor service), so the tables raise `num-sorted-run.stop-trigger`.
"""

from __future__ import annotations

import base64
import json
import random
import threading
import time
import uuid
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import tests.support.writer_procs as procs
from lsmlake.catalog.filesystem import FileSystemCatalog
from lsmlake.ingest.kafka_offsets import committed_offsets
from lsmlake.kafka.broker import EmbeddedBroker
from lsmlake.kafka.client import consumer, producer
from lsmlake.proto_gen.lsmlake.v1 import catalog_pb2, catalog_pb2_grpc, common_pb2, writer_pb2_grpc
from tests.integration.interop.test_interop_pypaimon import pypaimon_read
from tests.writer_svc.test_writer_local import write_requests

pytestmark = pytest.mark.integration

TIMEOUT_S = 120.0
NO_STALL = {"num-sorted-run.stop-trigger": "100000"}


@pytest.fixture(scope="module")
def broker() -> Iterator[EmbeddedBroker]:
    with EmbeddedBroker() as b:
        yield b


def _create(stub: Any, name: str, columns: list[tuple[str, str]], options: dict[str, str]) -> Any:
    stub.CreateDatabase(catalog_pb2.CreateDatabaseRequest(name="db", ignore_if_exists=True), timeout=30)
    ident = common_pb2.TableIdentifier(database="db", table=name)
    stub.CreateTable(catalog_pb2.CreateTableRequest(
        table=ident, columns=[catalog_pb2.Column(name=n, type=t) for n, t in columns], primary_keys=["id"],
        options={"bucket": "4", **NO_STALL, **options}), timeout=30)
    return ident


def test_grpc_million_rows_from_eight_threads(tmp_path: Path) -> None:
    warehouse = tmp_path / "wh"
    cat = procs.catalog(warehouse, None)
    writer = procs.writer(warehouse, cat.port, "--commit-interval", "0.5")
    try:
        ident = _create(catalog_pb2_grpc.CatalogServiceStub(cat.channel), "big",
                        [("id", "BIGINT NOT NULL"), ("v", "STRING"), ("n", "INT")], {})
        stub = writer_pb2_grpc.WriterServiceStub(writer.channel)
        model: dict[int, tuple[str, int]] = {}
        lock = threading.Lock()
        errors: list[BaseException] = []
        requests_per_thread = [13] * 4 + [12] * 4  # 100 requests

        def client(t: int) -> None:
            rng = random.Random(t)
            mine: dict[int, tuple[str, int]] = {}
            try:
                for r in range(requests_per_thread[t]):
                    # keys of this thread only, with repeats across its requests (updates in a known order)
                    ids = rng.sample(range(t * 150_000, (t + 1) * 150_000), 10_000)
                    v = [f"t{t}r{r}k{i}" for i in ids]
                    n = [rng.randrange(1 << 30) for _ in ids]
                    reply = stub.Write(write_requests(ident, pa.table({"id": pa.array(ids, pa.int64()), "v": v,
                                                                       "n": pa.array(n, pa.int32())})),
                                       timeout=TIMEOUT_S)
                    assert reply.rows_written == 10_000 and reply.snapshot_id > 0
                    mine.update(zip(ids, zip(v, n, strict=True), strict=True))
            except BaseException as e:
                errors.append(e)
            with lock:
                model.update(mine)

        threads = [threading.Thread(target=client, args=(t,)) for t in range(8)]
        started = time.monotonic()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        elapsed = time.monotonic() - started
        assert not errors, errors
        print(f"\n1,000,000 rows over gRPC in {elapsed:.1f} s ({1_000_000 / elapsed:,.0f} rows/s)")
        table = FileSystemCatalog(str(warehouse)).get_table("db.big")
        expected = sorted((k, v, n) for k, (v, n) in model.items())
        got = table.to_arrow().sort_by("id")
        assert list(zip(*(got.column(c).to_pylist() for c in ("id", "v", "n")), strict=True)) == expected
        theirs = pypaimon_read(str(warehouse), "db.big").sort_by("id")
        assert theirs.select(["id", "v", "n"]).equals(got.select(["id", "v", "n"]))
        snaps = len(table.snapshots.ids())
        assert snaps < 100, f"{snaps} snapshots for 100 requests: group commit did not group"
        assert writer.stop() == 0, writer.tail()
    finally:
        writer.stop()
        cat.stop()


# -- Kafka -------------------------------------------------------------------------------------------

N_JSON = 100_000
N_CDC = 100_000
BAD_EVERY = 997  # one malformed message in about a thousand


def _json_messages(rng: random.Random) -> tuple[list[tuple[bytes, bytes]], dict[int, int], int]:
    """(key, value) messages for the `sum` table, the model (id -> sum of cnt), and how many are malformed."""
    out, model, bad = [], defaultdict(int), 0
    for i in range(N_JSON):
        k = rng.randrange(5_000)
        key = str(k).encode()
        if i % BAD_EVERY == 0:
            out.append((key, rng.choice([b"{not json", b"[1, 2]", b'{"id": "x", "cnt": 1}', b'{"cnt": 3}',
                                         b'{"id": 1, "cnt": 1, "colour": "red"}'])))
            bad += 1
            continue
        if model.get(k, 0) > 0 and rng.random() < 0.2:  # a retraction (-U) subtracts from the sum
            out.append((key, json.dumps({"id": k, "cnt": 1, "_row_kind": "-U"}).encode()))
            model[k] -= 1
        else:
            out.append((key, json.dumps({"id": k, "cnt": 1, "last": f"m{i}"}).encode()))
            model[k] += 1
    return out, dict(model), bad


_CDC_SCHEMA = {"type": "struct", "fields": [
    {"type": "struct", "field": "before", "optional": True, "fields": [
        {"type": "int64", "field": "id"}, {"type": "string", "field": "name", "optional": True},
        {"type": "double", "field": "amount", "optional": True}]},
    {"type": "struct", "field": "after", "optional": True, "fields": [
        {"type": "int64", "field": "id"}, {"type": "string", "field": "name", "optional": True},
        {"type": "double", "field": "amount", "optional": True}]},
    {"type": "string", "field": "op"}]}


def _cdc_messages(rng: random.Random) -> tuple[list[tuple[bytes, bytes | None]], dict[int, tuple[str, float]], int]:
    out: list[tuple[bytes, bytes | None]] = []
    model: dict[int, tuple[str, float]] = {}
    bad = 0
    for i in range(N_CDC):
        k = rng.randrange(8_000)
        key = str(k).encode()
        if i % BAD_EVERY == 0:
            out.append((key, rng.choice([b"\xff\xfe garbage", b'{"op": "z", "after": {"id": 1}}',
                                         b'{"op": "c", "after": {"name": "no key"}}',
                                         b'{"op": "c", "after": {"id": 1, "name": "x", "colour": "red"}}'])))
            bad += 1
            continue
        old = model.get(k)
        row = {"id": k, "name": f"n{i}", "amount": round(rng.random() * 1000, 3)}
        if old is None:
            env = {"op": rng.choice(["c", "r"]), "before": None, "after": row}
            model[k] = (row["name"], row["amount"])
        elif rng.random() < 0.25:
            env = {"op": "d", "before": {"id": k, "name": old[0], "amount": old[1]}, "after": None}
            del model[k]
        else:
            env = {"op": "u", "before": {"id": k, "name": old[0], "amount": old[1]}, "after": row}
            model[k] = (row["name"], row["amount"])
        value = {"schema": _CDC_SCHEMA, "payload": env} if rng.random() < 0.5 else env
        out.append((key, json.dumps(value).encode()))
        if env["op"] == "d":
            out.append((key, None))  # the tombstone Debezium sends after a delete
    return out, model, bad


def produce(bootstrap: str, topic: str, messages: list[tuple[bytes, bytes | None]]) -> dict[int, int]:
    """Send all, wait for every acknowledgement; the next offset of each partition (from the acks)."""
    p = producer(bootstrap, linger_ms=20, batch_size=256 << 10)
    ends: dict[int, int] = {}
    try:
        futures = [p.send(topic, key=k, value=v) for k, v in messages]
        p.flush(timeout=120)
        for f in futures:
            md = f.get(timeout=60)
            ends[md.partition] = max(ends.get(md.partition, 0), md.offset + 1)
    finally:
        p.close(timeout=10)
    return ends


def _settled(warehouse: Path, table_id: str, topic: str, ends: dict[int, int]) -> bool:
    got = committed_offsets(FileSystemCatalog(str(warehouse)), table_id, topic, list(ends))
    return all(got.get(p) == o for p, o in ends.items())


def _dead_letters(bootstrap: str, topic: str, expected: int) -> dict[tuple[int, int], str]:
    """The reason of each dead letter by the (partition, offset) of its original, read until `expected`
    distinct are seen."""
    c = consumer(bootstrap, f"dlq-{uuid.uuid4().hex[:8]}", [topic])
    seen: dict[tuple[int, int], str] = {}
    try:
        deadline = time.monotonic() + 60
        while len(seen) < expected and time.monotonic() < deadline:
            for records in c.poll(timeout_ms=300).values():
                for r in records:
                    d = json.loads(r.value)
                    assert d["reason"] and d["topic"] == topic.replace("deadletter", "ingest")
                    seen[(d["partition"], d["offset"])] = d["reason"]
        end = time.monotonic() + 2  # a moment more: nothing unexpected follows
        while time.monotonic() < end:
            for records in c.poll(timeout_ms=300).values():
                for r in records:
                    d = json.loads(r.value)
                    seen[(d["partition"], d["offset"])] = d["reason"]
    finally:
        c.close()
    return seen


def test_kafka_exactly_once_through_three_kills(broker: EmbeddedBroker, tmp_path: Path) -> None:
    rng = random.Random(20261122)
    warehouse = tmp_path / "wh"
    cat = procs.catalog(warehouse, broker.bootstrap)
    writer = None
    try:
        stub = catalog_pb2_grpc.CatalogServiceStub(cat.channel)
        _create(stub, "counts", [("id", "BIGINT NOT NULL"), ("cnt", "BIGINT"), ("last", "STRING")],
                {"merge-engine": "aggregation", "fields.cnt.aggregate-function": "sum",
                 "fields.last.aggregate-function": "last_non_null_value"})
        _create(stub, "cdc", [("id", "BIGINT NOT NULL"), ("name", "STRING"), ("amount", "DOUBLE")], {})
        json_msgs, json_model, json_bad = _json_messages(rng)
        cdc_msgs, cdc_model, cdc_bad = _cdc_messages(rng)
        # short commits and small polls: a kill always finds something in flight
        args = ["--kafka", broker.bootstrap, "--ingest", "db.counts:json", "--ingest", "db.cdc:debezium",
                "--commit-interval", "0.3", "--max-poll-records", "2000"]
        from lsmlake.kafka.broker import ensure_topics

        topics = ["lake.ingest.db.counts", "lake.ingest.db.cdc"]
        ensure_topics(broker.bootstrap, topics, 4, timeout_s=30)
        json_ends = produce(broker.bootstrap, topics[0], json_msgs)
        cdc_ends = produce(broker.bootstrap, topics[1], cdc_msgs)

        def progress() -> int:
            c = FileSystemCatalog(str(warehouse))
            return sum(committed_offsets(c, "db.counts", topics[0], list(json_ends)).values()) + \
                sum(committed_offsets(c, "db.cdc", topics[1], list(cdc_ends)).values())

        total = sum(json_ends.values()) + sum(cdc_ends.values())
        writer = procs.writer(warehouse, cat.port, *args)
        for kill in range(3):
            # a random moment after this incarnation committed something, before it has consumed everything
            before, deadline = progress(), time.monotonic() + 120
            while progress() == before:
                assert time.monotonic() < deadline, f"no progress: {writer.tail()}"
                time.sleep(0.2)
            time.sleep(rng.uniform(0.0, 1.0))
            writer.kill()
            done = progress()
            print(f"\nkill {kill + 1}: {done:,} of {total:,} messages committed")
            assert done < total, "consumption ended before the kill: the test would prove nothing"
            writer = procs.writer(warehouse, cat.port, *args)
        deadline = time.monotonic() + 240
        while not (_settled(warehouse, "db.counts", topics[0], json_ends)
                   and _settled(warehouse, "db.cdc", topics[1], cdc_ends)):
            assert time.monotonic() < deadline, f"the writer did not catch up: {writer.tail()}"
            time.sleep(0.5)  # polling interval, bounded by the deadline
        assert writer.stop() == 0, writer.tail()

        catalog = FileSystemCatalog(str(warehouse))
        counts = {r["id"]: r["cnt"] for r in catalog.get_table("db.counts").to_arrow().to_pylist()}
        assert counts == {k: v for k, v in json_model.items()}, "a message was lost or applied twice"
        cdc = {r["id"]: (r["name"], r["amount"]) for r in catalog.get_table("db.cdc").to_arrow().to_pylist()}
        assert cdc == cdc_model
        theirs = pypaimon_read(str(warehouse), "db.cdc").to_pylist()
        assert {r["id"]: (r["name"], r["amount"]) for r in theirs} == cdc_model

        json_dead = _dead_letters(broker.bootstrap, "lake.deadletter.db.counts", json_bad)
        assert len(json_dead) == json_bad
        cdc_dead = _dead_letters(broker.bootstrap, "lake.deadletter.db.cdc", cdc_bad)
        assert len(cdc_dead) == cdc_bad
        # a field the table does not have is a dead letter naming it, not a row with the field dropped
        assert any(r.startswith('field "colour" is not a column of') for r in json_dead.values())
        assert any(r.startswith('"after": field "colour" is not a column of') for r in cdc_dead.values())
    finally:
        if writer is not None:
            writer.stop()
        cat.stop()


_ = base64  # Debezium's decimal encoding is covered by tests/lsmlake/ingest/test_decode.py
