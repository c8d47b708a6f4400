"""Filters with OR prune partitions, manifests and files only where no branch can match, and read exactly."""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from lsmlake.catalog.filesystem import FileSystemCatalog
from lsmlake.errors import InvalidInputError
from lsmlake.format.predicate import Or, Predicate, Term
from lsmlake.table.file_store_table import FileStoreTable

_n = itertools.count()


def _catalog(tmp_path: Path) -> FileSystemCatalog:
    cat = FileSystemCatalog(str(tmp_path / f"wh{next(_n)}"))
    cat.create_database("db")
    return cat


def _partitioned(tmp_path: Path) -> FileStoreTable:
    t = _catalog(tmp_path).create_table("db.t", "dt STRING NOT NULL, id BIGINT NOT NULL, v STRING",
                                        partition_keys=["dt"], primary_keys=["dt", "id"], options={"bucket": "1"})
    for dt in ("d1", "d2", "d3"):
        t.write_arrow(pa.table({"dt": [dt] * 4, "id": pa.array([1, 2, 3, 4], pa.int64()),
                                "v": [f"{dt}-{i}" for i in range(4)]}))
    return t


def _ids(t: FileStoreTable, spec: Any) -> list[tuple[str, int]]:
    return sorted((r["dt"], r["id"]) for r in t.to_arrow(predicate=spec).to_pylist())


def test_an_or_over_partitions_plans_only_their_splits(tmp_path: Path) -> None:
    t = _partitioned(tmp_path)
    assert len(t.new_scan().plan()) == 3
    two = t.new_scan(Or(("dt", "=", "d1"), ("dt", "=", "d3"))).plan()
    assert sorted(s.partition_values for s in two) == [("d1",), ("d3",)]
    assert len(t.new_scan("dt = 'd2' OR (dt = 'd3' AND id > 2)").plan()) == 2
    assert _ids(t, "dt = 'd2' OR (dt = 'd3' AND id > 2)") == [("d2", 1), ("d2", 2), ("d2", 3), ("d2", 4),
                                                               ("d3", 3), ("d3", 4)]


def test_an_or_with_a_branch_on_another_column_prunes_no_partition(tmp_path: Path) -> None:
    t = _partitioned(tmp_path)
    p = Predicate.of("dt = 'd1' OR v = 'd2-1'", t.schema)
    assert len(t.new_scan(p).plan()) == 3
    assert _ids(t, p) == [("d1", 1), ("d1", 2), ("d1", 3), ("d1", 4), ("d2", 2)]
    assert len(t.new_scan("dt = 'd1' AND (dt = 'd2' OR id = 1)").plan()) == 1


def test_key_statistics_prune_files_no_branch_can_match(tmp_path: Path) -> None:
    t = _catalog(tmp_path).create_table("db.k", "k BIGINT NOT NULL, v BIGINT", primary_keys=["k"],
                                        options={"bucket": "1"})
    for lo in (0, 100, 200):
        t.write_arrow(pa.table({"k": pa.array(range(lo, lo + 10), pa.int64()), "v": pa.array([lo] * 10, pa.int64())}))

    def files(spec: Any) -> int:
        return sum(len(s.files) for s in t.new_scan(spec).plan())

    assert files(None) == 3
    assert files(Or(("k", "<", 5), ("k", ">", 205))) == 2
    assert files(Term("k", "=", 3) | Term("k", "in", [104, 105])) == 2
    assert files("k = 3 OR v = 200") == 3  # v has no key statistics: any file may match
    assert files("k >= 100 AND (k < 5 OR k > 205)") == 1
    assert sorted(r["k"] for r in t.to_arrow(predicate="k < 2 OR k > 207 OR v = 100 AND k = 100").to_pylist()) == [
        0, 1, 100, 208, 209]


def test_value_statistics_prune_append_files_where_no_branch_can_match(tmp_path: Path) -> None:
    t = _catalog(tmp_path).create_table("db.a", "id BIGINT, s STRING", options={"bucket": "-1"})
    for lo in (0, 100, 200):
        t.write_arrow(pa.table({"id": pa.array(range(lo, lo + 10), pa.int64()), "s": [f"s{lo}"] * 10}))

    def files(spec: Any) -> int:
        return sum(len(s.files) for s in t.new_scan(spec).plan())

    assert files(None) == 3
    assert files("id < 3 OR s = 's200'") == 2
    assert files("id IS NULL") == 0
    assert files("id = 150") == 0
    assert sorted(r["id"] for r in t.to_arrow(predicate="id < 3 OR s = 's200' AND id > 207").to_pylist()) == [
        0, 1, 2, 208, 209]


def test_delete_where_takes_the_whole_language(tmp_path: Path) -> None:
    t = _catalog(tmp_path).create_table("db.dv", "dt STRING, id BIGINT", partition_keys=["dt"],
                                        options={"bucket": "-1", "deletion-vectors.enabled": "true"})
    t.write_arrow(pa.table({"dt": ["a", "a", "b", "b", None], "id": pa.array([1, 2, 1, 2, 1], pa.int64())}))
    assert t.delete_where("dt = 'a' AND id = 1 OR dt = 'b' AND id = 2") is not None
    assert sorted(((r["dt"] or ""), r["id"]) for r in t.to_arrow().to_pylist()) == [("", 1), ("a", 2), ("b", 1)]
    with pytest.raises(InvalidInputError, match="needs a predicate"):
        t.delete_where(Predicate())
    with pytest.raises(InvalidInputError, match="'nope' is not a column"):
        t.delete_where("nope = 1 OR id = 1")


def test_literals_are_typed_by_the_table_and_unknown_columns_named(tmp_path: Path) -> None:
    t = _partitioned(tmp_path)
    assert _ids(t, [("id", ">=", "4"), ("dt", "in", ["d1", "d2"])]) == [("d1", 4), ("d2", 4)]
    with pytest.raises(InvalidInputError, match=r"'nope' is not a column \(columns: \['dt', 'id', 'v'\]\)"):
        t.new_scan(Or(("dt", "=", "d1"), ("nope", "=", 1))).plan()
