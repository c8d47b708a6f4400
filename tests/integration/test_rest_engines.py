"""Paimon engines commit through lsmlake's REST catalog and the running compactor keeps their tables healthy,
on real processes: catalog_svc (gRPC and `--rest-port`), compactor_svc (Spark local[2]), the embedded Kafka
broker, pypaimon 2.1.0 writing and reading, paimon-rust 0.4.0 reading.

pypaimon writes level 0 only: a deletion-vector table's rows are invisible to it until a compaction moves them
up. Here nobody asks for one: the compactor hears of pypaimon's commits from the catalog's events (one per
bucket) and compacts on its own; then pypaimon and paimon-rust read exactly the model's rows, for a
deletion-vector primary-key table, a dynamic-bucket one, an append table and a partial-update table.
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
from lsmlake.format.snapshot import COMPACT
from lsmlake.kafka.broker import EmbeddedBroker, free_port
from lsmlake.proto_gen.lsmlake.v1 import catalog_pb2, catalog_pb2_grpc, common_pb2
from tests.support.pypaimon_io import read, write

pytestmark = pytest.mark.integration
pypaimon = pytest.importorskip("pypaimon", reason="pypaimon (the test extra) is not installed")
datafusion = pytest.importorskip("pypaimon_rust.datafusion", reason="pypaimon-rust (the test extra) is not installed")

COMPACTED_WITHIN_S = 240.0  # a bounded wait for the compactor's Spark jobs; a loaded 2-core machine is slow
_ID = pa.field("id", pa.int64(), nullable=False)


@pytest.fixture(scope="module")
def broker() -> Iterator[EmbeddedBroker]:
    with EmbeddedBroker() as b:
        yield b


def _write(cat: Any, name: str, rows: list[dict[str, Any]], schema: pa.Schema) -> None:
    write(cat.get_table(f"db.{name}"), pa.Table.from_pylist(rows, schema=schema))


def _read(cat: Any, name: str) -> list[dict[str, Any]]:
    return sorted(read(cat.get_table(f"db.{name}")).to_pylist(), key=lambda r: r["id"])


def _read_rust(options: dict[str, str], name: str) -> list[dict[str, Any]]:
    rb = datafusion.PaimonCatalog(options).get_table(f"db.{name}").new_read_builder()
    batches = rb.new_read().read(rb.new_scan().plan().splits())
    return sorted(pa.Table.from_batches(batches).to_pylist(), key=lambda r: r["id"]) if batches else []


def _wait(what: str, done: Callable[[], bool], service: procs.Service) -> None:
    deadline = time.monotonic() + COMPACTED_WITHIN_S
    while not done():
        assert time.monotonic() < deadline, f"{what} within {COMPACTED_WITHIN_S} s; compactor: {service.tail()}"
        time.sleep(1.0)  # polling interval, bounded by the deadline


def _compacted(warehouse: Path, name: str) -> bool:
    snaps = FileSystemCatalog(str(warehouse)).get_table(f"db.{name}").snapshots.snapshots()
    return any(s.commit_kind == COMPACT for s in snaps)


def test_the_compactor_compacts_what_paimon_engines_commit_through_rest(broker: EmbeddedBroker,
                                                                         tmp_path: Path) -> None:
    warehouse = tmp_path / "wh"
    rest_port = free_port()
    cat_svc = procs.catalog(warehouse, broker.bootstrap, "--rest-port", str(rest_port))
    compactor = None
    try:
        compactor = procs.compactor(warehouse, cat_svc.port, broker.bootstrap)
        options = {"metastore": "rest", "uri": f"http://127.0.0.1:{rest_port}", "warehouse": "lake",
                   "token.provider": "bear", "token": "no-token-is-checked-here"}
        cat = pypaimon.CatalogFactory.create(options)
        cat.create_database("db", False)

        def create(name: str, fields: list[pa.Field], pk: list[str] | None, opts: dict[str, str]) -> pa.Schema:
            schema = pa.schema(fields)
            cat.create_table(f"db.{name}", pypaimon.Schema.from_pyarrow_schema(schema, primary_keys=pk,
                                                                               options=opts), False)
            return schema

        dv = create("dv", [_ID, pa.field("v", pa.string())], ["id"],
                    {"bucket": "2", "deletion-vectors.enabled": "true"})
        log = create("log", [_ID, pa.field("n", pa.int64())], None,
                     {"bucket": "1", "bucket-key": "id", "compaction.min.file-num": "2",
                      "compaction.max.file-num": "3"})  # small files are concatenated 3 at a time
        pu = create("pu", [_ID, pa.field("a", pa.string()), pa.field("b", pa.int64())], ["id"],
                    {"bucket": "1", "merge-engine": "partial-update", "num-sorted-run.compaction-trigger": "3"})
        # dynamic buckets: pypaimon keeps the key -> bucket index (HASH index files) through REST commits
        dyn = create("dyn", [_ID, pa.field("v", pa.string())], ["id"],
                     {"bucket": "-1", "dynamic-bucket.target-row-num": "15", "deletion-vectors.enabled": "true",
                      "file.format": "parquet"})
        dv_model: dict[int, str] = {}
        log_rows: list[dict[str, Any]] = []
        pu_model: dict[int, dict[str, Any]] = {}
        for r in range(4):
            ids = list(range(r * 10, r * 10 + 20))
            _write(cat, "dv", [{"id": i, "v": f"r{r}"} for i in ids], dv)
            _write(cat, "dyn", [{"id": i, "v": f"r{r}"} for i in ids], dyn)
            dv_model.update((i, f"r{r}") for i in ids)
            rows = [{"id": r * 100 + i, "n": r} for i in range(5)]
            _write(cat, "log", rows, log)
            log_rows += rows
            # partial updates: even rounds set `a`, odd rounds set `b`; nulls leave a column as it was
            upd = [{"id": i, "a": f"a{r}" if r % 2 == 0 else None, "b": r if r % 2 else None} for i in range(3)]
            _write(cat, "pu", upd, pu)
            for u in upd:
                row = pu_model.setdefault(u["id"], {"id": u["id"], "a": None, "b": None})
                row.update({k: v for k, v in u.items() if v is not None})
        dv_expected = [{"id": k, "v": v} for k, v in sorted(dv_model.items())]
        _wait("the deletion-vector table compacted", lambda: _read(cat, "dv") == dv_expected, compactor)
        _wait("the dynamic-bucket table compacted", lambda: _read(cat, "dyn") == dv_expected, compactor)
        _wait("the append table compacted", lambda: _compacted(warehouse, "log"), compactor)
        _wait("the partial-update table compacted", lambda: _compacted(warehouse, "pu"), compactor)
        log_expected = sorted(log_rows, key=lambda r: r["id"])
        pu_expected = [pu_model[k] for k in sorted(pu_model)]
        for name, expected in (("dv", dv_expected), ("dyn", dv_expected), ("log", log_expected),
                               ("pu", pu_expected)):
            assert _read(cat, name) == expected, name
            assert _read_rust(options, name) == expected, name
        # the compactor planned through the timeline: every table has COMPLETED plans, as `lake timeline` shows
        stub = catalog_pb2_grpc.CatalogServiceStub(cat_svc.channel)
        for name in ("dv", "dyn", "log", "pu"):
            plans = stub.ListCompactionPlans(catalog_pb2.ListCompactionPlansRequest(
                table=common_pb2.TableIdentifier(database="db", table=name)), timeout=30).plans
            assert any(p.state == catalog_pb2.COMPACTION_PLAN_STATE_COMPLETED for p in plans), (name, plans)
    finally:
        if compactor is not None:
            assert compactor.stop() == 0, compactor.tail()
        assert cat_svc.stop() == 0, cat_svc.tail()
