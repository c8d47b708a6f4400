"""Catalog and writer as real processes with TLS and tokens: the writer authenticates to the catalog with its
own token file, clients with tokens of each role write rows and read them back through `lsmlake.Client`."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import grpc
import pyarrow as pa
import pytest

from lsmlake import Client
from lsmlake.errors import LakeError
from lsmlake.kafka.broker import free_port
from tests.support.certs import Certs
from tests.support.health_check import serving
from tests.support.security import Tokens

pytestmark = pytest.mark.integration
START_TIMEOUT_S = 90.0


class Proc:
    """A service process; ready once its plaintext health port answers SERVING."""

    def __init__(self, module: str, args: list[str], log: Path, env: dict[str, str]) -> None:
        self.port, self.health_port = free_port(), free_port()
        self.log = log
        with open(log, "w") as out:
            self.proc = subprocess.Popen([sys.executable, "-m", module, "--port", str(self.port), "--health-port",
                                          str(self.health_port), *args], stdout=subprocess.DEVNULL, stderr=out,
                                         env={**os.environ, "PYTHONUNBUFFERED": "1", **env})
        deadline = time.monotonic() + START_TIMEOUT_S
        with grpc.insecure_channel(f"127.0.0.1:{self.health_port}") as ch:
            while True:
                assert self.proc.poll() is None, f"{module} exited: {log.read_text()[-3000:]}"
                if serving(ch):
                    return
                assert time.monotonic() < deadline, f"{module} never became SERVING: {log.read_text()[-3000:]}"
                time.sleep(0.1)  # polling interval, bounded by the deadline

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        return self.proc.returncode


@pytest.fixture
def services(tmp_path: Path, certs: Certs, tokens: Tokens) -> Iterator[tuple[str, str]]:
    warehouse = tmp_path / "wh"
    writer_token = tmp_path / "writer.token"
    writer_token.write_text(tokens.service + "\n")
    # the catalog from flags, the writer from the environment: both ways reach the same settings
    catalog = Proc("catalog_svc", ["--warehouse", str(warehouse), "--tls-cert", certs.server_cert,
                                           "--tls-key", certs.server_key, "--auth-tokens", tokens.file],
                   tmp_path / "catalog.log", {})
    try:
        writer = Proc("writer_svc", ["--warehouse", str(warehouse), "--catalog",
                                             f"127.0.0.1:{catalog.port}", "--commit-interval", "0.2"],
                      tmp_path / "writer.log",
                      {"LSMLAKE_TLS_CERT": certs.server_cert, "LSMLAKE_TLS_KEY": certs.server_key,
                       "LSMLAKE_AUTH_TOKENS": tokens.file, "LSMLAKE_CATALOG_TLS_CA": certs.ca,
                       "LSMLAKE_CATALOG_TOKEN_FILE": str(writer_token)})
        try:
            yield f"127.0.0.1:{catalog.port}", f"127.0.0.1:{writer.port}"
        finally:
            assert writer.stop() == 0, writer.log.read_text()[-3000:]
    finally:
        assert catalog.stop() == 0, catalog.log.read_text()[-3000:]


def test_rows_written_with_a_writer_token_are_read_back_with_a_reader_token(services: tuple[str, str],
                                                                            certs: Certs, tokens: Tokens) -> None:
    catalog, writer = services

    def client(token: str | None) -> Client:
        return Client(catalog, writer=writer, tls_ca=certs.ca, token=token, timeout_s=60)

    with client(tokens.admin) as admin:
        admin.create_database("db")
        admin.create_table("db.events", "id BIGINT NOT NULL, v STRING", primary_keys=["id"], options={"bucket": 2})
    with client(tokens.writer) as w:
        assert w.write("db.events", pa.table({"id": list(range(100)), "v": [f"v{i}" for i in range(100)]})).rows == 100
        w.write_rows("db.events", [{"id": 5, "v": "five"}])
        with pytest.raises(LakeError, match="PERMISSION_DENIED"):
            w.drop_table("db.events")
    with client(tokens.reader) as r:
        rows = r.scan("db.events").sort_by("id")
        assert rows.column("id").to_pylist() == list(range(100))
        assert rows.column("v").to_pylist()[5] == "five"
        with pytest.raises(LakeError, match="PERMISSION_DENIED"):
            r.write_rows("db.events", [{"id": 1000, "v": "no"}])
    with client(None) as anonymous, pytest.raises(LakeError, match="UNAUTHENTICATED"):
        anonymous.scan("db.events")
    with client(tokens.reader) as r:
        assert r.scan("db.events").num_rows == 100
