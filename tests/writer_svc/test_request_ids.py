"""Writes with a request id land once however often they are sent: resent after success, sent by several
threads at once, resent to a restarted writer, and resent through another writer while the first attempt
is still uncommitted. Real catalog and writer servers on loopback ports; an append table, where a
duplicate would show as a second copy of the rows."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import grpc
import pyarrow as pa
import pytest

from lsmlake.catalog.filesystem import FileSystemCatalog
from lsmlake.client.client import Client
from lsmlake.errors import AlreadyExistsError, CommitRetryExhaustedError, InvalidInputError
from lsmlake.proto_gen.lsmlake.v1 import catalog_pb2, common_pb2, writer_pb2, writer_pb2_grpc
from lsmlake.rpc.catalog_client import CatalogClient
from lsmlake.rpc.errors import status_for
from tests.support.local_server import Local, local_server
from tests.writer_svc.test_writer_local import TIMEOUT_S, write_requests
from writer_svc.metrics import WriterMetrics
from writer_svc.server import Settings, WriterServer
from writer_svc.table_ingest import TableIngest


@contextmanager
def writer(cat: Local, writer_id: str, commit_interval_s: float) -> Iterator[writer_pb2_grpc.WriterServiceStub]:
    """A writer server with its own commit user; a stub whose `target` attribute is its address."""
    w = WriterServer(Settings(warehouse=cat.warehouse, catalog=f"127.0.0.1:{cat.server.port}", writer_id=writer_id,
                              commit_interval_s=commit_interval_s, metrics_port=0))
    w.start()
    channel = grpc.insecure_channel(f"127.0.0.1:{w.port}")
    try:
        stub = writer_pb2_grpc.WriterServiceStub(channel)
        stub.target = f"127.0.0.1:{w.port}"  # type: ignore[attr-defined]
        yield stub
    finally:
        channel.close()
        w.stop()


def rows(start: int, n: int) -> pa.Table:
    return pa.table({"id": pa.array(range(start, start + n), pa.int64()), "v": [f"v{i}" for i in range(n)]})


def stored_ids(cat: Local, ident: common_pb2.TableIdentifier) -> list[int]:
    t = FileSystemCatalog(cat.warehouse).get_table(f"{ident.database}.{ident.table}")
    return sorted(t.to_arrow().column("id").to_pylist())


def test_resent_writes_land_once(tmp_path: Path) -> None:
    with local_server(str(tmp_path)) as cat:
        ident = cat.create_table("db", "t", [("id", "BIGINT"), ("v", "STRING")])
        with writer(cat, "wa", 0.2) as stub:
            first = stub.Write(write_requests(ident, rows(0, 100), request_id="req-1"), timeout=TIMEOUT_S)
            again = stub.Write(write_requests(ident, rows(0, 100), request_id="req-1"), timeout=TIMEOUT_S)
            assert not first.already_written and again.already_written
            assert (again.snapshot_id, again.rows_written) == (first.snapshot_id, 100)

            replies: list[Any] = []  # eight threads send one write at once
            threads = [threading.Thread(target=lambda: replies.append(stub.Write(
                write_requests(ident, rows(100, 50), request_id="req-2"), timeout=TIMEOUT_S))) for _ in range(8)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            assert len(replies) == 8 and len({r.snapshot_id for r in replies}) == 1
            assert sorted(r.already_written for r in replies) == [False] + [True] * 7

            json_req = writer_pb2.WriteRowsRequest(table=ident, rows_json=['{"id": 500, "v": "j"}'], request_id="j-1")
            assert not stub.WriteRows(json_req, timeout=TIMEOUT_S).already_written
            assert stub.WriteRows(json_req, timeout=TIMEOUT_S).already_written
            # writes without an id are written every time
            stub.WriteRows(writer_pb2.WriteRowsRequest(table=ident, rows_json=['{"id": 600}']), timeout=TIMEOUT_S)
            stub.WriteRows(writer_pb2.WriteRowsRequest(table=ident, rows_json=['{"id": 600}']), timeout=TIMEOUT_S)
        with writer(cat, "wb", 0.2) as stub:  # a writer that never saw req-1 asks the catalog
            later = stub.Write(write_requests(ident, rows(0, 100), request_id="req-1"), timeout=TIMEOUT_S)
            assert later.already_written and later.snapshot_id == first.snapshot_id
            with pytest.raises(grpc.RpcError) as e:
                stub.Write(write_requests(ident, rows(0, 1), request_id="x" * 201), timeout=TIMEOUT_S)
            assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "at most 200" in e.value.details()
        assert stored_ids(cat, ident) == list(range(150)) + [500, 600, 600]


def test_the_client_names_the_parts_of_a_split_write(tmp_path: Path) -> None:
    with local_server(str(tmp_path)) as cat:
        ident = cat.create_table("db", "t", [("id", "BIGINT"), ("v", "STRING")])
        with writer(cat, "wa", 0.2) as stub, Client(f"127.0.0.1:{cat.server.port}",
                                                    writer=stub.target) as client:
            first = client.write("db.t", rows(0, 100), request_id="load-7", max_rows_per_request=30)
            assert (first.rows, first.already_written) == (100, False)
            again = client.write("db.t", rows(0, 100), request_id="load-7", max_rows_per_request=30)
            assert (again.snapshot_id, again.rows, again.already_written) == (first.snapshot_id, 100, True)
            found = cat.stub.FindWrites(_find(ident, [f"load-7/{n}" for n in range(4)]), timeout=TIMEOUT_S)
            assert len(found.snapshot_ids) == 4
            assert not client.write_rows("db.t", [{"id": 900}], request_id="r").already_written
            assert client.write_rows("db.t", [{"id": 900}], request_id="r").already_written
            with pytest.raises(InvalidInputError, match="request id"):
                client.write_rows("db.t", [{"id": 901}], request_id="y" * 300)
        assert stored_ids(cat, ident) == list(range(100)) + [900]


def test_a_resend_racing_its_first_attempt_through_another_writer_lands_once(tmp_path: Path) -> None:
    """Two writers' groups both hold write x, uncommitted, when the first commits. The writers' ingestion of one
    table each, on a real catalog server, without their group-commit threads: the test decides when each group
    commits (a writer commits as soon as no write is in progress, so through gRPC the race is left to timing)."""
    with local_server(str(tmp_path)) as cat:
        ident = cat.create_table("db", "t", [("id", "BIGINT"), ("v", "STRING")])
        client = CatalogClient(f"127.0.0.1:{cat.server.port}")
        try:
            table = FileSystemCatalog(cat.warehouse).get_table("db.t")
            a = TableIngest(table, client, "wa", WriterMetrics())
            b = TableIngest(FileSystemCatalog(cat.warehouse).get_table("db.t"), client, "wb", WriterMetrics())
            deadline = time.monotonic() + TIMEOUT_S
            xa, _ = a.write_once(rows(0, 10), deadline, "x")
            ya, _ = a.write_once(rows(100, 5), deadline, "y")
            xb, seen = b.write_once(rows(0, 10), deadline, "x")
            assert not seen, "a's attempt of x is not committed yet: b cannot know it"
            zb, _ = b.write_once(rows(200, 5), deadline, "z")
            assert a.commit() is not None and xa.error is None and ya.error is None
            # b's group held a write already committed, and is refused whole, telling the client to resend
            with pytest.raises(AlreadyExistsError, match="'x'"):
                b.commit()
            assert xb.error is zb.error and isinstance(xb.error, CommitRetryExhaustedError), xb.error
            assert "resend" in str(xb.error) and status_for(xb.error)[0] == grpc.StatusCode.ABORTED
            # the client resends what failed, with the same ids: x is answered, z is written
            again, seen = b.write_once(rows(0, 10), deadline, "x")
            assert seen and again.snapshot_id == xa.snapshot_id
            z2, seen = b.write_once(rows(200, 5), deadline, "z")
            assert not seen and b.commit() is not None and z2.error is None
            a.close()
            b.close()
        finally:
            client.close()
        assert stored_ids(cat, ident) == list(range(10)) + list(range(100, 105)) + list(range(200, 205))


def _find(ident: common_pb2.TableIdentifier, ids: list[str]) -> catalog_pb2.FindWritesRequest:
    return catalog_pb2.FindWritesRequest(table=ident, request_ids=ids)
