"""Reading data files column task by column task on a pool equals reading each file whole, and both
equal the written rows without those in the deletion vector (a plain-Python model)."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pyroaring import BitMap

from lsmlake.catalog.filesystem import FileSystemCatalog
from lsmlake.format import data_file_read
from lsmlake.format.data_file_read import ROW_POSITION, DataFileRead, read_all
from lsmlake.format.data_file_writer import bucket_dir

COLUMNS = "id BIGINT, dt STRING, s STRING, l ARRAY<INT>, r ROW<a INT, b STRING>, d DOUBLE"

row = st.fixed_dictionaries({
    "id": st.integers(-2**63, 2**63 - 1),
    "s": st.one_of(st.none(), st.text(max_size=30)),
    "l": st.one_of(st.none(), st.lists(st.one_of(st.none(), st.integers(-2**31, 2**31 - 1)), max_size=4)),
    "r": st.one_of(st.none(), st.fixed_dictionaries({"a": st.one_of(st.none(), st.integers(-5, 5)),
                                                      "b": st.one_of(st.none(), st.text(max_size=5))})),
    "d": st.one_of(st.none(), st.floats(allow_nan=False)),
})


def files_of(tmp: Path, batches: list[list[dict[str, Any]]]) -> tuple[Any, list[str]]:
    cat = FileSystemCatalog(str(tmp / "wh"))
    cat.create_database("db", True)
    t = cat.create_table("db.t", COLUMNS, partition_keys=["dt"], options={"bucket": "-1"})
    for rows in batches:
        t.write_arrow(pa.Table.from_pylist([{**r, "dt": "p"} for r in rows], schema=t.schema.arrow_schema))
    (split,) = t.plan()
    d = bucket_dir(t.path, t.schema.partition_dir(split.partition_values), split.bucket)
    return t, [f"{d}/{f.file_name}" for f in sorted(split.files, key=lambda f: f.min_sequence_number)]


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(batches=st.lists(st.lists(row, min_size=1, max_size=40), min_size=1, max_size=3),
       deleted=st.lists(st.integers(0, 45), max_size=20),
       min_task=st.sampled_from([0, 64, 1 << 20]),
       positions=st.booleans(),
       data=st.data())
def test_pooled_read_equals_whole_read_and_model(tmp_path_factory: pytest.TempPathFactory,
                                                 batches: list[list[dict[str, Any]]], deleted: list[int],
                                                 min_task: int, positions: bool, data: st.DataObject) -> None:
    t, paths = files_of(tmp_path_factory.mktemp("dfr"), batches)
    names = data.draw(st.lists(st.sampled_from(t.schema.field_names), min_size=1, unique=True))
    dv = BitMap(deleted)

    def plan() -> list[DataFileRead]:
        return [DataFileRead(t.io, p, t.schema, names, [], dv, positions, constants={"dt": "p"}) for p in paths]

    old = data_file_read.MIN_TASK_BYTES
    data_file_read.MIN_TASK_BYTES = min_task
    try:
        reads = plan()
        for r in reads:  # every decoded column is in exactly one task
            decoded = [c for cols, _ in r.tasks() for c in cols]
            assert sorted(decoded) == sorted(r.decoded)
        with ThreadPoolExecutor(max_workers=3) as pool:
            pooled = read_all(reads, pool)
    finally:
        data_file_read.MIN_TASK_BYTES = old
    whole = [r.read() for r in plan()]
    for rows, got, also in zip(batches, pooled, whole, strict=True):
        assert got.equals(also)
        kept = [i for i in range(len(rows)) if i not in dv]
        want = [{c: ("p" if c == "dt" else rows[i][c]) for c in names} for i in kept]
        assert got.select(names).to_pylist() == want
        if positions:
            assert got.column(ROW_POSITION).to_pylist() == kept


def test_wide_columns_are_tasks_of_their_own_and_narrow_ones_are_packed(tmp_path: Path) -> None:
    n = 200_000
    path = str(tmp_path / "f.parquet")
    pq.write_table(pa.table({"wide": pa.array(range(n), pa.int64()), "a": pa.array([1] * n, pa.int8()),
                             "b": pa.array([True] * n)}), path, compression="none", use_dictionary=False)
    cat = FileSystemCatalog(str(tmp_path / "wh"))
    cat.create_database("db", True)
    t = cat.create_table("db.t", "wide BIGINT, a TINYINT, b BOOLEAN")
    r = DataFileRead(t.io, path, t.schema, ["wide", "a", "b"], [])
    tasks = r.tasks()
    assert tasks[0][0] == ["wide"] and tasks[0][1] >= 8 * n  # largest first
    assert sorted(c for cols, _ in tasks[1:] for c in cols) == ["a", "b"] and len(tasks) == 2


def test_a_split_of_many_files_opens_a_bounded_number_at_once(tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    from lsmlake.table import read as table_read

    cat = FileSystemCatalog(str(tmp_path / "wh"))
    cat.create_database("db", True)
    t = cat.create_table("db.t", "id BIGINT NOT NULL, v STRING", primary_keys=["id"], options={"bucket": "1"})
    for b in range(7):  # seven level-0 files with overlapping keys: one split, merged on read
        t.write_arrow(pa.table({"id": pa.array(range(b, b + 10), pa.int64()), "v": [f"b{b}"] * 10}))
    open_now, most = 0, 0
    real_init, real_close = DataFileRead.__init__, DataFileRead.close

    def counting_init(self: DataFileRead, *args: Any, **kwargs: Any) -> None:
        nonlocal open_now, most
        real_init(self, *args, **kwargs)
        open_now += 1
        most = max(most, open_now)

    def counting_close(self: DataFileRead) -> None:
        nonlocal open_now
        real_close(self)
        open_now -= 1

    monkeypatch.setattr(DataFileRead, "__init__", counting_init)
    monkeypatch.setattr(DataFileRead, "close", counting_close)
    monkeypatch.setattr(table_read, "FILES_AT_ONCE", 3)
    rows = sorted(t.to_arrow().to_pylist(), key=lambda r: r["id"])
    # the newest write of each key wins: key k was last written by batch min(k, 6)
    assert rows == [{"id": k, "v": f"b{min(k, 6)}"} for k in range(16)]
    assert most == 3 and open_now == 0


@settings(max_examples=200, deadline=None)
@given(value=st.one_of(st.none(), st.text(max_size=12), st.binary(max_size=12), st.integers(-2**31, 2**31 - 1)),
       n=st.integers(0, 3000))
def test_constant_columns_equal_arrow_repeat(value: Any, n: int) -> None:
    typ = pa.string() if isinstance(value, str) else pa.binary() if isinstance(value, bytes) else pa.int32()
    got = data_file_read.constant_array(value, typ, n)
    got.validate(full=True)
    assert got.type == typ and got.equals(pa.repeat(pa.scalar(value, typ), n))


def multi_split_table(tmp: Path) -> tuple[Any, list[dict[str, Any]]]:
    cat = FileSystemCatalog(str(tmp / "wh"))
    cat.create_database("db", True)
    t = cat.create_table("db.t", "id BIGINT NOT NULL, dt STRING NOT NULL, v STRING", partition_keys=["dt"],
                         primary_keys=["id", "dt"], options={"bucket": "2"})
    model: dict[tuple[int, str], str] = {}
    for b in range(3):  # overlapping writes: merged on read
        batch = [{"id": i, "dt": f"d{i % 3}", "v": f"b{b}-{i}"} for i in range(b * 50, b * 50 + 120)]
        t.write_arrow(pa.Table.from_pylist(batch, schema=t.schema.arrow_schema))
        model.update({(r["id"], r["dt"]): r["v"] for r in batch})
    want = sorted(({"id": k[0], "dt": k[1], "v": v} for k, v in model.items()), key=lambda r: r["id"])
    assert len(t.plan()) == 6  # three partitions, two buckets
    return t, want


def test_concurrent_reads_share_the_decode_pool(tmp_path: Path) -> None:
    t, want = multi_split_table(tmp_path)
    from concurrent.futures import ThreadPoolExecutor as Threads

    with Threads(max_workers=4) as readers:
        results = list(readers.map(lambda _: sorted(t.to_arrow().to_pylist(), key=lambda r: r["id"]), range(12)))
    assert all(r == want for r in results)


def _read_in_child(path: str, out: Any) -> None:
    from lsmlake.catalog.filesystem import FileSystemCatalog as Catalog

    t = Catalog(path).get_table("db.t")
    out.put(sorted(t.to_arrow().to_pylist(), key=lambda r: r["id"]))


def test_a_forked_child_reads_on_a_pool_of_its_own(tmp_path: Path) -> None:
    """The parent's pool threads do not exist in a forked child (as in Spark's forked Python
    workers): a child that used the parent's pool object would wait forever for its tasks."""
    import multiprocessing

    t, want = multi_split_table(tmp_path)
    assert sorted(t.to_arrow().to_pylist(), key=lambda r: r["id"]) == want  # the parent's pool is running
    ctx = multiprocessing.get_context("fork")
    out = ctx.Queue()
    child = ctx.Process(target=_read_in_child, args=(str(tmp_path / "wh"), out))
    child.start()
    try:
        got = out.get(timeout=60)
    finally:
        child.join(timeout=10)
        if child.is_alive():
            child.kill()
    assert got == want and child.exitcode == 0
