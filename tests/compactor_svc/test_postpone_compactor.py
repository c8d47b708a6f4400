"""Postpone-bucket tables end to end on real processes: catalog_svc (gRPC and REST), writer_svc, compactor_svc
(Spark local[2]) and the embedded Kafka broker.

pypaimon 2.1.0 writes one postpone table through the REST catalog, lsmlake's writer service another over
gRPC; neither is readable until compacted. A third (fixed-bucket) table gets the same keys from pypaimon
and from two writer replicas in turn: everyone reads the last commit's values once compacted.
Nobody triggers anything: the compactor learns of the postponed
files from the catalog's events, places each partition's rows in buckets (one COMPACT commit), and pypaimon
and lsmlake then read exactly the model's rows; the partitions' bucket counts follow the table's options.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import tests.support.writer_procs as procs
from lsmlake.catalog.filesystem import FileSystemCatalog
from lsmlake.kafka.broker import EmbeddedBroker, free_port
from lsmlake.proto_gen.lsmlake.v1 import catalog_pb2, catalog_pb2_grpc, common_pb2, writer_pb2_grpc
from lsmlake.table.postpone import pending
from tests.support.pypaimon_io import read, write
from tests.writer_svc.test_writer_local import write_requests

pytestmark = pytest.mark.integration
pypaimon = pytest.importorskip("pypaimon", reason="pypaimon (the test extra) is not installed")

PLACED_WITHIN_S = 240.0  # a bounded wait for the compactor's Spark jobs on a loaded 2-core machine


@pytest.fixture(scope="module")
def broker() -> Iterator[EmbeddedBroker]:
    with EmbeddedBroker() as b:
        yield b


def _wait(what: str, done: Callable[[], bool], service: procs.Service) -> None:
    deadline = time.monotonic() + PLACED_WITHIN_S
    while not done():
        assert time.monotonic() < deadline, f"{what} within {PLACED_WITHIN_S} s; compactor: {service.tail()}"
        time.sleep(1.0)  # polling interval, bounded by the deadline


def _pypaimon_rows(cat: Any, name: str) -> list[dict[str, Any]]:
    return sorted(read(cat.get_table(f"db.{name}")).to_pylist(), key=lambda r: (r["pt"], r["id"]))


def test_the_compactor_places_postponed_rows(broker: EmbeddedBroker, tmp_path: Path) -> None:
    warehouse = tmp_path / "wh"
    rest_port = free_port()
    cat_svc = procs.catalog(warehouse, broker.bootstrap, "--rest-port", str(rest_port))
    started: list[procs.Service] = []
    try:
        compactor = procs.compactor(warehouse, cat_svc.port, broker.bootstrap)
        started.append(compactor)
        writer = procs.writer(warehouse, cat_svc.port, "--commit-interval", "0.2")
        started.append(writer)
        writer_b = procs.writer(warehouse, cat_svc.port, "--commit-interval", "0.2")  # a second replica
        started.append(writer_b)
        options = {"metastore": "rest", "uri": f"http://127.0.0.1:{rest_port}", "warehouse": "lake",
                   "token.provider": "bear", "token": "no-token-is-checked-here"}
        cat = pypaimon.CatalogFactory.create(options)
        cat.create_database("db", False)
        schema = pa.schema([pa.field("id", pa.int64(), nullable=False), pa.field("v", pa.string()),
                            pa.field("pt", pa.string(), nullable=False)])
        cat.create_table("db.py", pypaimon.Schema.from_pyarrow_schema(
            schema, partition_keys=["pt"], primary_keys=["pt", "id"],
            options={"bucket": "-2", "file.format": "parquet", "postpone.default-bucket-num": "3",
                     "deletion-vectors.enabled": "true"}), False)
        stub = catalog_pb2_grpc.CatalogServiceStub(cat_svc.channel)
        lake_ident = common_pb2.TableIdentifier(database="db", table="lake")
        stub.CreateTable(catalog_pb2.CreateTableRequest(
            table=lake_ident, columns=[catalog_pb2.Column(name="id", type="BIGINT NOT NULL"),
                                       catalog_pb2.Column(name="v", type="STRING"),
                                       catalog_pb2.Column(name="pt", type="STRING NOT NULL")],
            partition_keys=["pt"], primary_keys=["pt", "id"],
            options={"bucket": "-2", "postpone.target-row-num-per-bucket": "10"}), timeout=30)
        model: dict[str, dict[tuple[str, int], str]] = {"py": {}, "lake": {}}
        wstub = writer_pb2_grpc.WriterServiceStub(writer.channel)
        def placed(name: str) -> bool:
            expected = [{"id": k[1], "v": v, "pt": k[0]} for k, v in sorted(model[name].items())]
            return _pypaimon_rows(cat, name) == expected and not pending(
                FileSystemCatalog(str(warehouse)).get_table(f"db.{name}"))

        # a partition's count is chosen from the rows pending when it is first placed and fixed from then on:
        # the first commit is placed alone (lake: 15 rows per partition at 10 per bucket -> 2 buckets), the
        # later ones join the buckets it made
        for r, ids in enumerate((range(0, 30), range(5, 15), range(10, 20))):
            rows = [{"id": i, "v": f"r{r}", "pt": f"p{i % 2}"} for i in ids]
            write(cat.get_table("db.py"), pa.Table.from_pylist(rows, schema=schema))
            reply = wstub.Write(write_requests(lake_ident, pa.Table.from_pylist(rows, schema=schema)), timeout=60)
            assert reply.snapshot_id > 0
            for name in ("py", "lake"):
                model[name].update({(x["pt"], x["id"]): x["v"] for x in rows})
            if r == 0:
                _wait("the first commits placed", lambda: placed("py") and placed("lake"), compactor)

        _wait("pypaimon's postponed rows placed", lambda: placed("py"), compactor)
        _wait("the writer service's postponed rows placed", lambda: placed("lake"), compactor)
        # the same keys of one table from every path in turn: pypaimon through REST, then each writer replica
        # over gRPC; sequence numbers keep the last commit the winner, the compactor merges in between
        cat.create_table("db.mixed", pypaimon.Schema.from_pyarrow_schema(
            schema, partition_keys=["pt"], primary_keys=["pt", "id"],
            options={"bucket": "2", "deletion-vectors.enabled": "true", "file.format": "parquet"}), False)
        mixed_ident = common_pb2.TableIdentifier(database="db", table="mixed")
        mixed: dict[tuple[str, int], str] = {}
        stubs = [writer_pb2_grpc.WriterServiceStub(w.channel) for w in (writer, writer_b)]
        for r in range(3):
            for path in ("py", "a", "b"):
                rows = [{"id": i, "v": f"{path}{r}", "pt": f"p{i % 2}"} for i in range(r * 4, r * 4 + 12)]
                if path == "py":
                    write(cat.get_table("db.mixed"), pa.Table.from_pylist(rows, schema=schema))
                else:
                    stub = stubs[path == "b"]
                    reply = stub.Write(write_requests(mixed_ident, pa.Table.from_pylist(rows, schema=schema)),
                                       timeout=60)
                    assert reply.snapshot_id > 0
                mixed.update({(x["pt"], x["id"]): x["v"] for x in rows})
        mixed_expected = [{"id": k[1], "v": v, "pt": k[0]} for k, v in sorted(mixed.items())]
        _wait("every path's writes of the same keys compacted", lambda: _pypaimon_rows(cat, "mixed") == mixed_expected,
              compactor)
        lake = FileSystemCatalog(str(warehouse))
        got = sorted(lake.get_table("db.mixed").to_arrow().to_pylist(), key=lambda r: (r["pt"], r["id"]))
        assert got == mixed_expected
        counts = {name: {s.total_buckets for s in lake.get_table(f"db.{name}").plan()} for name in ("py", "lake")}
        # py: the default count; lake: its first commit's 15 rows per partition at 10 rows per bucket
        assert counts == {"py": {3}, "lake": {2}}, counts
    finally:
        for s in reversed(started):
            assert s.stop() == 0, s.tail()
        assert cat_svc.stop() == 0, cat_svc.tail()
