"""The writer's group commit when its own level-0 files cannot be written (in process, real catalog server)."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pyarrow as pa
import pytest

from lsmlake.catalog.filesystem import FileSystemCatalog
from lsmlake.errors import StorageError
from lsmlake.rpc.catalog_client import CatalogClient
from tests.support.fault_fs import installed
from tests.support.local_server import local_server
from writer_svc.metrics import WriterMetrics
from writer_svc.table_ingest import TableIngest

SPEC = "on,latency-ms=0"  # a spec of its own: this module gets its own injector


def _rows(*ids: int) -> pa.Table:
    return pa.table({"id": pa.array(ids, pa.int64()), "v": [f"v{i}" for i in ids]})


def _ids(warehouse: Path) -> list[int]:
    return sorted(r["id"] for r in FileSystemCatalog(str(warehouse)).get_table("db.t").to_arrow().to_pylist())


@pytest.fixture
def ingest(tmp_path: Path):
    with installed(SPEC) as injector:
        injector.arm("")
        with local_server(str(tmp_path)) as cat:
            # a buffer that is full at every write: each write flushes inside `write`
            cat.create_table("db", "t", [("id", "BIGINT NOT NULL"), ("v", "STRING")], ["id"],
                             {"bucket": "1", "write-buffer-size": "1 b", "write-buffer-spillable": "false"})
            table = FileSystemCatalog(str(tmp_path)).get_table("db.t")
            client = CatalogClient(f"127.0.0.1:{cat.server.port}")
            ingest = TableIngest(table, client, "u1", WriterMetrics(), str(tmp_path / "spill"))
            try:
                yield ingest, injector
            finally:
                injector.arm("")
                ingest.close()
                client.close()


def test_a_failed_flush_keeps_the_group_refuses_new_writes_and_commits_once_space_is_back(ingest, tmp_path) -> None:
    ingest, injector = ingest
    deadline = time.monotonic() + 30
    first = ingest.write(_rows(1, 2), deadline)
    injector.arm("enospc-after-bytes=0")
    second = ingest.write(_rows(3), deadline)  # its flush fails: the rows stay, for the group commit to retry
    assert second is first
    with pytest.raises(StorageError, match="takes no new rows.*Nothing was written"):
        ingest.write(_rows(4), deadline)
    committed: list[int | None] = []
    t = threading.Thread(target=lambda: committed.append(ingest.commit()))
    t.start()
    time.sleep(1.0)  # the commit keeps retrying the flush while the disk is full
    assert t.is_alive() and not first.done.is_set()
    injector.arm("")
    t.join(30)
    assert first.wait(5) == committed[0]
    assert _ids(tmp_path) == [1, 2, 3]
    later = ingest.write(_rows(5), deadline)  # writes are taken again
    ingest.commit()
    assert later.wait(5) > committed[0]
    assert _ids(tmp_path) == [1, 2, 3, 5]


def test_a_group_whose_waiters_run_out_of_time_fails_and_leaves_nothing(ingest, tmp_path) -> None:
    ingest, injector = ingest
    group = ingest.write(_rows(1, 2), time.monotonic() + 30)
    injector.arm("enospc-after-bytes=0")
    ingest.write(_rows(3), time.monotonic() + 30)
    errors: list[BaseException] = []

    def waiter() -> None:
        try:
            group.wait(3.5)  # gives the writer until 0.5 s from now to answer (REPLY_MARGIN_S is 3 s)
        except BaseException as e:
            errors.append(e)

    w = threading.Thread(target=waiter)
    w.start()
    time.sleep(0.2)
    with pytest.raises(StorageError, match="No space left on device"):
        ingest.commit()
    w.join(10)
    assert len(errors) == 1 and isinstance(errors[0], StorageError), errors
    injector.arm("")
    assert ingest.commit() is None  # nothing left: the group's rows were dropped with it
    assert _ids(tmp_path) == []
    bucket = tmp_path / "db.db" / "t" / "bucket-0"
    assert not bucket.exists() or not [p for p in bucket.iterdir() if p.name.startswith("data-")]
    ok = ingest.write(_rows(4), time.monotonic() + 30)
    ingest.commit()
    assert ok.wait(5) >= 1 and _ids(tmp_path) == [4]
