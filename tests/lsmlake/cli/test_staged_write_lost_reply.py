"""A cluster write whose commit reply is lost keeps the files its snapshot names (regression test: the retried
commit's `already_committed` answer made the write delete its own committed files, and report 0 rows written)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa

from lsmlake.catalog.filesystem import FileSystemCatalog
from lsmlake.cli.progress import Progress
from lsmlake.cli.staged_write import staged_write
from lsmlake.client.client import Client
from lsmlake.errors import CommitStateUnknownError
from lsmlake.rpc.catalog_client import CatalogClient
from tests.support.local_server import local_server


class LostFirstReply(Client):
    """The first commit reaches the catalog and is applied; its reply is lost, as on a dropped connection."""

    calls = 0

    def commit(self, *args: Any, **kwargs: Any) -> Any:
        result = super().commit(*args, **kwargs)
        LostFirstReply.calls += 1
        if LostFirstReply.calls == 1:
            raise CommitStateUnknownError("the reply was lost")
        return result


def test_a_commit_applied_before_its_reply_was_lost_keeps_its_files(tmp_path: Path) -> None:
    wh = str(tmp_path)
    with local_server(wh) as server:
        server.create_table("db", "t", [("k", "BIGINT"), ("v", "STRING")], primary_keys=["k"],
                            options={"bucket": "1"})
        address = f"127.0.0.1:{server.server.port}"
        table = FileSystemCatalog(wh).get_table("db.t")
        with LostFirstReply(address, warehouse=wh) as client:
            out = staged_write(client, CatalogClient(address), table,
                               [pa.table({"k": [1, 2, 3], "v": ["a", "b", "c"]})], "r1", Progress("rows", 3))
        assert LostFirstReply.calls == 2  # sent again after the unknown outcome: the catalog applied it once
        assert (out.snapshot_id, out.again, out.files) == (1, False, 1)
        rows = FileSystemCatalog(wh).get_table("db.t").to_arrow().sort_by("k").to_pylist()
        assert rows == [{"k": 1, "v": "a"}, {"k": 2, "v": "b"}, {"k": 3, "v": "c"}]
