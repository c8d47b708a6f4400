"""On an object store the metadata names every file with the store's scheme, and pyiceberg reads it from there."""

from __future__ import annotations

import pyarrow as pa

from lsmlake.catalog.filesystem import FileSystemCatalog
from lsmlake.iceberg import current_metadata_location, publish_iceberg_now
from lsmlake.table.compact import compact_table
from tests.support.iceberg_readers import pyiceberg_read, rows
from tests.support.s3_server import ACCESS_KEY, REGION, SECRET_KEY, S3Server


def test_publish_on_s3_reads_back_through_pyiceberg(s3_server: S3Server) -> None:
    cat = FileSystemCatalog(s3_server.warehouse())
    cat.create_database("db")
    t = cat.create_table("db.t", "k INT NOT NULL, v STRING", primary_keys=["k"],
                         options={"bucket": "2", "deletion-vectors.enabled": "true"})
    t.write_arrow(pa.table({"k": pa.array(range(10), pa.int32()), "v": [str(i) for i in range(10)]}))
    compact_table(t, full=True)
    assert publish_iceberg_now(t) is not None
    t.write_arrow(pa.table({"k": pa.array([1, 2], pa.int32()), "v": ["x", None], "_row_kind": ["+U", "-D"]}))
    assert publish_iceberg_now(t) is not None  # each commit published from its delta
    compact_table(t)
    pub = publish_iceberg_now(t)
    assert pub is not None
    assert pub.metadata_location.startswith(f"s3://{s3_server.bucket}/")
    assert current_metadata_location(t) == pub.metadata_location
    settings = {"s3.endpoint": s3_server.endpoint, "s3.access-key-id": ACCESS_KEY,
                "s3.secret-access-key": SECRET_KEY, "s3.region": REGION}
    assert rows(pyiceberg_read(pub.metadata_location, properties=settings), "k") == rows(t.to_arrow(), "k")
