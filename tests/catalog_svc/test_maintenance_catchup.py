"""The catalog's scheduled expiration catches a table up in one pass (issue 19).

One run expires at most `snapshot.expire.limit` snapshots; a table written once a second gains 300
snapshots between two passes 300 s apart, so a pass that ran once would fall further behind forever.
"""

from __future__ import annotations

import logging
import os
from contextlib import contextmanager

import pyarrow as pa
import pytest

from catalog_svc.maintenance import Maintenance
from catalog_svc.metrics import CatalogMetrics
from lsmlake.catalog.filesystem import FileSystemCatalog
from lsmlake.catalog.operations import CatalogOperations
from lsmlake.metastore import open_store
from lsmlake.rpc.events import snapshot_events

SNAPSHOTS = 400
LIMIT = 50
RETAIN = 10


@pytest.fixture
def no_fsync(monkeypatch):
    """Building hundreds of snapshots is a matter of seconds without the durability syncs."""
    monkeypatch.setattr(os, "fsync", lambda fd: None)


def _table_with_snapshots(cat: FileSystemCatalog, ident: str, n: int):
    t = cat.create_table(ident, "k BIGINT NOT NULL, v BIGINT", primary_keys=["k"], options={
        "bucket": "1", "snapshot.expire.limit": str(LIMIT), "snapshot.num-retained.min": str(RETAIN),
        "snapshot.time-retained": "0 ms"})
    for i in range(n):
        t.overwrite_arrow(pa.table({"k": [i], "v": [i]}))  # each replaces the last: every expiry frees a file
    return t


def _maintenance(wh: str, cat: FileSystemCatalog):
    store = open_store(f"sqlite:///{wh}/_meta.sqlite")
    locks: list[str] = []
    real_lock = store.commit_lock

    @contextmanager
    def counting_lock(tid: str):
        locks.append(tid)
        with real_lock(tid) as tx:
            yield tx

    store.commit_lock = counting_lock
    operations = CatalogOperations(cat, store, snapshot_events)
    return Maintenance(operations, CatalogMetrics(), expire_interval_s=0, orphan_interval_s=0), locks


def test_one_pass_catches_up_a_table_far_behind(tmp_path, no_fsync) -> None:
    wh = str(tmp_path / "wh")
    cat = FileSystemCatalog(wh)
    cat.create_database("db")
    t = _table_with_snapshots(cat, "db.t", SNAPSHOTS)
    m, locks = _maintenance(str(tmp_path), cat)
    assert m.expire_once() == SNAPSHOTS - RETAIN
    assert t.snapshots.ids() == list(range(SNAPSHOTS - RETAIN + 1, SNAPSHOTS + 1))
    assert m.metrics.expired._value.get() == SNAPSHOTS - RETAIN
    # Batches of at most the limit, each under its own lock (commits run between them): 7 full, 1 short.
    assert locks == ["db.t"] * 8
    data = [f for d, _, fs in os.walk(t.path) for f in fs if f.endswith(".parquet")]
    assert len(data) == RETAIN  # the files of expired snapshots are gone too
    assert t.to_arrow().to_pylist() == [{"k": SNAPSHOTS - 1, "v": SNAPSHOTS - 1}]
    assert m.expire_once() == 0  # caught up: the next pass has nothing to do


def test_a_failing_table_does_not_stop_the_others(tmp_path, no_fsync, caplog) -> None:
    """Per-table failure isolation survives the batching: a table whose consumer file is unreadable is
    logged and left alone, the other table is still caught up."""
    wh = str(tmp_path / "wh")
    cat = FileSystemCatalog(wh)
    cat.create_database("db")
    bad = _table_with_snapshots(cat, "db.bad", 20)
    os.makedirs(os.path.join(bad.path, "consumer"))
    with open(os.path.join(bad.path, "consumer", "consumer-x"), "w") as f:
        f.write("{not json")
    good = _table_with_snapshots(cat, "db.good", 2 * LIMIT + 30)
    m, _ = _maintenance(str(tmp_path), cat)
    with caplog.at_level(logging.ERROR, logger="catalog_svc.maintenance"):
        assert m.expire_once() == 2 * LIMIT + 30 - RETAIN
    assert bad.snapshots.ids() == list(range(1, 21))
    assert len(good.snapshots.ids()) == RETAIN
    assert any("db.bad" in r.getMessage() and "consumer-x" in r.exc_text for r in caplog.records)
