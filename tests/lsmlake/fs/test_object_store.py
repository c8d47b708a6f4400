"""The table store on a non-local `pyarrow.fs` filesystem (pyarrow's in-memory mock object store)."""

from __future__ import annotations

import threading

import pyarrow as pa
from pyarrow.fs import _MockFileSystem

from lsmlake.catalog.expire import expire_snapshots
from lsmlake.catalog.filesystem import FileSystemCatalog


def test_write_read_expire_on_an_object_store() -> None:
    fs = _MockFileSystem()
    cat = FileSystemCatalog("bucket/warehouse", filesystem=fs)
    assert not cat.io.local
    cat.create_database("db")
    t = cat.create_table("db.t", "k BIGINT NOT NULL, p STRING NOT NULL, v STRING", partition_keys=["p"],
                         primary_keys=["k", "p"], options={"bucket": "2"})
    t.write_arrow(pa.table({"k": [1, 2, 3], "p": ["x", "y", "x"], "v": ["a", "b", "c"]}))
    t.write_arrow(pa.table({"k": [1, 3], "p": ["x", "x"], "v": ["a2", None], "_row_kind": ["+U", "-D"]}))
    rows = sorted((r["k"], r["p"], r["v"]) for r in cat.get_table("db.t").to_arrow().to_pylist())
    assert rows == [(1, "x", "a2"), (2, "y", "b")]
    assert expire_snapshots(t, retain_min=1, time_retained_ms=0).expired_snapshots == [1]
    rows = sorted((r["k"], r["p"], r["v"]) for r in cat.get_table("db.t").to_arrow().to_pylist())
    assert rows == [(1, "x", "a2"), (2, "y", "b")]


def test_racing_committers_on_an_object_store_never_overwrite_a_snapshot() -> None:
    fs = _MockFileSystem()
    cat = FileSystemCatalog("bucket/wh", filesystem=fs)
    cat.create_database("db")
    cat.create_table("db.t", "k BIGINT NOT NULL, w INT", options={"commit.max-retries": "500"})
    errors: list[BaseException] = []

    def writer(w: int) -> None:
        try:
            t = cat.get_table("db.t")
            for i in range(20):
                t.write_arrow(pa.table({"k": [w * 100 + i], "w": pa.array([w], pa.int32())}))
        except BaseException as e:  # surfaced below
            errors.append(e)

    threads = [threading.Thread(target=writer, args=(w,)) for w in range(3)]
    for th in threads:
        th.start()
    for th in threads:
        th.join(timeout=120)
    assert not errors
    t = cat.get_table("db.t")
    assert t.snapshots.ids() == list(range(1, 61))
    assert sorted(r["k"] for r in t.to_arrow().to_pylist()) == sorted(w * 100 + i for w in range(3) for i in range(20))
