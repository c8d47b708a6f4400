"""The catalog's PlanScan with a filter text, over real gRPC on loopback: the splits it plans, read with the same
filter, give exactly the rows of a plain-Python filter of the table (tests/support/filters.py), and an OR over
partitions plans only their splits."""

from __future__ import annotations

import itertools
import random
from collections.abc import Iterator
from typing import Any

import grpc
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lsmlake.catalog.filesystem import FileSystemCatalog
from lsmlake.format.predicate import Predicate
from lsmlake.proto_gen.lsmlake.v1 import catalog_pb2, common_pb2
from lsmlake.rpc.convert import split_from_proto
from lsmlake.table.file_store_table import FileStoreTable
from tests.support.filters import (
    ARROW,
    Row,
    Tree,
    append_arrow,
    append_rows,
    apply_pk,
    canonical,
    holds,
    pk_arrow,
    pk_batches,
    to_terms,
    to_text,
    trees,
)
from tests.support.local_server import TIMEOUT_S, Local, local_server

_n = itertools.count()
_COLUMNS = [("dt", "STRING"), ("id", "INT"), ("v", "BIGINT"), ("s", "STRING")]
_append_batches = st.lists(st.lists(st.tuples(st.sampled_from(["d1", "d2", None]), st.integers(0, 9) | st.none(),
                                              st.integers(-3, 3) | st.none(), st.sampled_from(["a", "b", "", None])),
                                    min_size=1, max_size=10), min_size=1, max_size=3)


@pytest.fixture(scope="module")
def local(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Local]:
    with local_server(str(tmp_path_factory.mktemp("filters"))) as srv:
        yield srv


def _create(local: Local, columns: list[tuple[str, str]], primary_keys: list[str], options: dict[str, str]
            ) -> common_pb2.TableIdentifier:
    local.stub.CreateDatabase(catalog_pb2.CreateDatabaseRequest(name="db", ignore_if_exists=True), timeout=TIMEOUT_S)
    ident = common_pb2.TableIdentifier(database="db", table=f"t{next(_n)}")
    local.stub.CreateTable(catalog_pb2.CreateTableRequest(
        table=ident, columns=[catalog_pb2.Column(name=n, type=t) for n, t in columns], primary_keys=primary_keys,
        partition_keys=["dt"], options=options), timeout=TIMEOUT_S)
    return ident


def _table(local: Local, ident: common_pb2.TableIdentifier) -> FileStoreTable:
    return FileSystemCatalog(local.warehouse).get_table(f"{ident.database}.{ident.table}")


def _planned(local: Local, ident: common_pb2.TableIdentifier, text: str) -> tuple[int, list[Row]]:
    """The number of splits PlanScan plans for the filter, and the rows they hold that pass it."""
    plan = local.stub.PlanScan(catalog_pb2.PlanScanRequest(table=ident, filter=text), timeout=TIMEOUT_S)
    table = _table(local, ident)
    splits = [split_from_proto(s, table) for s in plan.splits]
    rows: list[Row] = table.new_read(None, Predicate.of(text, table.schema)).read(splits).to_pylist()
    return len(splits), rows


def _text(tree: Tree, rnd: random.Random) -> str:
    # as a person writes it, or as a client sends a filter given in the term form
    return to_text(tree, rnd) if rnd.random() < 0.5 else Predicate.of(to_terms(tree, rnd), ARROW).to_text()


def _check(local: Local, ident: common_pb2.TableIdentifier, everything: list[Row], filters: list[Tree],
           rnd: random.Random) -> None:
    assert canonical(_table(local, ident).to_arrow().to_pylist()) == canonical(everything)
    for tree in filters:
        text = _text(tree, rnd)
        assert canonical(_planned(local, ident, text)[1]) == canonical([r for r in everything if holds(tree, r)]), text


@settings(max_examples=25, deadline=None)
@given(batches=pk_batches, filters=st.lists(trees, min_size=1, max_size=3), rnd=st.randoms(use_true_random=False))
def test_plan_scan_of_a_primary_key_table_filters_like_the_model(local: Local, batches: list[Any],
                                                                 filters: list[Tree], rnd: random.Random) -> None:
    ident = _create(local, [("dt", "STRING NOT NULL"), ("id", "INT NOT NULL"), ("v", "BIGINT"), ("s", "STRING")],
                    ["dt", "id"], {"bucket": "2"})
    model: dict[tuple[str, int], Row] = {}
    for number, batch in enumerate(batches, start=1):
        messages = local.write(ident, pk_arrow(batch).to_pydict())
        local.commit(ident, "writer", number, messages)
        apply_pk(model, batch)
    _check(local, ident, list(model.values()), filters, rnd)


@settings(max_examples=25, deadline=None)
@given(batches=_append_batches, filters=st.lists(trees, min_size=1, max_size=3),
       rnd=st.randoms(use_true_random=False))
def test_plan_scan_of_an_append_table_filters_like_the_model(local: Local, batches: list[Any], filters: list[Tree],
                                                             rnd: random.Random) -> None:
    ident = _create(local, _COLUMNS, [], {"bucket": "-1"})
    model: list[Row] = []
    for number, batch in enumerate(batches, start=1):
        local.commit(ident, "writer", number, local.write(ident, append_arrow(batch).to_pydict()))
        model += append_rows(batch)
    _check(local, ident, model, filters, rnd)


def test_plan_scan_prunes_partitions_an_or_rules_out_and_names_a_bad_filter(local: Local) -> None:
    ident = _create(local, _COLUMNS, [], {"bucket": "-1"})
    for number, dt in enumerate(["d1", "d2", "d3"], start=1):
        local.commit(ident, "writer", number, local.write(ident, {"dt": [dt], "id": [number], "v": [0], "s": ["a"]}))
    assert _planned(local, ident, "")[0] == 3
    count, rows = _planned(local, ident, "dt = 'd1' OR (dt = 'd3' AND id > 2)")
    assert count == 2 and sorted(r["id"] for r in rows) == [1, 3]
    assert _planned(local, ident, "dt = 'd1' OR s = 'a'")[0] == 3  # a branch on another column prunes nothing
    with pytest.raises(grpc.RpcError) as info:
        local.stub.PlanScan(catalog_pb2.PlanScanRequest(table=ident, filter="dt = 'd1' OR nope = 1"),
                            timeout=TIMEOUT_S)
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "'nope' is not a column" in (info.value.details() or "")
