"""Fixtures shared across test folders: a fresh metadata store on each backend (SQLite, PostgreSQL), and a local
S3 server (`s3_server`, from `tests.support.s3_server`), a local Azure Blob server (`azure_server`, from
`tests.support.azure_server`), and test certificates and a token file (`certs`, `tokens`, from
`tests.support.security`)."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from lsmlake.metastore import MetaStore, open_store
from tests.support.azure_server import azure_server
from tests.support.s3_server import s3_server
from tests.support.security import certs, tokens
from tests.support.spark_cluster import spark_cluster  # noqa: F401 - a fixture pytest finds by its name

__all__ = ["azure_server", "certs", "s3_server", "tokens"]  # fixtures: pytest finds them by their names here

PG_URL = os.environ.get("LSMLAKE_TEST_PG_URL", "postgresql://postgres@127.0.0.1:5432/test")


def _pg_available() -> str | None:
    """None when the test PostgreSQL answers, else why not."""
    try:
        import psycopg
        with psycopg.connect(PG_URL, connect_timeout=3):
            return None
    except Exception as e:  # not installed, not running, no such database
        return f"PostgreSQL at {PG_URL} is not available: {e}"


@pytest.fixture
def pg_url() -> Iterator[str]:
    """A URL of the test PostgreSQL with a schema of this test's own, dropped afterwards (skips, saying why,
    when that PostgreSQL does not answer)."""
    reason = _pg_available()
    if reason:
        print(reason)
        pytest.skip(reason)
    import psycopg
    schema = f"lsmlake_test_{uuid.uuid4().hex[:12]}"
    try:
        yield f"{PG_URL}?schema={schema}"
    finally:
        with psycopg.connect(PG_URL, autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


@pytest.fixture(params=["sqlite", "postgresql"])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A fresh store URL: a SQLite file in tmp_path, or a PostgreSQL schema of its own (`pg_url`)."""
    if request.param == "sqlite":
        return f"sqlite://{tmp_path}/meta/catalog.db"
    url: str = request.getfixturevalue("pg_url")
    return url


@pytest.fixture
def store(store_url: str) -> Iterator[MetaStore]:
    """An open store at `store_url`, closed afterwards."""
    s = open_store(store_url)
    try:
        yield s
    finally:
        s.close()
