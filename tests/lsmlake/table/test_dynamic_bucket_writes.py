"""lsmlake writing dynamic-bucket tables (`bucket = -1`): the key index it keeps is the one pypaimon keeps.

Each assignment of new keys is committed (the buckets' new HASH index files, alone) before a file holds the
rows, so writers that start from the same snapshot still put a key in one bucket: the loser of the race
assigns again on the winner's index. Checked against pypaimon 2.1.0 both ways and against a model.
"""

from __future__ import annotations

import tempfile
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lsmlake.catalog.filesystem import FileSystemCatalog
from lsmlake.errors import InvalidInputError
from lsmlake.table.compact import compact_table
from lsmlake.table.dynamic_bucket import AssignOptions, CommittingAssigner, PartitionIndex
from lsmlake.table.schema_change import SetOption
from lsmlake.table.write import CommitMessage
from tests.support.dynamic_index import check_index
from tests.support.pypaimon_io import read, write

pypaimon = pytest.importorskip("pypaimon", reason="pypaimon (the test extra) is not installed")

SCHEMA = pa.schema([pa.field("id", pa.int64(), nullable=False), pa.field("v", pa.string()),
                    pa.field("pt", pa.string(), nullable=False)])


def _rows(ids: Any, v: str) -> pa.Table:
    return pa.Table.from_pylist([{"id": i, "v": v, "pt": f"p{i % 2}"} for i in ids], schema=SCHEMA)


def _pypaimon_rows(cat: Any) -> dict[tuple[str, int], str]:
    return {(r["pt"], r["id"]): r["v"] for r in read(cat.get_table("db.t")).to_pylist()}


def _lake_rows(wh: str) -> dict[tuple[str, int], str]:
    return {(r["pt"], r["id"]): r["v"] for r in FileSystemCatalog(wh).get_table("db.t").to_arrow().to_pylist()}


def _create(wh: str, **options: str) -> Any:
    cat = pypaimon.CatalogFactory.create({"warehouse": wh})
    cat.create_database("db", True)
    cat.create_table("db.t", pypaimon.Schema.from_pyarrow_schema(
        SCHEMA, partition_keys=["pt"], primary_keys=["pt", "id"],
        options={"bucket": "-1", "file.format": "parquet", **options}), False)
    return cat


@pytest.mark.parametrize("dv", [False, True])
def test_lsmlake_writes_pypaimon_reads_and_writes_on(tmp_path: Any, dv: bool) -> None:
    wh = str(tmp_path)
    cat = _create(wh, **{"dynamic-bucket.target-row-num": "4", "deletion-vectors.enabled": str(dv).lower()})
    model: dict[tuple[str, int], str] = {}
    for r in range(3):
        data = _rows(range(r * 5, r * 5 + 12), f"lake{r}")
        FileSystemCatalog(wh).get_table("db.t").write_arrow(data)  # a DV table is compacted after the write
        model.update({(x["pt"], x["id"]): x["v"] for x in data.to_pylist()})
    assert _pypaimon_rows(cat) == model
    before = check_index(wh)
    # 11 keys per partition at 4 per bucket: 3 buckets each, the buckets pypaimon would have made
    index = FileSystemCatalog(wh).get_table("db.t")
    counts = sorted(e.row_count for e in index.indexes.read(index.snapshots.latest().index_manifest)
                    if e.index_type == "HASH")
    assert counts == [3, 3, 4, 4, 4, 4]
    # pypaimon writes on with lsmlake's index: updates stay put, new keys fill the buckets with room
    data = _rows(range(8, 20), "py")
    write(cat.get_table("db.t"), data)
    model.update({(x["pt"], x["id"]): x["v"] for x in data.to_pylist()})
    compact_table(FileSystemCatalog(wh).get_table("db.t"))
    assert _pypaimon_rows(cat) == model == _lake_rows(wh)
    after = check_index(wh)
    assert all(after[k] == b for k, b in before.items())


def test_pypaimon_writes_lsmlake_writes_on(tmp_path: Any) -> None:
    wh = str(tmp_path)
    cat = _create(wh, **{"dynamic-bucket.target-row-num": "3"})
    data = _rows(range(10), "py")
    write(cat.get_table("db.t"), data)
    model = {(x["pt"], x["id"]): x["v"] for x in data.to_pylist()}
    before = check_index(wh)
    data = _rows(range(5, 16), "lake")
    FileSystemCatalog(wh).get_table("db.t").write_arrow(data)
    model.update({(x["pt"], x["id"]): x["v"] for x in data.to_pylist()})
    assert _pypaimon_rows(cat) == model == _lake_rows(wh)
    after = check_index(wh)
    assert all(after[k] == b for k, b in before.items())


def test_writers_that_race_for_the_same_new_keys_put_each_in_one_bucket(tmp_path: Any) -> None:
    """Writer A's assignment commit finds that writer B committed an assignment of the same keys first (to
    the same new bucket): A's commit conflicts and A assigns again on B's index."""
    wh = str(tmp_path)
    _create(wh, **{"dynamic-bucket.target-row-num": "100"})
    lake = FileSystemCatalog(wh)
    table_a, table_b = lake.get_table("db.t"), lake.get_table("db.t")
    b_assigner = table_b.index_committing_assigner("b")
    raced: list[int] = []

    def commit_a(messages: list[CommitMessage]) -> None:
        if not raced:  # B assigns the same keys between A's read of the index and A's commit
            raced.append(1)
            w = table_b.new_write(assigner=b_assigner)
            w.write(_rows(range(0, 20, 2), "b"))
            table_b.new_commit("b").commit(w.prepare_commit())
        table_a.new_commit("a").commit(messages, kind="APPEND")

    w = table_a.new_write(assigner=CommittingAssigner(table_a, commit_a))
    w.write(_rows(range(0, 20, 2), "a"))
    table_a.new_commit("a").commit(w.prepare_commit())
    assert raced
    placed = check_index(wh)
    assert len(placed) == 10
    assert _lake_rows(wh) == {(f"p{i % 2}", i): "a" for i in range(0, 20, 2)}
    # two assignment snapshots (B's; A's lost, so A found every key known), B's data, A's data
    kinds = [s.commit_kind for s in lake.get_table("db.t").snapshots.snapshots()]
    assert kinds == ["APPEND"] * 3


def test_an_overwrite_replaces_the_index_of_its_partitions(tmp_path: Any) -> None:
    wh = str(tmp_path)
    cat = _create(wh, **{"dynamic-bucket.target-row-num": "2"})
    table = FileSystemCatalog(wh).get_table("db.t")
    table.write_arrow(_rows(range(12), "old"))
    table.overwrite_arrow(_rows(range(0, 12, 2), "new"))  # partition p0 only
    expected = {("p0", i): "new" for i in range(0, 12, 2)} | {("p1", i): "old" for i in range(1, 12, 2)}
    assert _lake_rows(wh) == expected == _pypaimon_rows(cat)
    check_index(wh)
    t = FileSystemCatalog(wh).get_table("db.t")
    entries = t.indexes.read(t.snapshots.latest().index_manifest)
    # 3 buckets of p0 anew, 3 of p1 kept
    assert sorted(e.row_count for e in entries if e.index_type == "HASH") == [2, 2, 2, 2, 2, 2]
    write(cat.get_table("db.t"), _rows(range(12, 16), "py"))
    expected |= {(f"p{i % 2}", i): "py" for i in range(12, 16)}
    assert _pypaimon_rows(cat) == expected
    check_index(wh)


@pytest.mark.parametrize(("known", "target", "most", "new", "expected"), [
    # known keys stay; new ones fill the first bucket with room (index order), then the next
    ({0: [1, 2], 1: [3]}, 3, -1, [9, 2, 8, 7], [0, 0, 1, 1]),
    # no room: the lowest unused bucket, `target` keys each
    ({1: [1, 2]}, 2, -1, [5, 6, 7], [0, 0, 2]),
    # at most 2 buckets, both full: the rest spread over the existing buckets by hash
    ({0: [1], 1: [2]}, 1, 2, [10, 11], [0, 1]),
    # the same new key twice in one batch gets one bucket
    ({}, 1, -1, [4, 4, 5], [0, 0, 1]),
])
def test_assignment_rule(known: dict[int, list[int]], target: int, most: int, new: list[int],
                         expected: list[int]) -> None:
    index = PartitionIndex(b"", {b: np.array(sorted(h), np.int32) for b, h in known.items()})
    options = AssignOptions(target, 1 << 15 if most == -1 else most)
    buckets, gained = index.assign(np.array(new, np.int32), options)
    assert buckets.tolist() == expected
    assert {h for hs in gained.values() for h in hs.tolist()} == {h for h in new if
                                                                  all(h not in k for k in known.values())}


@pytest.mark.parametrize(("option", "value"), [("dynamic-bucket.target-row-num", "0"),
                                               ("dynamic-bucket.max-buckets", "0"),
                                               ("dynamic-bucket.max-buckets", "40000")])
def test_bad_assignment_options_are_refused_before_anything_is_written(tmp_path: Any, option: str,
                                                                       value: str) -> None:
    wh = str(tmp_path)
    _create(wh, **{option: value})
    with pytest.raises(InvalidInputError, match=option):
        FileSystemCatalog(wh).get_table("db.t").write_arrow(_rows(range(3), "x"))
    assert FileSystemCatalog(wh).get_table("db.t").snapshots.latest() is None


KEYS = st.integers(0, 40)
WRITE = st.lists(st.tuples(KEYS, st.sampled_from(["+I", "+U", "-D"]), st.sampled_from(["a", "b", "c"])),
                 min_size=1, max_size=30)
STEP = st.one_of(WRITE.map(lambda w: ("write", w)), WRITE.map(lambda w: ("pypaimon", w)),
                 st.just(("compact", None)), st.integers(1, 12).map(lambda n: ("target", n)),
                 WRITE.map(lambda w: ("overwrite", w)))


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(steps=st.lists(STEP, min_size=1, max_size=8), target=st.integers(1, 12), dv=st.booleans())
def test_random_writes_deletes_target_changes_and_compactions_match_the_model(
        steps: list[tuple[str, Any]], target: int, dv: bool) -> None:
    with tempfile.TemporaryDirectory() as wh:
        cat = _create(wh, **{"dynamic-bucket.target-row-num": str(target),
                             "deletion-vectors.enabled": str(dv).lower(), "write-only": "true"})
        model: dict[tuple[str, int], str] = {}
        for kind, arg in steps:
            table = FileSystemCatalog(wh).get_table("db.t")
            if kind == "compact":
                compact_table(table)
                continue
            if kind == "target":  # the bucket size changes: known keys stay, new keys follow the new size
                FileSystemCatalog(wh).alter_table("db.t", [SetOption("dynamic-bucket.target-row-num", str(arg))])
                continue
            rows = [{"id": k, "v": v, "pt": f"p{k % 2}"} for k, rk, v in arg if kind != "pypaimon" or rk != "-D"]
            if kind == "pypaimon":
                write(cat.get_table("db.t"), pa.Table.from_pylist(rows, schema=SCHEMA))
            else:
                data = pa.Table.from_pylist(rows, schema=SCHEMA).append_column(
                    "_row_kind", pa.array([rk for _, rk, _ in arg]))
                if kind == "overwrite":
                    for part in {r["pt"] for r in rows}:
                        model = {k: v for k, v in model.items() if k[0] != part}
                    table.overwrite_arrow(data)
                else:
                    table.write_arrow(data)
            for k, rk, v in arg:
                if kind == "pypaimon" and rk == "-D":
                    continue
                if rk == "-D":
                    model.pop((f"p{k % 2}", k), None)
                else:
                    model[(f"p{k % 2}", k)] = v
        compact_table(FileSystemCatalog(wh).get_table("db.t"))
        assert _lake_rows(wh) == model
        placed = check_index(wh)
        assert set(placed) == set(model)
        assert _pypaimon_rows(cat) == model


def _create_cross(wh: str, **options: str) -> Any:
    """A table whose primary key (`id`) leaves out its partition key (`pt`): a key moves between partitions."""
    cat = pypaimon.CatalogFactory.create({"warehouse": wh})
    cat.create_database("db", True)
    cat.create_table("db.t", pypaimon.Schema.from_pyarrow_schema(
        SCHEMA, partition_keys=["pt"], primary_keys=["id"],
        options={"bucket": "-1", "file.format": "parquet", **options}), False)
    return cat


def test_cross_partition_upsert_moves_a_key_and_pypaimon_reads_it_once(tmp_path: Any) -> None:
    wh = str(tmp_path)
    cat = _create_cross(wh, **{"dynamic-bucket.target-row-num": "3"})
    table = FileSystemCatalog(wh).get_table("db.t")
    table.write_arrow(pa.Table.from_pylist([{"id": i, "v": "a", "pt": "x"} for i in range(6)], schema=SCHEMA))
    table.write_arrow(pa.Table.from_pylist([{"id": i, "v": "b", "pt": "y"} for i in range(3, 9)], schema=SCHEMA))
    # in one batch: key 1 to y then on to z; key 4 back to x
    table.write_arrow(pa.Table.from_pylist([{"id": 1, "v": "c", "pt": "y"}, {"id": 1, "v": "d", "pt": "z"},
                                            {"id": 4, "v": "e", "pt": "x"}], schema=SCHEMA))
    expected = {0: ("a", "x"), 1: ("d", "z"), 2: ("a", "x"), 3: ("b", "y"), 4: ("e", "x"), 5: ("b", "y"),
                6: ("b", "y"), 7: ("b", "y"), 8: ("b", "y")}
    got = {r["id"]: (r["v"], r["pt"]) for r in read(cat.get_table("db.t")).to_pylist()}
    assert got == expected
    assert {r["id"]: (r["v"], r["pt"]) for r in table.to_arrow().to_pylist()} == expected
    assert set(check_index(wh)) == {(i,) for i in expected}
    # a delete takes the key out of whichever partition holds it
    table.write_arrow(pa.table({"id": pa.array([3], pa.int64()), "v": ["gone"], "pt": ["x"], "_row_kind": ["-D"]}))
    del expected[3]
    assert {r["id"]: (r["v"], r["pt"]) for r in FileSystemCatalog(wh).get_table("db.t").to_arrow().to_pylist()} \
        == expected


@pytest.mark.parametrize(("options", "words"), [({"merge-engine": "partial-update"}, "deduplicate only"),
                                                ({"ignore-delete": "true"}, "ignore-delete"),
                                                ({"sequence.field": "v"}, "sequence.field")])
def test_cross_partition_upsert_refuses_what_it_cannot_move(tmp_path: Any, options: dict[str, str],
                                                            words: str) -> None:
    wh = str(tmp_path)
    _create_cross(wh, **options)
    with pytest.raises(InvalidInputError, match=words):
        FileSystemCatalog(wh).get_table("db.t").write_arrow(_rows(range(3), "x"))
    assert FileSystemCatalog(wh).get_table("db.t").snapshots.latest() is None


def test_cross_partition_upsert_with_part_of_the_partition_in_the_key_is_refused(tmp_path: Any) -> None:
    """Keys (1, a) and (1, b) hash alike (the hash leaves partition columns out): a delete meant for one partition
    would hit the other key."""
    lake = FileSystemCatalog(str(tmp_path))
    lake.create_database("db")
    lake.create_table("db.t", "id BIGINT NOT NULL, a STRING NOT NULL, b STRING NOT NULL", partition_keys=["a", "b"],
                      primary_keys=["id", "a"], options={"bucket": "-1"})
    with pytest.raises(InvalidInputError, match="some of the partition keys"):
        lake.get_table("db.t").write_arrow(pa.table({"id": pa.array([1], pa.int64()), "a": ["x"], "b": ["y"]}))


def test_cross_partition_tables_refuse_an_overwrite(tmp_path: Any) -> None:
    """An overwrite replaces some partitions, but the keys it writes may live in others."""
    wh = str(tmp_path)
    _create_cross(wh)
    table = FileSystemCatalog(wh).get_table("db.t")
    table.write_arrow(_rows(range(4), "a"))
    with pytest.raises(InvalidInputError, match="overwrite"):
        table.overwrite_arrow(_rows(range(3), "x"))
    assert {r["v"] for r in FileSystemCatalog(wh).get_table("db.t").to_arrow().to_pylist()} == {"a"}


MOVE = st.lists(st.tuples(st.integers(0, 25), st.sampled_from(["+I", "+U", "-D"]), st.sampled_from("abc"),
                          st.sampled_from(["x", "y", "z"])), min_size=1, max_size=30)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(steps=st.lists(st.one_of(MOVE.map(lambda w: ("write", w)), st.just(("compact", None))), min_size=1,
                      max_size=8), target=st.integers(1, 8), dv=st.booleans())
def test_random_cross_partition_writes_match_the_model(steps: list[tuple[str, Any]], target: int, dv: bool) -> None:
    """Every key lives in one partition: the one its last write named (a delete removes it wherever it is)."""
    with tempfile.TemporaryDirectory() as wh:
        cat = _create_cross(wh, **{"dynamic-bucket.target-row-num": str(target),
                                   "deletion-vectors.enabled": str(dv).lower(), "write-only": "true"})
        model: dict[int, tuple[str, str]] = {}
        for kind, arg in steps:
            table = FileSystemCatalog(wh).get_table("db.t")
            if kind == "compact":
                compact_table(table)
                continue
            table.write_arrow(pa.table({"id": pa.array([k for k, _, _, _ in arg], pa.int64()),
                                        "v": [v for _, _, v, _ in arg], "pt": [p for _, _, _, p in arg],
                                        "_row_kind": [rk for _, rk, _, _ in arg]}))
            for k, rk, v, p in arg:
                if rk == "-D":
                    model.pop(k, None)
                else:
                    model[k] = (v, p)
        compact_table(FileSystemCatalog(wh).get_table("db.t"))
        lake = FileSystemCatalog(wh).get_table("db.t").to_arrow().to_pylist()
        assert sorted(r["id"] for r in lake) == sorted(model)  # no key twice
        assert {r["id"]: (r["v"], r["pt"]) for r in lake} == model
        assert set(check_index(wh)) == {(k,) for k in model}
        got = {r["id"]: (r["v"], r["pt"]) for r in read(cat.get_table("db.t")).to_pylist()}
        assert got == model
