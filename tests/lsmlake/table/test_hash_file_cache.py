"""`HashFileCache`: least recently used tables out past a count or a size in bytes, dropped tables forgotten."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from lsmlake.catalog.filesystem import FileSystemCatalog
from lsmlake.format.binary_row import EMPTY_ROW
from lsmlake.table.dynamic_bucket import CommittingAssigner, HashFiles
from lsmlake.table.hash_file_cache import HashFileCache
from lsmlake.table.write import CommitMessage


class Measured(HashFiles):
    """HashFiles of a given size, for the bounds (the cache only measures them)."""

    def __init__(self, nbytes: int) -> None:  # no index store: never read
        self.size = nbytes

    def nbytes(self) -> int:
        return self.size


def _use(cache: HashFileCache, table_id: str, nbytes: int = 0, uuid: str = "u") -> HashFiles:
    with cache.use(table_id, uuid, lambda: Measured(nbytes)) as files:
        return files


def test_the_least_recently_used_table_goes_past_the_table_count() -> None:
    cache = HashFileCache(max_tables=2, max_bytes=1 << 30)
    a = _use(cache, "db.a")
    _use(cache, "db.b")
    assert _use(cache, "db.a") is a  # held, and now the most recently used
    _use(cache, "db.c")
    assert "db.b" not in cache and "db.a" in cache and "db.c" in cache and len(cache) == 2


def test_tables_go_least_recently_used_first_past_the_bytes() -> None:
    cache = HashFileCache(max_tables=10, max_bytes=100)
    _use(cache, "db.a", 40)
    _use(cache, "db.b", 40)
    _use(cache, "db.a", 40)  # a is the most recently used
    assert cache.nbytes == 80
    _use(cache, "db.c", 30)  # 110 > 100: b goes
    assert "db.b" not in cache and cache.nbytes == 70 and len(cache) == 2


def test_a_table_grown_past_the_bytes_while_in_use_evicts_the_others_but_stays() -> None:
    cache = HashFileCache(max_tables=10, max_bytes=100)
    _use(cache, "db.a", 30)
    _use(cache, "db.b", 30)
    with cache.use("db.big", "u", lambda: Measured(0)) as files:
        assert isinstance(files, Measured)
        files.size = 500  # the assignment read the table's index files
    # its assignment needed its whole index in memory anyway: it stays for the next one, the others go
    assert list(cache._entries) == ["db.big"] and cache.nbytes == 500
    _use(cache, "db.a", 30)  # the big table is now the least recently used one over the bound
    assert list(cache._entries) == ["db.a"]


def test_a_dropped_table_is_forgotten_and_a_new_table_of_its_name_starts_afresh() -> None:
    cache = HashFileCache()
    old = _use(cache, "db.t", 10, uuid="first")
    assert _use(cache, "db.t", uuid="first") is old
    assert _use(cache, "db.t", uuid="second") is not old  # dropped and created again on another catalog replica
    assert len(cache) == 1
    cache.forget("db.t")
    cache.forget("db.never")  # nothing held: nothing to do
    assert "db.t" not in cache and len(cache) == 0 and cache.nbytes == 0


def test_bounds_are_checked() -> None:
    with pytest.raises(ValueError, match="max_tables"):
        HashFileCache(max_tables=0)
    with pytest.raises(ValueError, match="max_bytes"):
        HashFileCache(max_bytes=-1)


def test_hash_files_measure_the_hashes_they_hold(tmp_path: Path) -> None:
    lake = FileSystemCatalog(str(tmp_path))
    lake.create_database("db")
    table = lake.create_table("db.t", "id BIGINT NOT NULL, v STRING", primary_keys=["id"],
                              options={"bucket": "-1", "dynamic-bucket.target-row-num": "600"})

    def commit(messages: list[CommitMessage]) -> None:
        table.new_commit("assigner").commit(messages, kind="APPEND")

    files = HashFiles(table.indexes)

    def assign(hashes: np.ndarray) -> int:
        CommittingAssigner(table, commit, files=files).assign([(EMPTY_ROW, hashes.astype(np.int32))])
        return files.nbytes()

    assert assign(np.arange(1000)) == 0  # the index was empty; the files written are read by the next assignment
    # 1,000 hashes of 4 bytes read from the two buckets' files, and the partition index's sorted copy of them with
    # their buckets (4 + 4 bytes each); the arrays the index shares with the files read count once
    assert assign(np.arange(1000, 1010)) == 1000 * (4 + 8)
    assert assign(np.arange(5)) == 1010 * (4 + 8)  # the replaced file of bucket 1 is let go
