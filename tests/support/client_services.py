"""A catalog and a writer service in the test process (real gRPC on loopback ports) for `Client` tests."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from tests.support.local_server import local_server
from writer_svc.server import Settings, WriterServer


@dataclass(frozen=True)
class ClientServices:
    """Where the services listen, and the warehouse they share (for the library's own read of a table)."""

    catalog: str
    writer: str
    warehouse: str


@contextmanager
def client_services(warehouse: str) -> Iterator[ClientServices]:
    """A catalog and a writer over `warehouse`; the writer commits every 0.1 s."""
    with local_server(warehouse) as cat:
        catalog = f"127.0.0.1:{cat.server.port}"
        writer = WriterServer(Settings(warehouse=warehouse, catalog=catalog, commit_interval_s=0.1,
                                       metrics_port=None))
        writer.start()
        try:
            yield ClientServices(catalog, f"127.0.0.1:{writer.port}", warehouse)
        finally:
            writer.stop()
