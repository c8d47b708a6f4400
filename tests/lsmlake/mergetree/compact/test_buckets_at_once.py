"""A table's buckets compact two at a time, on a local disk as on an object store: messages in bucket order, rows as
before, and when one bucket fails the files the others wrote are deleted."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

from lsmlake.catalog.filesystem import FileSystemCatalog
from lsmlake.table import compact


def _table(warehouse: Path | str, buckets: int = 4) -> Any:
    cat = FileSystemCatalog(str(warehouse))
    cat.create_database("db", True)
    t = cat.create_table("db.t", "id BIGINT NOT NULL, v BIGINT", primary_keys=["id"], options={"bucket": str(buckets)})
    for b in range(3):
        ids = np.arange(b, 4000, b + 1)
        t.write_arrow(pa.table({"id": pa.array(ids, pa.int64()), "v": pa.array(np.full(len(ids), b), pa.int64())}))
    return t


@pytest.mark.parametrize("store", ["local disk", "S3"])
def test_buckets_compact_on_two_threads_and_keep_their_order(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                             request: pytest.FixtureRequest, store: str) -> None:
    """On S3 too (it compacted one bucket after another): one bucket's requests overlap the other's work."""
    t = _table(tmp_path if store == "local disk" else request.getfixturevalue("s3_server").warehouse())
    want = {r["id"]: r["v"] for r in t.to_arrow().to_pylist()}
    threads = set()
    real = compact.compact_split

    def spy(*args: Any, **kwargs: Any) -> Any:
        threads.add(threading.current_thread().name)
        return real(*args, **kwargs)

    monkeypatch.setattr(compact, "compact_split", spy)
    _, messages = compact.compact_buckets(t, full=True)
    assert [m.bucket for m in messages] == sorted(m.bucket for m in messages) and len(messages) == 4
    assert len(threads) == compact.BUCKETS_AT_ONCE and all(n.startswith("lsmlake-compact") for n in threads)
    compact.commit_compaction(t, messages)
    assert {r["id"]: r["v"] for r in t.to_arrow().to_pylist()} == want
    assert all(len(s.files) == 1 for s in t.plan())


def test_a_failing_bucket_leaves_no_files_of_the_others(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    t = _table(tmp_path)
    before = {p.name for p in Path(t.path).rglob("data-*.parquet")}
    real = compact.compact_split

    def fail_one(table: Any, split: Any, *args: Any, **kwargs: Any) -> Any:
        if split.bucket == 2:
            raise RuntimeError("disk full")
        return real(table, split, *args, **kwargs)

    monkeypatch.setattr(compact, "compact_split", fail_one)
    with pytest.raises(RuntimeError, match="disk full"):
        compact.compact_buckets(t, full=True)
    assert {p.name for p in Path(t.path).rglob("data-*.parquet")} == before
