"""Postpone-bucket primary-key tables (`bucket = -2`) against pypaimon 2.1.0 and a plain-Python model.

A table pypaimon writes reads empty (in pypaimon and in lsmlake) until lsmlake's compaction places the rows;
then both read exactly the model's rows. The same with lsmlake writing. The count rules of Paimon are checked
one by one, and a property test interleaves random writes (updates and deletes) and placements.
"""

from __future__ import annotations

import os
import tempfile
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from lsmlake.catalog.filesystem import FileSystemCatalog
from lsmlake.errors import InvalidInputError
from lsmlake.format import options as opts
from lsmlake.format.snapshot import APPEND, COMPACT, OVERWRITE
from lsmlake.table.compact import compact_table
from lsmlake.table.postpone import bucket_count, pending, rescale
from tests.support.pypaimon_io import read, write

pypaimon = pytest.importorskip("pypaimon", reason="pypaimon (the test extra) is not installed")

SCHEMA = pa.schema([pa.field("id", pa.int64(), nullable=False), pa.field("v", pa.string()),
                    pa.field("pt", pa.string(), nullable=False)])


def _pypaimon_table(wh: str, options: dict[str, str]) -> Any:
    cat = pypaimon.CatalogFactory.create({"warehouse": wh})
    cat.create_database("db", True)
    cat.create_table("db.t", pypaimon.Schema.from_pyarrow_schema(
        SCHEMA, partition_keys=["pt"], primary_keys=["pt", "id"],
        options={"bucket": "-2", "file.format": "parquet", **options}), False)
    return cat


def _pypaimon_write(cat: Any, rows: list[dict[str, Any]]) -> None:
    write(cat.get_table("db.t"), pa.Table.from_pylist(rows, schema=SCHEMA))


def _pypaimon_read(cat: Any) -> list[tuple[str, int, str]]:
    return sorted((r["pt"], r["id"], r["v"]) for r in read(cat.get_table("db.t")).to_pylist())


def _lake_read(wh: str) -> list[tuple[str, int, str]]:
    return sorted((r["pt"], r["id"], r["v"]) for r in FileSystemCatalog(wh).get_table("db.t").to_arrow().to_pylist())


def _buckets_of(wh: str) -> dict[str, set[int]]:
    """The total bucket count of each partition's real buckets."""
    table = FileSystemCatalog(wh).get_table("db.t")
    out: dict[str, set[int]] = {}
    for s in table.plan():
        out.setdefault(str(s.partition_values[0]), set()).add(s.total_buckets)
    return out


def test_rows_pypaimon_postpones_are_placed_by_lsmlake_and_read_by_both(tmp_path: Any) -> None:
    wh = str(tmp_path)
    cat = _pypaimon_table(wh, {"postpone.default-bucket-num": "3"})
    model: dict[tuple[str, int], str] = {}
    for r in range(3):
        rows = [{"id": i, "v": f"r{r}", "pt": f"p{i % 2}"} for i in range(r * 3, r * 3 + 6)]
        _pypaimon_write(cat, rows)
        model.update({(x["pt"], x["id"]): x["v"] for x in rows})
    assert _pypaimon_read(cat) == [] and _lake_read(wh) == []  # postponed: nobody sees them yet
    table = FileSystemCatalog(wh).get_table("db.t")
    assert sum(len(fs) for fs in pending(table).values()) == 6  # 3 commits x 2 partitions
    compact_table(table)
    expected = sorted((k[0], k[1], v) for k, v in model.items())
    assert _pypaimon_read(cat) == expected
    assert _lake_read(wh) == expected
    snaps = FileSystemCatalog(wh).get_table("db.t").snapshots.snapshots()
    assert [s.commit_kind for s in snaps] == [APPEND] * 3 + [COMPACT]  # placed in one commit: all or nothing
    assert _buckets_of(wh) == {"p0": {3}, "p1": {3}}
    assert pending(FileSystemCatalog(wh).get_table("db.t")) == {}
    # later rows of a partition keep its count, even when the options would now choose another
    _pypaimon_write(cat, [{"id": 0, "v": "late", "pt": "p0"}, {"id": 100, "v": "late", "pt": "p2"}])
    model.update({("p0", 0): "late", ("p2", 100): "late"})
    t = FileSystemCatalog(wh).get_table("db.t")
    assert _lake_read(wh) == expected  # the new rows wait again
    compact_table(t)
    assert _pypaimon_read(cat) == sorted((k[0], k[1], v) for k, v in model.items())
    assert _buckets_of(wh) == {"p0": {3}, "p1": {3}, "p2": {3}}


def test_rows_lsmlake_postpones_are_read_by_pypaimon_after_placement(tmp_path: Any) -> None:
    wh = str(tmp_path)
    lake = FileSystemCatalog(wh)
    lake.create_database("db")
    table = lake.create_table("db.t", "id BIGINT NOT NULL, v STRING, pt STRING NOT NULL", partition_keys=["pt"],
                              primary_keys=["pt", "id"],
                              options={"bucket": "-2", "postpone.target-row-num-per-bucket": "4"})
    w = table.new_write()
    w.write(pa.table({"id": pa.array([1, 2, 3, 1, 5, 6, 7, 8, 9], pa.int64()),
                      "v": ["a", "b", "c", "d", "e", "f", "g", "h", "i"], "pt": ["x"] * 9,
                      "_row_kind": ["+I", "+I", "+I", "+U", "+I", "+I", "+I", "+I", "-D"]}))
    table.new_commit().commit(w.prepare_commit())
    assert _lake_read(wh) == []
    files = [f for fs in pending(lake.get_table("db.t")).values() for f in fs]
    assert len(files) == 1 and files[0].level == 0
    assert table.io.exists(f"{table.path}/pt=x/bucket-postpone/{files[0].file_name}")
    compact_table(lake.get_table("db.t"))
    expected = [("x", 1, "d"), ("x", 2, "b"), ("x", 3, "c"), ("x", 5, "e"), ("x", 6, "f"), ("x", 7, "g"),
                ("x", 8, "h")]
    assert _lake_read(wh) == expected
    cat = pypaimon.CatalogFactory.create({"warehouse": wh})
    assert _pypaimon_read(cat) == expected
    # the postpone file holds 8 rows (lsmlake's writer merged key 1's two rows; the -D stays): 4 per bucket, 2
    assert files[0].row_count == 8 and _buckets_of(wh) == {"x": {2}}


@pytest.mark.parametrize(("options", "known", "rows", "size", "expected"), [
    ({}, 7, 10**9, 10**12, 7),  # a partition keeps the count it has
    ({"postpone.default-bucket-num": "5"}, None, 10**9, 10**12, 5),  # else the default count, exactly
    ({"postpone.default-bucket-num": "5", "postpone.target-row-num-per-bucket": "10"}, None, 1000, 0, 5),
    ({"postpone.target-row-num-per-bucket": "10"}, None, 95, 10**12, 10),  # else one bucket per target rows
    ({"postpone.target-row-num-per-bucket": "10"}, None, 0, 0, 1),  # at least one
    ({}, None, 10**9, (1 << 30) * 3 + 1, 4),  # else one per 1 GiB of postpone files (the default size)
    ({"postpone.target-size-per-bucket": "1 mb"}, None, 1, 5 << 20, 5),
    ({}, None, 10, 100, 1),
])
def test_bucket_count_rules(options: dict[str, str], known: int | None, rows: int, size: int, expected: int) -> None:
    assert bucket_count(opts.TableOptions(options), known, rows, size) == expected


@pytest.mark.parametrize("option", ["postpone.default-bucket-num", "postpone.target-row-num-per-bucket",
                                    "postpone.target-size-per-bucket"])
def test_a_count_option_that_is_not_positive_is_refused(option: str) -> None:
    with pytest.raises(InvalidInputError, match=option):
        bucket_count(opts.TableOptions({option: "0"}), None, 10, 10)


KEYS = st.integers(0, 30)
WRITE = st.lists(st.tuples(KEYS, st.sampled_from(["+I", "+U", "-D"]), st.sampled_from(["a", "b", "c"])),
                 min_size=1, max_size=25)
STEP = st.one_of(WRITE.map(lambda w: ("write", w)), st.just(("place", None)),
                 st.integers(1, 6).map(lambda n: ("rescale", n)))


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(steps=st.lists(STEP, min_size=1, max_size=8), per_bucket=st.integers(1, 20), dv=st.booleans())
# a rescale of buckets that have deletion vectors: the rescale deleted their files but not their vectors, and its
# commit was refused as planned against an index it had not read (found by this test, then kept)
@example(steps=[("write", [(0, "+I", "a"), (3, "+I", "a")]), ("place", None), ("write", [(0, "+I", "a")]),
                ("place", None), ("rescale", 1)], per_bucket=1, dv=True)
def test_random_writes_placements_and_rescales_match_the_model(steps: list[tuple[str, Any]], per_bucket: int,
                                                                dv: bool) -> None:
    with tempfile.TemporaryDirectory() as wh:
        lake = FileSystemCatalog(wh)
        lake.create_database("db")
        lake.create_table("db.t", "id BIGINT NOT NULL, v STRING", primary_keys=["id"],
                          options={"bucket": "-2", "postpone.target-row-num-per-bucket": str(per_bucket),
                                   "deletion-vectors.enabled": str(dv).lower()})
        count: int | None = None  # the partition's bucket count once it has real buckets
        model: dict[int, str] = {}  # every row written so far, merged
        visible: dict[int, str] = {}  # what readers see: the model as of the last placement
        for kind, arg in steps:
            table = lake.get_table("db.t")
            if kind == "write":
                w = table.new_write()
                w.write(pa.table({"id": pa.array([k for k, _, _ in arg], pa.int64()), "v": [v for _, _, v in arg],
                                  "_row_kind": [rk for _, rk, _ in arg]}))
                table.new_commit().commit(w.prepare_commit())
                for k, rk, v in arg:
                    if rk == "-D":
                        model.pop(k, None)
                    else:
                        model[k] = v
            elif kind == "place":
                compact_table(table)
                visible = dict(model)
                count = count or next(iter({s.total_buckets for s in lake.get_table("db.t").plan()}), None)
            else:  # rescale: the rows stay what they were, in `arg` buckets, in one OVERWRITE snapshot
                messages = rescale(table, arg)
                if messages:
                    table.new_commit().commit(messages, kind=OVERWRITE)
                    # a partition's bucket count lives only in its files, as in Paimon: rescaling an empty one
                    # leaves no count, and the next placement picks one afresh
                    count = arg if visible else None
            got = {r["id"]: r["v"] for r in lake.get_table("db.t").to_arrow().to_pylist()}
            assert got == visible
            counts = {s.total_buckets for s in lake.get_table("db.t").plan()}
            assert counts == ({count} if count is not None and visible else counts), (counts, count)
        compact_table(lake.get_table("db.t"))
        got = {r["id"]: r["v"] for r in lake.get_table("db.t").to_arrow().to_pylist()}
        assert got == model
        counts = {s.total_buckets for s in lake.get_table("db.t").plan()}
        assert len(counts) <= 1  # one count per partition


def test_postpone_files_pypaimon_wrote_in_avro_are_refused_with_the_reason(tmp_path: Any) -> None:
    wh = str(tmp_path)
    cat = pypaimon.CatalogFactory.create({"warehouse": wh})
    cat.create_database("db", True)
    cat.create_table("db.t", pypaimon.Schema.from_pyarrow_schema(
        SCHEMA, partition_keys=["pt"], primary_keys=["pt", "id"], options={"bucket": "-2"}), False)
    _pypaimon_write(cat, [{"id": 1, "v": "a", "pt": "x"}])  # no file.format: pypaimon writes Avro
    table = FileSystemCatalog(wh).get_table("db.t")
    with pytest.raises(InvalidInputError, match="not Parquet"):
        compact_table(table)
    assert FileSystemCatalog(wh).get_table("db.t").snapshots.latest_id() == 1  # nothing committed


def test_a_placement_task_of_the_compactor_cleans_up_after_a_failure_and_then_lands(
        tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """The compactor's task for bucket -2 (what a Spark worker runs): a failure after files were written leaves no
    file of its run in any bucket; a second run returns every bucket's changes, which commit as one placement."""
    from lsmlake.spark.compaction_job import BucketTask, run_bucket_task, task_prefix
    from lsmlake.table import write as write_module
    from lsmlake.table.compact import commit_compaction

    wh = str(tmp_path)
    lake = FileSystemCatalog(wh)
    lake.create_database("db")
    table = lake.create_table("db.t", "id BIGINT NOT NULL, v STRING", primary_keys=["id"],
                              options={"bucket": "-2", "postpone.default-bucket-num": "3"})
    w = table.new_write()
    w.write(pa.table({"id": pa.array(range(60), pa.int64()), "v": ["a"] * 60}))
    table.new_commit().commit(w.prepare_commit())
    partition, files = next(iter(pending(table).items()))
    task = BucketTask("db.t", 1, partition, -2, tuple(f.file_name for f in files), 0, False, task_prefix())

    def fail(self: Any) -> Any:
        raise OSError("disk gone while placing")

    with monkeypatch.context() as m:
        m.setattr(write_module.TableWrite, "prepare_commit", fail)
        with pytest.raises(OSError, match="disk gone"):
            run_bucket_task(wh, task)
    left = [f for _, _, fs in os.walk(table.path) for f in fs if f.startswith(task.file_prefix)]
    assert left == []  # the failed run's files are gone from every bucket it wrote
    outcome = run_bucket_task(wh, task)
    messages = outcome.messages()
    assert sorted(m.bucket for m in messages) == [-2, 0, 1, 2]
    commit_compaction(lake.get_table("db.t"), messages)
    got = {r["id"]: r["v"] for r in lake.get_table("db.t").to_arrow().to_pylist()}
    assert got == {i: "a" for i in range(60)} and pending(lake.get_table("db.t")) == {}


def test_a_compaction_of_one_partition_places_that_partition_only(tmp_path: Any) -> None:
    wh = str(tmp_path)
    cat = _pypaimon_table(wh, {"postpone.default-bucket-num": "2"})
    _pypaimon_write(cat, [{"id": i, "v": "a", "pt": f"p{i % 2}"} for i in range(10)])
    compact_table(FileSystemCatalog(wh).get_table("db.t"), partition={"pt": "p1"})
    assert {k[0] for k in _pypaimon_read(cat)} == {"p1"} and len(_pypaimon_read(cat)) == 5
    left = pending(FileSystemCatalog(wh).get_table("db.t"))
    assert [FileSystemCatalog(wh).get_table("db.t").partition_values(p) for p in left] == [["p0"]]
