"""The fuzzed services: one seeded lake per test module."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from lsmlake.proto_gen.lsmlake.v1 import catalog_pb2, common_pb2
from tests.support.fuzz.lake import CALL_TIMEOUT_S, Lake, running_lake


@pytest.fixture(scope="module")
def lake(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lake]:
    with running_lake(Path(tmp_path_factory.mktemp("fuzz"))) as lake:
        cat = lake.catalog
        ident = common_pb2.TableIdentifier(database="db", table="alt")
        cat.CreateTable(catalog_pb2.CreateTableRequest(
            table=ident, columns=[catalog_pb2.Column(name="id", type="BIGINT NOT NULL"),
                                  catalog_pb2.Column(name="v", type="STRING")],
            primary_keys=["id"], options={"bucket": "1"}), timeout=CALL_TIMEOUT_S)
        _seed_plans(lake)
        yield lake


def _seed_plans(lake: Lake) -> None:
    """Plan 1 INFLIGHT (owner "fuzz-owner") and plan 2 REQUESTED, so plan ids of the fuzz find real plans."""
    pk = common_pb2.TableIdentifier(database="db", table="pk")
    splits = lake.catalog.PlanScan(catalog_pb2.PlanScanRequest(table=pk, all_levels=True),
                                   timeout=CALL_TIMEOUT_S).splits
    assert len(splits) >= 2
    for s in splits[:2]:
        lake.catalog.RequestCompaction(catalog_pb2.RequestCompactionRequest(table=pk, units=[
            catalog_pb2.CompactionUnit(partition=s.partition, bucket=s.bucket, total_buckets=s.total_buckets,
                                       input_files=s.files, output_level=5)]), timeout=CALL_TIMEOUT_S)
    lake.catalog.StartCompaction(catalog_pb2.StartCompactionRequest(table=pk, plan_id="1", owner="fuzz-owner"),
                                 timeout=CALL_TIMEOUT_S)


