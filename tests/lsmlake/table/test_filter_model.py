"""A filtered read of the library gives exactly the rows of a plain-Python filter of the unfiltered rows.

Random small tables (a partitioned primary-key table written in a few commits with deletes; an append table with
deletes by filter) and random filter trees in the text and the term forms (tests/support/filters.py).
"""

from __future__ import annotations

import itertools
import random
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lsmlake.catalog.filesystem import FileSystemCatalog
from lsmlake.table.file_store_table import FileStoreTable
from tests.support.filters import (
    APPEND_DDL,
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
    trees,
)

_n = itertools.count()
_SETTINGS = settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


def _catalog(tmp_path: Path) -> FileSystemCatalog:
    cat = FileSystemCatalog(str(tmp_path / f"wh{next(_n)}"))
    cat.create_database("db")
    return cat


def _filtered(t: FileStoreTable, filter_spec: Any) -> list[Row]:
    splits = t.new_scan(filter_spec).plan()
    rows: list[Row] = t.new_read(None, filter_spec).read(splits).to_pylist()
    return rows


def _check(t: FileStoreTable, everything: list[Row], filters: list[Tree], rnd: random.Random) -> None:
    assert canonical(t.to_arrow().to_pylist()) == canonical(everything)
    for tree in filters:
        wanted = canonical([r for r in everything if holds(tree, r)])
        given_spec = spec(tree, rnd)
        assert canonical(_filtered(t, given_spec)) == wanted, given_spec


@_SETTINGS
@given(batches=pk_batches, filters=st.lists(trees, min_size=1, max_size=4), buckets=st.sampled_from(["1", "2"]),
       dv=st.booleans(), rnd=st.randoms(use_true_random=False))
def test_a_primary_key_table_filters_like_the_model(tmp_path: Path, batches: list[Any], filters: list[Tree],
                                                    buckets: str, dv: bool, rnd: random.Random) -> None:
    options = {"bucket": buckets}
    if dv:
        options["deletion-vectors.enabled"] = "true"
    t = _catalog(tmp_path).create_table("db.t", PK_DDL, partition_keys=["dt"], primary_keys=["dt", "id"],
                                        options=options)
    model: dict[tuple[str, int], Row] = {}
    for batch in batches:
        t.write_arrow(pk_arrow(batch))
        apply_pk(model, batch)
    if dv:
        from lsmlake.table.compact import compact_table
        compact_table(t)  # deletion vectors appear when a compaction looks older rows up
    _check(t, list(model.values()), filters, rnd)


@_SETTINGS
@given(steps=append_steps, filters=st.lists(trees, min_size=1, max_size=4), rnd=st.randoms(use_true_random=False))
def test_an_append_table_deleted_by_filters_filters_like_the_model(tmp_path: Path, steps: list[Any],
                                                                    filters: list[Tree], rnd: random.Random) -> None:
    t = _catalog(tmp_path).create_table("db.a", APPEND_DDL, partition_keys=["dt"],
                                        options={"bucket": "-1", "deletion-vectors.enabled": "true"})
    model: list[Row] = []
    for batch, delete in steps:
        t.write_arrow(append_arrow(batch))
        model += append_rows(batch)
        if delete is not None:
            t.delete_where(spec(delete, rnd))
            model = [r for r in model if not holds(delete, r)]
    _check(t, model, filters, rnd)


def test_and_of_masks_chunked_differently_keeps_sql_nulls() -> None:
    """Found by the model test above: a partition column (one chunk per file) and a value column (one chunk) give
    masks chunked differently, and pyarrow 19's `and_kleene` of such chunked arrays made `TRUE AND NULL` true, so
    `dt IS NOT NULL AND s != 'a'` kept a row whose s is NULL."""
    import pyarrow as pa

    from lsmlake.format.predicate import Predicate
    from lsmlake.table.read import filter_rows

    schema = pa.schema([("dt", pa.string()), ("s", pa.string())])
    table = pa.table({"dt": pa.chunked_array([["d3"], ["d3"]]), "s": pa.chunked_array([["a", None]])}, schema)
    pred = Predicate.of("dt IS NOT NULL AND s != 'a'", schema)
    assert filter_rows(table, pred).to_pylist() == []
    assert filter_rows(table, Predicate.of("dt IS NOT NULL OR s != 'a'", schema)).num_rows == 2
