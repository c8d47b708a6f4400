"""A dynamic-bucket table (`bucket = -1`) fed by every ingestion path at once, as real processes: two writer
replicas consuming the table's Kafka topic in one group and taking gRPC writes, pypaimon writing directly; one
replica killed with SIGKILL while it consumes, a compaction between the two phases.

The table sums a counter per key (`aggregation`, `sum`), so the order in which the paths reach a key does not
matter and a lost or twice-applied message or request shows in the sum. Keys are shared by all the paths, and
new keys arrive through Kafka and gRPC at the same moment, so both replicas ask the catalog for the same new
keys' buckets. At the end every key is in exactly one bucket, the one its partition's HASH index names, and
lsmlake and pypaimon read the model's sums.
"""

from __future__ import annotations

import json
import random
import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import grpc
import pyarrow as pa
import pytest

import tests.support.writer_procs as procs
from lsmlake.catalog.filesystem import FileSystemCatalog
from lsmlake.ingest.kafka_offsets import committed_offsets
from lsmlake.kafka.broker import EmbeddedBroker, ensure_topics
from lsmlake.proto_gen.lsmlake.v1 import catalog_pb2, catalog_pb2_grpc, common_pb2, writer_pb2_grpc
from lsmlake.table.compact import compact_table
from tests.support.dynamic_index import check_index
from tests.support.pypaimon_io import read as pypaimon_read
from tests.support.pypaimon_io import write as pypaimon_write
from tests.writer_svc.test_writer_local import write_requests
from tests.writer_svc.test_writer_process import produce

pypaimon = pytest.importorskip("pypaimon", reason="pypaimon (the test extra) is not installed")
pytestmark = pytest.mark.integration

TOPIC = "lake.ingest.db.dyn"
IDENT = common_pb2.TableIdentifier(database="db", table="dyn")
SCHEMA = pa.schema([pa.field("pt", pa.string(), nullable=False), pa.field("id", pa.int64(), nullable=False),
                    pa.field("cnt", pa.int64())])
KEYS_PER_PHASE = 400  # each phase brings new keys besides the old ones
MESSAGES = 6_000  # per phase
GRPC_REQUESTS = 12  # per phase, per replica
SETTLE_S = 240.0


@pytest.fixture(scope="module")
def broker() -> Iterator[EmbeddedBroker]:
    with EmbeddedBroker() as b:
        yield b


def _key(rng: random.Random, phase: int) -> tuple[str, int]:
    k = rng.randrange((phase + 1) * KEYS_PER_PHASE)
    return f"p{k % 3}", k


def _produce(bootstrap: str, rows: list[tuple[str, int]]) -> dict[int, int]:
    """Each row as a JSON message adding 1 to its key, keyed by the key; the next offset of each partition."""
    return produce(bootstrap, TOPIC, [(f"{pt}/{k}".encode(), json.dumps({"pt": pt, "id": k, "cnt": 1}).encode())
                                      for pt, k in rows])


def _settled(warehouse: Path, ends: dict[int, int]) -> bool:
    got = committed_offsets(FileSystemCatalog(str(warehouse)), "db.dyn", TOPIC, list(ends))
    return all(got.get(p, 0) >= o for p, o in ends.items())


def _grpc(replicas: list[procs.Service], first: int, rng: random.Random, phase: int,
          model: Counter[tuple[str, int]], lock: threading.Lock, errors: list[BaseException]) -> None:
    """Requests with ids to replica `first`; one whose outcome is unknown (its replica was killed) is resent
    with the same id to whichever replica answers: it is counted once, when acknowledged."""
    try:
        for _ in range(GRPC_REQUESTS):
            rows = [_key(rng, phase) for _ in range(150)]
            data = pa.Table.from_pylist([{"pt": pt, "id": k, "cnt": 2} for pt, k in rows], schema=SCHEMA)
            request_id = uuid.uuid4().hex
            for attempt in range(20):
                w = replicas[(first + attempt) % len(replicas)]
                try:
                    writer_pb2_grpc.WriterServiceStub(w.channel).Write(
                        write_requests(IDENT, data, request_id=request_id), timeout=120)
                    break
                except (grpc.RpcError, ValueError) as e:  # ValueError: the killed replica's channel is closed
                    if isinstance(e, grpc.RpcError) and e.code() not in RESEND:
                        raise
                    time.sleep(0.5)
            else:
                raise AssertionError(f"request {request_id} was never acknowledged")
            with lock:
                for r in rows:
                    model[r] += 2
    except BaseException as e:
        errors.append(e)


RESEND = {grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.CANCELLED, grpc.StatusCode.DEADLINE_EXCEEDED,
          grpc.StatusCode.ABORTED, grpc.StatusCode.UNKNOWN, grpc.StatusCode.INTERNAL}


def test_kafka_grpc_and_pypaimon_on_one_dynamic_bucket_table(broker: EmbeddedBroker, tmp_path: Path) -> None:
    rng = random.Random(20261125)
    warehouse = tmp_path / "wh"
    cat = procs.catalog(warehouse, broker.bootstrap)
    services: list[procs.Service] = [cat]
    try:
        stub = catalog_pb2_grpc.CatalogServiceStub(cat.channel)
        stub.CreateDatabase(catalog_pb2.CreateDatabaseRequest(name="db"), timeout=30)
        stub.CreateTable(catalog_pb2.CreateTableRequest(
            table=IDENT, columns=[catalog_pb2.Column(name="pt", type="STRING NOT NULL"),
                                  catalog_pb2.Column(name="id", type="BIGINT NOT NULL"),
                                  catalog_pb2.Column(name="cnt", type="BIGINT")],
            partition_keys=["pt"], primary_keys=["pt", "id"],
            options={"bucket": "-1", "dynamic-bucket.target-row-num": "60", "merge-engine": "aggregation",
                     "fields.cnt.aggregate-function": "sum", "deletion-vectors.enabled": "true",
                     "num-sorted-run.stop-trigger": "100000"}), timeout=30)
        ensure_topics(broker.bootstrap, [TOPIC], 4, timeout_s=30)
        args = ["--kafka", broker.bootstrap, "--ingest", "db.dyn:json", "--commit-interval", "0.3",
                "--max-poll-records", "500"]
        replicas = [procs.writer(warehouse, cat.port, *args), procs.writer(warehouse, cat.port, *args)]
        services += replicas
        model: Counter[tuple[str, int]] = Counter()
        lock = threading.Lock()
        errors: list[BaseException] = []
        py = pypaimon.CatalogFactory.create({"warehouse": str(warehouse)})
        for phase in range(2):
            kafka_rows = [_key(rng, phase) for _ in range(MESSAGES)]
            model.update(kafka_rows)  # each message counts 1, once
            clients = [threading.Thread(target=_grpc, args=(replicas, i, random.Random(phase * 10 + i), phase, model,
                                                            lock, errors)) for i in range(2)]
            for t in clients:
                t.start()
            ends = _produce(broker.bootstrap, kafka_rows)
            if phase == 0:  # kill a replica while it consumes: its uncommitted messages are consumed again
                deadline = time.monotonic() + 120
                while not committed_offsets(FileSystemCatalog(str(warehouse)), "db.dyn", TOPIC, list(ends)):
                    assert time.monotonic() < deadline, replicas[0].tail()
                    time.sleep(0.2)
                killed = replicas[0]
                killed.kill()
                assert not _settled(warehouse, ends), "consumption ended before the kill: the test would prove nothing"
                services.remove(killed)
                replicas[0] = procs.writer(warehouse, cat.port, *args)
                services.append(replicas[0])
            for t in clients:
                t.join(300)
            assert not errors, f"{errors[0]!r}\n{replicas[0].tail()}\n{replicas[1].tail()}"
            deadline = time.monotonic() + SETTLE_S
            while not _settled(warehouse, ends):
                assert time.monotonic() < deadline, f"Kafka not consumed: {replicas[0].tail()}\n{replicas[1].tail()}"
                time.sleep(0.5)
            # pypaimon adds to keys already in the index (new keys are assigned by the catalog's writers)
            known = sorted(model)[::7]
            pypaimon_write(py.get_table("db.dyn"), pa.Table.from_pylist(
                [{"pt": pt, "id": k, "cnt": 5} for pt, k in known], schema=SCHEMA))
            for r in known:
                model[r] += 5
            if phase == 0:
                compact_table(FileSystemCatalog(str(warehouse)).get_table("db.dyn"))
        for w in replicas:
            assert w.stop() == 0, w.tail()
        compact_table(FileSystemCatalog(str(warehouse)).get_table("db.dyn"))
        placed = check_index(str(warehouse), "db.dyn")
        assert set(placed) == set(model), "a key is missing from the index or in two buckets"
        ours = FileSystemCatalog(str(warehouse)).get_table("db.dyn").to_arrow().to_pylist()
        assert {(r["pt"], r["id"]): r["cnt"] for r in ours} == dict(model), "a write was lost or applied twice"
        theirs = pypaimon_read(py.get_table("db.dyn")).to_pylist()
        assert {(r["pt"], r["id"]): r["cnt"] for r in theirs} == dict(model)
    finally:
        for s in reversed(services):
            s.stop()
