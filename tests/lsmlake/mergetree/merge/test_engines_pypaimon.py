"""pypaimon 2.1.0 reads what each merge engine wrote, identically (for the options pypaimon supports)."""

from __future__ import annotations

import itertools

import pyarrow as pa
import pytest

from lsmlake.catalog.filesystem import FileSystemCatalog
from lsmlake.table.compact import compact_table

_n = itertools.count()


def _tables(tmp_path, options):
    root = str(tmp_path / f"wh{next(_n)}")
    cat = FileSystemCatalog(root)
    cat.create_database("db")
    o = {"bucket": "2"}
    o.update(options)
    t = cat.create_table("db.t", "k INT NOT NULL, a BIGINT, b STRING, c DOUBLE", primary_keys=["k"], options=o)
    from pypaimon import CatalogFactory

    return t, CatalogFactory.create({"warehouse": root}).get_table("db.t")


def _write(t, rows) -> None:
    t.write_arrow(pa.table({"k": pa.array([r[0] for r in rows], pa.int32()),
                            "a": pa.array([r[1] for r in rows], pa.int64()), "b": [r[2] for r in rows],
                            "c": pa.array([r[3] for r in rows], pa.float64())}))


def _theirs(pt) -> dict:
    rb = pt.new_read_builder()
    out = rb.new_read().to_arrow(rb.new_scan().plan().splits())
    return {r["k"]: (r["a"], r["b"], r["c"]) for r in out.to_pylist()}


def _ours(t) -> dict:
    return {r["k"]: (r["a"], r["b"], r["c"]) for r in t.to_arrow().to_pylist()}


BATCHES = [
    [(k, k, None, None) for k in range(20)],
    [(k, None, f"b{k}", None) for k in range(0, 20, 2)],
    [(k, k * 10, None, k / 2) for k in range(0, 20, 3)],
    [(k, None, "late", None) for k in range(5, 25, 4)],
]


@pytest.mark.parametrize("options", [
    {"merge-engine": "partial-update"},
    {"merge-engine": "aggregation", "fields.a.aggregate-function": "sum", "fields.b.aggregate-function": "listagg",
     "fields.c.aggregate-function": "max"},
    {"merge-engine": "aggregation"},  # last_non_null_value everywhere
    {"merge-engine": "first-row"},
    {"merge-engine": "deduplicate"},
])
@pytest.mark.parametrize("compact", ["none", "some", "full"])
def test_pypaimon_reads_each_engine(tmp_path, options, compact) -> None:
    t, pt = _tables(tmp_path, options)
    for i, batch in enumerate(BATCHES):
        _write(t, batch)
        if compact == "some" and i % 2:
            compact_table(t)
    if compact == "full":
        compact_table(t, full=True)
    ours = _ours(t)
    assert ours == _theirs(pt)
    if options["merge-engine"] != "first-row" or compact != "none":
        assert ours, "the table is not empty"


def test_lsmlake_reads_partial_update_written_by_pypaimon(tmp_path) -> None:
    t, pt = _tables(tmp_path, {"merge-engine": "partial-update"})
    schema = pa.schema([pa.field("k", pa.int32(), nullable=False), ("a", pa.int64()), ("b", pa.string()),
                        ("c", pa.float64())])
    for batch in BATCHES:
        wb = pt.new_batch_write_builder()
        w, c = wb.new_write(), wb.new_commit()
        w.write_arrow(pa.table({"k": [r[0] for r in batch], "a": [r[1] for r in batch], "b": [r[2] for r in batch],
                                "c": [r[3] for r in batch]}, schema=schema))
        c.commit(w.prepare_commit())
    assert _ours(t) == _theirs(pt)
    compact_table(t, full=True)
    assert _ours(t) == _theirs(pt)
