"""Certificates and a token file (one token per role) for the tests of authentication and of the HTTP ports.

`tests/conftest.py` exposes the `certs` and `tokens` fixtures to every test folder."""

from __future__ import annotations

import json
import secrets
from dataclasses import dataclass
from pathlib import Path

import pytest

from lsmlake.auth.tokens import digest
from tests.support.certs import Certs, make_certs


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
