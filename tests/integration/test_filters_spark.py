"""Spark's `filter` option takes the whole predicate language: a read gives exactly the rows of a plain-Python filter
of the table (tests/support/filters.py), on a local Spark session with Python workers."""

from __future__ import annotations

import itertools
import random
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lsmlake.catalog.filesystem import FileSystemCatalog
from lsmlake.format.predicate import Predicate
from tests.support.filters import (
    APPEND_DDL,
    ARROW,
    COLUMNS,
    PK_DDL,
    Row,
    Tree,
    append_arrow,
    append_rows,
    append_steps,
    apply_pk,
    canonical,
    holds,
    pk_arrow,
    pk_batches,
    spec,
    to_terms,
    to_text,
    trees,
)

_n = itertools.count()


@pytest.fixture(scope="module")
def spark() -> Iterator[Any]:
    from tests.lsmlake.spark.conftest import start_session

    session = start_session()
    yield session
    session.stop()


@pytest.fixture(scope="module")
def warehouse(tmp_path_factory: pytest.TempPathFactory) -> FileSystemCatalog:
    cat = FileSystemCatalog(str(tmp_path_factory.mktemp("spark-filters")))
    cat.create_database("db")
    return cat


def _spark_rows(spark: Any, cat: FileSystemCatalog, ident: str, text: str) -> list[Row]:
    df = spark.read.format("lsmlake").option("warehouse", cat.warehouse).option("filter", text).load(ident)
    return [dict(zip(COLUMNS, (r[c] for c in COLUMNS), strict=True)) for r in df.collect()]


def _check(spark: Any, cat: FileSystemCatalog, ident: str, everything: list[Row], tree: Tree,
           rnd: random.Random) -> None:
    text = to_text(tree, rnd) if rnd.random() < 0.5 else Predicate.of(to_terms(tree, rnd), ARROW).to_text()
    assert canonical(_spark_rows(spark, cat, ident, text)) == canonical([r for r in everything if holds(tree, r)]), \
        text


@settings(max_examples=12, deadline=None)
@given(batches=pk_batches, tree=trees, rnd=st.randoms(use_true_random=False))
def test_spark_reads_a_primary_key_table_like_the_model(spark: Any, warehouse: FileSystemCatalog, batches: list[Any],
                                                        tree: Tree, rnd: random.Random) -> None:
    ident = f"db.pk{next(_n)}"
    t = warehouse.create_table(ident, PK_DDL, partition_keys=["dt"], primary_keys=["dt", "id"],
                               options={"bucket": "2"})
    model: dict[tuple[str, int], Row] = {}
    for batch in batches:
        t.write_arrow(pk_arrow(batch))
        apply_pk(model, batch)
    _check(spark, warehouse, ident, list(model.values()), tree, rnd)


@settings(max_examples=12, deadline=None)
@given(steps=append_steps, tree=trees, rnd=st.randoms(use_true_random=False))
def test_spark_reads_an_append_table_like_the_model(spark: Any, warehouse: FileSystemCatalog, steps: list[Any],
                                                    tree: Tree, rnd: random.Random) -> None:
    ident = f"db.append{next(_n)}"
    t = warehouse.create_table(ident, APPEND_DDL, partition_keys=["dt"],
                               options={"bucket": "-1", "deletion-vectors.enabled": "true"})
    model: list[Row] = []
    for batch, delete in steps:
        t.write_arrow(append_arrow(batch))
        model += append_rows(batch)
        if delete is not None:
            t.delete_where(spec(delete, rnd))
            model = [r for r in model if not holds(delete, r)]
    _check(spark, warehouse, ident, model, tree, rnd)


def test_a_bad_filter_is_refused_naming_the_column(spark: Any, warehouse: FileSystemCatalog) -> None:
    warehouse.create_table("db.bad", APPEND_DDL, options={"bucket": "-1"}).write_arrow(
        append_arrow([("d1", 1, 1, "a")]))
    with pytest.raises(Exception, match=r"'nope' is not a column"):
        _spark_rows(spark, warehouse, "db.bad", "id = 1 OR nope = 2")
