"""ListCompactionPlans without a table: the plans of every table in the states asked for, in one call, each naming
its own table (the compactors' periodic look for REQUESTED plans), over real gRPC on a loopback port."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from lsmlake.proto_gen.lsmlake.v1 import catalog_pb2, common_pb2
from tests.support.local_server import TIMEOUT_S, Local, local_server

S = catalog_pb2.CompactionPlanState


@pytest.fixture
def local(tmp_path: Path) -> Iterator[Local]:
    with local_server(str(tmp_path)) as srv:
        yield srv


def _request(local: Local, name: str) -> tuple[common_pb2.TableIdentifier, catalog_pb2.CompactionPlan]:
    ident = local.create_table("db", name, [("id", "BIGINT NOT NULL"), ("v", "STRING")], ["id"], {"bucket": "1"})
    local.commit(ident, "writer", 1, local.write(ident, {"id": [1, 2], "v": ["a", "b"]}))
    split = local.stub.PlanScan(catalog_pb2.PlanScanRequest(table=ident), timeout=TIMEOUT_S).splits[0]
    unit = catalog_pb2.CompactionUnit(partition=split.partition, bucket=split.bucket,
                                      total_buckets=split.total_buckets, input_files=split.files, output_level=5)
    plan = local.stub.RequestCompaction(catalog_pb2.RequestCompactionRequest(table=ident, units=[unit]),
                                        timeout=TIMEOUT_S).plan
    return ident, plan


def test_the_requested_plans_of_every_table_in_one_call(local: Local) -> None:
    t1, p1 = _request(local, "t1")
    t2, p2 = _request(local, "t2")
    _, p3 = _request(local, "t3")
    local.stub.StartCompaction(catalog_pb2.StartCompactionRequest(table=t2, plan_id=p2.plan_id, owner="c1"),
                               timeout=TIMEOUT_S)
    requested = local.stub.ListCompactionPlans(catalog_pb2.ListCompactionPlansRequest(
        states=[S.COMPACTION_PLAN_STATE_REQUESTED]), timeout=TIMEOUT_S).plans
    assert [(p.plan_id, p.table.database, p.table.table) for p in requested] == [
        (p1.plan_id, "db", "t1"), (p3.plan_id, "db", "t3")]
    pending = local.stub.ListCompactionPlans(catalog_pb2.ListCompactionPlansRequest(
        states=[S.COMPACTION_PLAN_STATE_REQUESTED, S.COMPACTION_PLAN_STATE_INFLIGHT]), timeout=TIMEOUT_S).plans
    assert [(p.plan_id, p.table.table, p.state) for p in pending] == [
        (p1.plan_id, "t1", S.COMPACTION_PLAN_STATE_REQUESTED), (p2.plan_id, "t2", S.COMPACTION_PLAN_STATE_INFLIGHT),
        (p3.plan_id, "t3", S.COMPACTION_PLAN_STATE_REQUESTED)]
    # one table's listing still names that table only
    (only,) = local.stub.ListCompactionPlans(catalog_pb2.ListCompactionPlansRequest(table=t1), timeout=TIMEOUT_S).plans
    assert (only.plan_id, only.table.table) == (p1.plan_id, "t1")


def test_every_table_without_states_is_refused(local: Local) -> None:
    _request(local, "t1")
    for request in (catalog_pb2.ListCompactionPlansRequest(),
                    catalog_pb2.ListCompactionPlansRequest(table=common_pb2.TableIdentifier())):
        with pytest.raises(grpc.RpcError) as info:
            local.stub.ListCompactionPlans(request, timeout=TIMEOUT_S)
        assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "states" in info.value.details()
