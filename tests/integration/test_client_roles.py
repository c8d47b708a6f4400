"""Who may rename a table and change its tags through the Client: a real catalog on loopback that checks tokens.
As in the REST catalog, renaming and creating or deleting a tag need `admin`; listing and reading tags, `reader`.
A refused call changes nothing."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pytest

from lsmlake import Client
from lsmlake.catalog.filesystem import FileSystemCatalog
from lsmlake.errors import PermissionDeniedError
from lsmlake.rpc.security import ServerSecurity
from tests.support.local_server import local_server
from tests.support.security import Tokens


@pytest.fixture(scope="module")
def catalog(tmp_path_factory: pytest.TempPathFactory, tokens: Tokens) -> Iterator[str]:
    warehouse = str(Path(tmp_path_factory.mktemp("roles")) / "wh")
    cat = FileSystemCatalog(warehouse)
    cat.create_database("db")
    t = cat.create_table("db.t", "id BIGINT NOT NULL, v STRING", primary_keys=["id"], options={"bucket": "1"})
    t.write_arrow(pa.table({"id": pa.array([1, 2], pa.int64()), "v": ["a", "b"]}))
    with local_server(warehouse, security=ServerSecurity(auth_tokens=tokens.file)) as local:
        yield f"127.0.0.1:{local.server.port}"


def test_renames_and_tag_changes_need_admin_and_tags_are_read_by_readers(catalog: str, tokens: Tokens) -> None:
    with Client(catalog, token=tokens.admin, timeout_s=30) as admin:
        admin.create_tag("db.t", "base")
    for role in ("reader", "writer"):
        with Client(catalog, token=tokens.of(role), timeout_s=30) as c:
            assert c.list_tags("db.t") == ["base"] and c.tag("db.t", "base").id == 1
            assert c.scan("db.t", tag="base").num_rows == 2
            with pytest.raises(PermissionDeniedError):
                c.create_tag("db.t", f"by-{role}")
            with pytest.raises(PermissionDeniedError):
                c.delete_tag("db.t", "base")
            with pytest.raises(PermissionDeniedError):
                c.rename_table("db.t", f"db.by_{role}")
    with Client(catalog, token=tokens.admin, timeout_s=30) as admin:
        assert admin.list_tags("db.t") == ["base"] and admin.list_tables("db") == ["t"]  # nothing changed
        admin.delete_tag("db.t", "base")
        assert admin.rename_table("db.t", "db.renamed").identifier == "db.renamed"
        assert admin.list_tags("db.renamed") == [] and admin.list_tables("db") == ["renamed"]
