"""A plan requested through the catalog by someone else (the console's "compact now" and "full compaction"
buttons) on a quiet table is run promptly by the compactor that owns its bucket, on real processes: catalog_svc
with tokens, compactor_svc (Spark local[2]) authenticating with its service token, the embedded Kafka broker.

The catalog publishes no events here and the compactor reconciles once an hour, so nothing but the compactor's
periodic look at the REQUESTED plans can find the plan: before it, such a plan waited for a rebalance.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import pyarrow as pa
import pytest

import tests.support.writer_procs as procs
from lsmlake.catalog.filesystem import FileSystemCatalog
from lsmlake.kafka.broker import EmbeddedBroker
from lsmlake.proto_gen.lsmlake.v1 import catalog_pb2, catalog_pb2_grpc, common_pb2, compactor_pb2, compactor_pb2_grpc
from lsmlake.rpc.convert import changes_to_proto, file_to_proto
from lsmlake.rpc.interceptor import BearerToken
from lsmlake.table.compact import compaction_history, plan_bucket
from tests.support.security import Tokens

pytestmark = pytest.mark.integration

S = catalog_pb2.CompactionPlanState
DEADLINE_S = 60.0  # a few looks at the timeline and one small Spark job; a rebalance never comes here
COMMITS = 4
TRIGGER = 3  # num-sorted-run.compaction-trigger: 4 level-0 files make a regular compaction due


@dataclass
class Cluster:
    warehouse: Path
    admin: Any  # catalog stubs with the admin's and the service's tokens
    service: Any
    compactor: procs.Service


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory, tokens: Tokens) -> Iterator[Cluster]:
    warehouse = tmp_path_factory.mktemp("requested") / "wh"
    token_file = warehouse.parent / "compactor.token"
    token_file.write_text(tokens.service + "\n")
    with EmbeddedBroker() as broker:
        cat = procs.catalog(warehouse, None, "--auth-tokens", tokens.file)  # no events: the tables stay quiet
        services = [cat]
        try:
            c = procs.compactor(warehouse, cat.port, broker.bootstrap, "--compactor-id", "compactor-r",
                                "--reconcile-interval", "3600", "--catalog-token-file", str(token_file))
            services.append(c)
            status = compactor_pb2_grpc.CompactorServiceStub(c.channel)
            deadline = time.monotonic() + DEADLINE_S
            while len(status.CompactionStatus(compactor_pb2.CompactionStatusRequest(), timeout=30)
                      .owned_partitions) < 4:
                assert time.monotonic() < deadline, c.tail()
                time.sleep(0.2)  # polling interval, bounded by the deadline
            target = f"127.0.0.1:{cat.port}"
            with grpc.insecure_channel(target) as raw:
                admin = grpc.intercept_channel(raw, BearerToken(tokens.admin))
                service = grpc.intercept_channel(raw, BearerToken(tokens.service))
                yield Cluster(warehouse, catalog_pb2_grpc.CatalogServiceStub(admin),
                              catalog_pb2_grpc.CatalogServiceStub(service), c)
            assert c.stop() == 0, c.tail()
        finally:
            for s in reversed(services):
                s.stop()


def _quiet_table(cluster: Cluster, name: str) -> tuple[common_pb2.TableIdentifier, dict[int, int]]:
    """A one-bucket table with COMMITS level-0 files, committed after the compactor started (it hears of none)."""
    stub = cluster.admin
    stub.CreateDatabase(catalog_pb2.CreateDatabaseRequest(name="db", ignore_if_exists=True), timeout=30)
    ident = common_pb2.TableIdentifier(database="db", table=name)
    stub.CreateTable(catalog_pb2.CreateTableRequest(
        table=ident, columns=[catalog_pb2.Column(name="id", type="BIGINT NOT NULL"),
                              catalog_pb2.Column(name="n", type="BIGINT")],
        primary_keys=["id"], options={"bucket": "1", "num-sorted-run.compaction-trigger": str(TRIGGER)}),
        timeout=30)
    table = FileSystemCatalog(str(cluster.warehouse)).get_table(f"db.{name}")
    model: dict[int, int] = {}
    for r in range(COMMITS):
        ids = list(range(r * 30, r * 30 + 100))
        w = table.new_write()
        w.write(pa.table({"id": pa.array(ids, pa.int64()), "n": pa.array([r] * len(ids), pa.int64())}))
        stub.Commit(catalog_pb2.CommitRequest(table=ident, commit_user="loader", commit_identifier=r + 1,
                                              kind=common_pb2.COMMIT_KIND_APPEND,
                                              changes=[changes_to_proto(m) for m in w.prepare_commit()]), timeout=60)
        model.update((i, r) for i in ids)
    return ident, model


def _request_as_the_console(cluster: Cluster, ident: common_pb2.TableIdentifier,
                            full: bool) -> catalog_pb2.CompactionPlan:
    """RequestCompaction of the bucket's due unit (full: all its files into the top level) with the service token,
    as the console's buttons ask the catalog's timeline."""
    table = FileSystemCatalog(str(cluster.warehouse)).get_table(f"{ident.database}.{ident.table}")
    (split,) = table.plan()
    unit = plan_bucket(table, split, full, compaction_history(table))
    assert unit is not None and unit.files, "the table was made so that a compaction is due"
    proto = catalog_pb2.CompactionUnit(partition=split.partition, bucket=split.bucket,
                                       total_buckets=split.total_buckets,
                                       input_files=[file_to_proto(f) for f in unit.files],
                                       output_level=unit.output_level)
    return cluster.service.RequestCompaction(catalog_pb2.RequestCompactionRequest(table=ident, units=[proto],
                                                                                  full=full), timeout=30).plan


def _completed(cluster: Cluster, ident: common_pb2.TableIdentifier, plan_id: str) -> catalog_pb2.CompactionPlan:
    deadline = time.monotonic() + DEADLINE_S
    while True:
        (p,) = [p for p in cluster.admin.ListCompactionPlans(catalog_pb2.ListCompactionPlansRequest(table=ident),
                                                             timeout=30).plans if p.plan_id == plan_id]
        if p.state == S.COMPACTION_PLAN_STATE_COMPLETED:
            return p
        assert p.state in (S.COMPACTION_PLAN_STATE_REQUESTED, S.COMPACTION_PLAN_STATE_INFLIGHT), p
        assert time.monotonic() < deadline, (f"plan {plan_id} still {S.Name(p.state)} after {DEADLINE_S:g} s\n"
                                             f"{cluster.compactor.tail()}")
        time.sleep(0.2)  # polling interval, bounded by the deadline


def _rows(cluster: Cluster, table_id: str) -> dict[int, int]:
    rows = FileSystemCatalog(str(cluster.warehouse)).get_table(table_id).to_arrow().to_pylist()
    return {r["id"]: r["n"] for r in rows}


def test_compact_now_on_a_quiet_table_runs_promptly(cluster: Cluster) -> None:
    ident, model = _quiet_table(cluster, "quiet_now")
    plan = _request_as_the_console(cluster, ident, full=False)
    inputs = {f.file_name for u in plan.units for f in u.input_files}
    assert len(inputs) == COMMITS
    done = _completed(cluster, ident, plan.plan_id)
    assert done.owner.endswith("compactor-r") and not done.full
    (split,) = FileSystemCatalog(str(cluster.warehouse)).get_table("db.quiet_now").plan()
    assert not inputs & {f.file_name for f in split.files}, "the plan's inputs were replaced"
    assert [f.level for f in split.files] == [plan.units[0].output_level]
    assert _rows(cluster, "db.quiet_now") == model


def test_full_compaction_on_a_quiet_table_runs_as_full(cluster: Cluster) -> None:
    ident, model = _quiet_table(cluster, "quiet_full")
    plan = _request_as_the_console(cluster, ident, full=True)
    table = FileSystemCatalog(str(cluster.warehouse)).get_table("db.quiet_full")
    top = table.options.num_levels() - 1
    assert plan.full and [u.output_level for u in plan.units] == [top]
    done = _completed(cluster, ident, plan.plan_id)
    assert done.owner.endswith("compactor-r") and done.full
    (split,) = FileSystemCatalog(str(cluster.warehouse)).get_table("db.quiet_full").plan()
    assert [f.level for f in split.files] == [top]
    assert _rows(cluster, "db.quiet_full") == model
