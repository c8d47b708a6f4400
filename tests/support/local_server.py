"""A catalog server in the test process: real gRPC on a loopback port, a SQLite metastore in the warehouse."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import grpc
import pyarrow as pa

from catalog_svc.server import CatalogServer, Settings
from lsmlake.catalog.filesystem import FileSystemCatalog
from lsmlake.proto_gen.lsmlake.v1 import catalog_pb2, catalog_pb2_grpc, common_pb2
from lsmlake.rpc.convert import changes_to_proto
from lsmlake.table.write import CommitMessage

TIMEOUT_S = 30.0


@dataclasses.dataclass
class Local:
    server: CatalogServer
    stub: catalog_pb2_grpc.CatalogServiceStub
    channel: grpc.Channel
    warehouse: str

    def create_table(self, db: str, name: str, columns: list[tuple[str, str]], primary_keys: Sequence[str] = (),
                     options: dict[str, str] | None = None) -> common_pb2.TableIdentifier:
        self.stub.CreateDatabase(catalog_pb2.CreateDatabaseRequest(name=db, ignore_if_exists=True), timeout=TIMEOUT_S)
        ident = common_pb2.TableIdentifier(database=db, table=name)
        self.stub.CreateTable(catalog_pb2.CreateTableRequest(
            table=ident, columns=[catalog_pb2.Column(name=n, type=t) for n, t in columns],
            primary_keys=list(primary_keys), options=options or {}), timeout=TIMEOUT_S)
        return ident

    def write(self, ident: common_pb2.TableIdentifier, rows: dict[str, list[Any]]) -> list[CommitMessage]:
        """Level-0 files written with the library, not committed."""
        w = FileSystemCatalog(self.warehouse).get_table(f"{ident.database}.{ident.table}").new_write()
        w.write(pa.table(rows))
        return w.prepare_commit()

    def commit(self, ident: common_pb2.TableIdentifier, user: str, number: int, messages: list[CommitMessage],
               kind: common_pb2.CommitKind.ValueType = common_pb2.COMMIT_KIND_APPEND) -> Any:
        return self.stub.Commit(catalog_pb2.CommitRequest(
            table=ident, commit_user=user, commit_identifier=number, kind=kind,
            changes=[changes_to_proto(m) for m in messages]), timeout=TIMEOUT_S)


@contextmanager
def local_server(warehouse: str, **settings: Any) -> Iterator[Local]:
    server = CatalogServer(Settings(warehouse=warehouse, metastore=f"sqlite:///{warehouse}/_meta.sqlite",
                                    **settings))
    port = server.start()
    channel = grpc.insecure_channel(f"127.0.0.1:{port}")
    try:
        yield Local(server, catalog_pb2_grpc.CatalogServiceStub(channel), channel, warehouse)
    finally:
        channel.close()
        server.stop()
