"""The services on an S3 warehouse of the local S3 server, as separate processes on loopback.

Every service gets the warehouse as a credential-free `s3://bucket/prefix` URI and its S3 settings through the
standard AWS_* environment (`S3Server.env()`), as a deployment gives them; the catalog keeps its metadata in
PostgreSQL (a remote warehouse has no local folder for SQLite). The test process sees the same warehouse through
`S3Warehouse`: the library's catalog on the URI with the settings in its query, and a listing of a table's files.
"""

from __future__ import annotations

import posixpath
import uuid
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa

import tests.support.writer_procs as procs
from lsmlake.catalog.filesystem import FileSystemCatalog
from lsmlake.catalog.reachability import referenced_files
from lsmlake.table.file_store_table import FileStoreTable
from tests.support.s3_server import S3Server, pypaimon_options


@dataclass(frozen=True)
class S3Warehouse:
    """A warehouse under a prefix of its own in the local S3 server's bucket."""

    server: S3Server
    prefix: str

    @staticmethod
    def fresh(server: S3Server) -> S3Warehouse:
        return S3Warehouse(server, f"wh-{uuid.uuid4().hex[:12]}")

    @property
    def uri(self) -> str:
        """What the services are given: no credentials, no endpoint (those come from their environment)."""
        return f"s3://{self.server.bucket}/{self.prefix}"

    def env(self) -> dict[str, str]:
        return self.server.env()

    def catalog(self) -> FileSystemCatalog:
        """The test's own view of the warehouse (settings in the URI; this process's environment is left alone)."""
        return FileSystemCatalog(self.server.warehouse(self.prefix))

    def table(self, table_id: str) -> FileStoreTable:
        return self.catalog().get_table(table_id)

    def pypaimon_read(self, table_id: str) -> pa.Table:
        """The table's rows as pypaimon reads them from the bucket (its own S3 options, no lsmlake code)."""
        from pypaimon import CatalogFactory

        options = pypaimon_options(self.server.warehouse(self.prefix), self.server.endpoint)
        rb = CatalogFactory.create(options).get_table(table_id).new_read_builder()
        table: pa.Table = rb.new_read().to_arrow(rb.new_scan().plan().splits())
        return table

    def data_files(self, table_id: str) -> set[str]:
        """The names of the data files in the table's bucket folders, as the store lists them now."""
        table = self.table(table_id)
        names: set[str] = set()
        for info in table.io.list(table.path, recursive=True):
            name = posixpath.basename(info.path)
            if "/bucket-" in info.path and name.startswith("data-") and not info.is_dir:
                names.add(name)
        return names

    def referenced(self, table_id: str) -> set[str]:
        """The names of the files some retained snapshot of the table uses."""
        table = self.table(table_id)
        return {posixpath.basename(p) for p in referenced_files(table, table.snapshots.snapshots())}


def catalog(wh: S3Warehouse, log_dir: Path, metastore: str, bootstrap: str, *extra: str,
            port: int | None = None) -> procs.Service:
    return procs.Service("catalog_svc", ["--warehouse", wh.uri, "--metastore", metastore, "--kafka", bootstrap,
                                         *extra], log_dir, port, env=wh.env())


def writer(wh: S3Warehouse, log_dir: Path, catalog_port: int, *extra: str, port: int | None = None) -> procs.Service:
    return procs.Service("writer_svc", ["--warehouse", wh.uri, "--catalog", f"127.0.0.1:{catalog_port}", *extra],
                         log_dir, port, env=wh.env())


def compactor(wh: S3Warehouse, log_dir: Path, catalog_port: int, bootstrap: str, *extra: str) -> procs.Service:
    return procs.Service("compactor_svc", ["--warehouse", wh.uri, "--catalog", f"127.0.0.1:{catalog_port}",
                                           "--kafka", bootstrap, "--spark-master", "local[2]", *extra],
                         log_dir, env=wh.env())
