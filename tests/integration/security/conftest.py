"""A console server over two tables, shared by the security tests (the `certs` and `tokens` fixtures come from
tests/support/security.py, through tests/conftest.py)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pytest

from lsmlake.catalog.filesystem import FileSystemCatalog
from lsmlake.rpc.security import ServerSecurity
from tests.support.local_server import local_server
from tests.support.security import Tokens


@pytest.fixture(scope="module")
def ui(tmp_path_factory: pytest.TempPathFactory, tokens: Tokens) -> Iterator[int]:
    """A catalog service with the console on a free port (yielded), over two tables: `busy` past its stop trigger
    (two buckets of six level-0 runs, trigger 5) and `calm` (one run per bucket); values and partitions hold HTML."""
    warehouse = str(Path(tmp_path_factory.mktemp("console")) / "wh")
    with local_server(warehouse, ui_port=0, security=ServerSecurity(auth_tokens=tokens.file), expire_interval_s=0,
                      orphan_interval_s=0, reconcile_interval_s=0, health_interval_s=0.5) as local:
        cat = FileSystemCatalog(warehouse)
        cat.create_database("db")
        for name, writes, options in (("calm", 1, {}), ("busy", 6, {"num-sorted-run.stop-trigger": "5"})):
            cat.create_table(f"db.{name}", "id BIGINT NOT NULL, v STRING, dt STRING NOT NULL",
                             primary_keys=["dt", "id"], partition_keys=["dt"],
                             options={"bucket": "2", "write-only": "true", **options})
            t = cat.get_table(f"db.{name}")
            for i in range(writes):
                t.write_arrow(pa.table({"id": pa.array(range(i, i + 8), pa.int64()), "v": ["<script>x</script>"] * 8,
                                        "dt": ["<i>2026</i>"] * 8}))
        assert local.server.ui_port is not None
        yield local.server.ui_port
