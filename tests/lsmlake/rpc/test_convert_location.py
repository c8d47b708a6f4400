"""TableInfo.location: what another process opens the table by, with its scheme and without credentials."""

from __future__ import annotations

from lsmlake.catalog.filesystem import FileSystemCatalog
from lsmlake.rpc.convert import table_to_proto
from tests.support.s3_server import ACCESS_KEY, SECRET_KEY, S3Server


def test_location_on_s3_has_the_scheme_and_no_credentials(s3_server: S3Server) -> None:
    """Old code reported `lake/wh-.../db.db/t`: a bare object path, which other processes open as a local path."""
    wh = s3_server.warehouse()
    cat = FileSystemCatalog(wh)
    cat.create_database("db")
    t = cat.create_table("db.t", "id BIGINT NOT NULL", primary_keys=["id"], options={"bucket": "1"})
    location = table_to_proto(t, "db", "t").location
    prefix = wh.split("@", 1)[1].split("?", 1)[0]
    assert location == f"s3://{prefix}/db.db/t"
    assert ACCESS_KEY not in location and SECRET_KEY not in location and "endpoint" not in location


def test_location_on_a_local_disk_is_the_path(tmp_path) -> None:
    cat = FileSystemCatalog(str(tmp_path))
    cat.create_database("db")
    t = cat.create_table("db.t", "id BIGINT NOT NULL", primary_keys=["id"], options={"bucket": "1"})
    assert table_to_proto(t, "db", "t").location == f"{tmp_path}/db.db/t"
