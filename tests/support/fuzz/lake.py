"""The three services in the test process on loopback ports, a seeded warehouse, and the oracle of a fuzzed call.

The metadata store lives next to the warehouse, not in it, so the listing of the folder above the
warehouse shows any file a request made escape it (`../x`) and the store is compared by its rows.
"""

from __future__ import annotations

import hashlib
import os
import sqlite3
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
import pyarrow as pa
from hypothesis import event
from hypothesis.control import currently_in_test_context

from catalog_svc.server import CatalogServer
from catalog_svc.server import Settings as CatalogSettings
from compactor_svc.metrics import CompactorMetrics
from compactor_svc.ownership import Ownership
from compactor_svc.scheduler import Scheduler
from compactor_svc.servicer import CompactorService
from compactor_svc.triggers import FullCompactionTrigger
from lsmlake.proto_gen.lsmlake.v1 import (
    catalog_pb2,
    catalog_pb2_grpc,
    common_pb2,
    compactor_pb2,
    compactor_pb2_grpc,
    writer_pb2_grpc,
)
from lsmlake.rpc.catalog_client import CatalogClient
from lsmlake.rpc.errors import INTERNAL_MESSAGE
from lsmlake.rpc.health_service import HealthServicer
from lsmlake.rpc.server import new_server, set_serving
from lsmlake.spark.compaction_job import SparkCompactor
from tests.writer_svc.test_writer_local import write_requests
from writer_svc.server import Settings as WriterSettings
from writer_svc.server import WriterServer

CALL_TIMEOUT_S = 60.0  # generous: the machine is shared; a hang still fails the call
#: a refusal that names the caller's mistake; anything else (UNKNOWN, INTERNAL, DEADLINE_EXCEEDED, ...) fails
CLEAR_CODES = frozenset({grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.NOT_FOUND, grpc.StatusCode.ALREADY_EXISTS,
                         grpc.StatusCode.FAILED_PRECONDITION, grpc.StatusCode.OUT_OF_RANGE,
                         grpc.StatusCode.RESOURCE_EXHAUSTED, grpc.StatusCode.PERMISSION_DENIED})
MAX_MESSAGE_CHARS = 4_000  # a reason a person reads; a 100k-char name must not be echoed whole


@dataclass
class Lake:
    root: Path  # holds the warehouse and the metadata store
    warehouse: Path
    metastore: Path
    channels: dict[str, grpc.Channel]  # service name -> channel
    catalog: catalog_pb2_grpc.CatalogServiceStub
    writer: writer_pb2_grpc.WriterServiceStub
    compactor: compactor_pb2_grpc.CompactorServiceStub
    addresses: dict[str, str] = field(default_factory=dict)  # service name -> host:port

    def state(self) -> tuple[dict[str, tuple[int, str]], dict[str, list[tuple[Any, ...]]]]:
        """Every file under the root (size and digest, the store's files aside) and every row of the store."""
        files = {}
        for d, _, names in os.walk(self.root):
            for n in names:
                p = Path(d) / n
                if p.parent == self.root and n.startswith(self.metastore.name):
                    continue  # the store (and its journal) is compared by rows below
                data = p.read_bytes()
                files[str(p.relative_to(self.root))] = (len(data), hashlib.sha1(data).hexdigest())
        with sqlite3.connect(f"file:{self.metastore}?mode=ro", uri=True) as conn:
            # the services' heartbeats change their registry on their own, as a clock does
            tables = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")
                      if r[0] != "lsmlake_services"]
            rows = {t: sorted(conn.execute(f"SELECT * FROM {t}").fetchall(), key=repr) for t in tables}
        conn.close()
        return files, rows


#: method -> outcome -> calls, printed by the tests (run with -s to see what the fuzz reached)
OUTCOMES: dict[str, Counter[str]] = {}


def check_refusal(method: str, error: grpc.RpcError) -> None:
    """A failed call must be a clear refusal: a status naming the caller's mistake, with a readable reason."""
    code, details = error.code(), error.details() or ""
    assert code in CLEAR_CODES, f"{method}: {code} {details[:500]!r}"
    assert details.strip() and details != INTERNAL_MESSAGE, f"{method}: {code} without a reason"
    assert len(details) <= MAX_MESSAGE_CHARS, f"{method}: a {len(details)}-char reason"


def fuzz_call(lake: Lake, method: str, call: Callable[[], Any]) -> Any:
    """Run one call against the oracle: OK, or a clear refusal that changed nothing. The reply, or None."""
    before = lake.state()
    try:
        reply = call()
    except grpc.RpcError as e:
        if currently_in_test_context():
            event(f"{e.code().name}: {(e.details() or '')[:50]}")
        OUTCOMES.setdefault(method, Counter())[f"{e.code().name}: {(e.details() or '')[:70]}"] += 1
        check_refusal(method, e)
        after = lake.state()
        assert after[0] == before[0], f"{method} failed ({e.details()[:200]!r}) but changed files: " \
                                      f"{sorted(set(after[0].items()) ^ set(before[0].items()))[:10]}"
        assert after[1] == before[1], f"{method} failed ({e.details()[:200]!r}) but changed the metadata store"
        return None
    if currently_in_test_context():
        event("OK")
    OUTCOMES.setdefault(method, Counter())["OK"] += 1
    escaped = [p for p in lake.state()[0] if not p.startswith(lake.warehouse.name + os.sep)]
    assert not escaped, f"{method} wrote outside the warehouse: {escaped}"
    return reply


def _seed(lake: Lake) -> None:
    """Two tables with a few snapshots: a partitioned primary-key table and an append table."""
    cat = lake.catalog
    cat.CreateDatabase(catalog_pb2.CreateDatabaseRequest(name="db"), timeout=CALL_TIMEOUT_S)
    for name, columns, keys, parts, options in (
            ("pk", [("id", "BIGINT NOT NULL"), ("dt", "STRING NOT NULL"), ("v", "STRING"), ("n", "INT")],
             ["id", "dt"], ["dt"], {"bucket": "2"}),
            ("log", [("id", "BIGINT"), ("v", "STRING")], [], [], {})):
        ident = common_pb2.TableIdentifier(database="db", table=name)
        cat.CreateTable(catalog_pb2.CreateTableRequest(
            table=ident, columns=[catalog_pb2.Column(name=n, type=t) for n, t in columns], primary_keys=keys,
            partition_keys=parts, options=options), timeout=CALL_TIMEOUT_S)
        for r in range(2):
            rows = {"id": pa.array(range(r * 10, r * 10 + 10), pa.int64()), "v": [f"r{r}"] * 10}
            if name == "pk":
                rows |= {"dt": ["2024-01-01", "2024-01-02"] * 5, "n": pa.array([r] * 10, pa.int32())}
            lake.writer.Write(write_requests(ident, pa.table(rows), options={"commit": "now"}),
                              timeout=CALL_TIMEOUT_S)


@contextmanager
def running_lake(root: Path) -> Iterator[Lake]:
    """Catalog, writer and compactor services in this process (the compactor without Spark or Kafka: its
    planner never runs, so the fuzz reaches its request handling only), seeded with two tables."""
    warehouse, metastore = root / "wh", root / "meta.sqlite"
    cat = CatalogServer(CatalogSettings(warehouse=str(warehouse), metastore=f"sqlite:///{metastore}",
                                        expire_interval_s=0, orphan_interval_s=0, reconcile_interval_s=0))
    cat_port = cat.start()
    writer = WriterServer(WriterSettings(warehouse=str(warehouse), catalog=f"127.0.0.1:{cat_port}",
                                         commit_interval_s=0.2))
    writer_port = writer.start()
    catalog = CatalogClient(f"127.0.0.1:{cat_port}", timeout_s=10, retry_for_s=1)
    scheduler = Scheduler(str(warehouse), catalog.timeline, SparkCompactor("local[1]"), Ownership(), CompactorMetrics(),
                          "fuzz-compactor", FullCompactionTrigger())  # not started: no Spark job ever runs
    name = compactor_pb2.DESCRIPTOR.services_by_name["CompactorService"].full_name
    health_servicer = HealthServicer()
    compactor, compactor_port = new_server(name, health_servicer, "127.0.0.1", 0, workers=4)
    compactor_pb2_grpc.add_CompactorServiceServicer_to_server(
        CompactorService(str(warehouse), scheduler, scheduler.ownership, "fuzz-compactor"), compactor)
    compactor.start()
    set_serving(health_servicer, name, True)
    addresses = {svc: f"127.0.0.1:{port}" for svc, port in (("lsmlake.v1.CatalogService", cat_port),
                                                            ("lsmlake.v1.WriterService", writer_port),
                                                            ("lsmlake.v1.CompactorService", compactor_port))}
    channels = {svc: grpc.insecure_channel(address, options=[("grpc.max_send_message_length", 64 << 20)])
                for svc, address in addresses.items()}
    lake = Lake(root, warehouse, metastore, channels,
                catalog_pb2_grpc.CatalogServiceStub(channels["lsmlake.v1.CatalogService"]),
                writer_pb2_grpc.WriterServiceStub(channels["lsmlake.v1.WriterService"]),
                compactor_pb2_grpc.CompactorServiceStub(channels["lsmlake.v1.CompactorService"]), addresses)
    try:
        _seed(lake)
        yield lake
    finally:
        for c in channels.values():
            c.close()
        compactor.stop(5).wait(10)
        catalog.close()
        writer.stop()
        cat.stop()
