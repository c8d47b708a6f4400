"""Certificates, a token file and a console server shared by the auth tests."""

from __future__ import annotations

import json
import secrets
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pytest

from lsmlake.auth.tokens import digest
from lsmlake.catalog.filesystem import FileSystemCatalog
from lsmlake.rpc.security import ServerSecurity

from ..catalog_svc.local_server import local_server
from .certs import Certs, make_certs


@dataclass(frozen=True)
class Tokens:
    """One token per role (and the file that grants them), plus one the file does not know."""

    file: str
    reader: str
    writer: str
    service: str
    admin: str
    unknown: str

    def of(self, role: str) -> str:
        return str(getattr(self, role))


def write_token_file(path: Path, reader: str, writer: str, service: str, admin: str) -> None:
    # one entry hashed, the others in plaintext: both forms are accepted
    path.write_text(json.dumps({"tokens": [
        {"principal": "alice-reader", "role": "reader", "sha256": digest(reader).hex()},
        {"principal": "bob-writer", "role": "writer", "token": writer},
        {"principal": "writer-svc", "role": "service", "token": service},
        {"principal": "root", "role": "admin", "token": admin},
    ]}))


@pytest.fixture(scope="session")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Certs:
    return make_certs(tmp_path_factory.mktemp("certs"))


@pytest.fixture(scope="session")
def tokens(tmp_path_factory: pytest.TempPathFactory) -> Tokens:
    path = tmp_path_factory.mktemp("tokens") / "tokens.json"
    t = Tokens(str(path), *(secrets.token_urlsafe(24) for _ in range(5)))
    write_token_file(path, t.reader, t.writer, t.service, t.admin)
    return t


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
