"""A commit's files are checked under the table's commit lock, not before it is taken."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import grpc
import pytest

from lsmlake.catalog.filesystem import FileSystemCatalog
from tests.support.local_server import local_server


def test_a_file_removed_before_the_lock_is_taken_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Old code: the existence check ran before the lock; a rollback or a drop and re-create that removed the
    file in between let the commit publish a snapshot naming a missing file (the table no longer read)."""
    with local_server(str(tmp_path)) as cat:
        ident = cat.create_table("db", "t", [("id", "BIGINT")])
        messages = cat.write(ident, {"id": [1]})
        table = FileSystemCatalog(cat.warehouse).get_table("db.t")
        path = f"{table.path}/bucket-0/{messages[0].new_files[0].file_name}"
        assert os.path.exists(path)
        store = cat.server._operations.store
        real = store.commit_lock

        @contextmanager
        def lock_after_the_file_went(tid: str) -> Iterator[object]:
            with real(tid) as tx:
                if os.path.exists(path):  # what a rollback holding the lock just before us did
                    os.remove(path)
                yield tx

        monkeypatch.setattr(store, "commit_lock", lock_after_the_file_went)
        with pytest.raises(grpc.RpcError) as e:
            cat.commit(ident, "w", 1, messages)
        assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "does not exist" in e.value.details()
        monkeypatch.undo()
        assert FileSystemCatalog(cat.warehouse).get_table("db.t").snapshots.latest_id() is None
