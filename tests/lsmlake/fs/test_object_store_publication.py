"""Snapshot publication on a real object-store protocol (S3: a local moto server, `tests.support.s3_server`): several
processes committing to one table lose no commit; the conditional create and its probe; a store without
conditional writes is refused with one clear error (a warning when the caller serialises publications)."""

from __future__ import annotations

import logging
import uuid
from pathlib import Path

import pyarrow as pa
import pyarrow.fs as pafs
import pytest
from pyarrow.fs import _MockFileSystem

import lsmlake.fs
from lsmlake.catalog.filesystem import FileSystemCatalog
from lsmlake.errors import CommitStateUnknownError, PublicationUnsupportedError
from lsmlake.fs.conditional_create import PROBE_DIR, ConditionalCreate
from tests.support.process_commits import assert_processes_lose_no_commit
from tests.support.s3_server import S3Server

pytestmark = pytest.mark.integration

PROCESSES = 3
COMMITS = 15



def test_processes_committing_to_one_s3_table_lose_no_commit(s3_server: S3Server, tmp_path: Path) -> None:
    warehouse = s3_server.warehouse()
    assert_processes_lose_no_commit(warehouse, tmp_path, PROCESSES, COMMITS)


def test_conditional_create_refuses_a_second_create(s3_server: S3Server) -> None:
    fs, root = pafs.FileSystem.from_uri(s3_server.warehouse())
    cc = ConditionalCreate.for_filesystem(fs)
    assert cc is not None
    path = f"{root}/snapshot/snapshot-1"
    assert cc.create(path, b"ours")
    assert not cc.create(path, b"theirs")
    assert cc.create(path, b"ours")  # our own bytes there: a retried create that had succeeded
    with fs.open_input_stream(path) as f:  # pyarrow's bucket/key is the same object
        assert f.read() == b"ours"
    assert cc.refuses_second_create(root)
    left = [i.path for i in fs.get_file_info(pafs.FileSelector(root, recursive=True)) if PROBE_DIR in i.path
            and i.type == pafs.FileType.File]
    assert not left, f"the probe left {left}"


def test_credentials_from_the_aws_environment(s3_server: S3Server, monkeypatch: pytest.MonkeyPatch) -> None:
    for k, v in s3_server.env().items():
        monkeypatch.setenv(k, v)
    warehouse = f"s3://{s3_server.bucket}/env-{uuid.uuid4().hex[:8]}"  # endpoint and keys from AWS_*
    cat = FileSystemCatalog(warehouse)
    assert cat.io.conditional is not None
    cat.create_database("db")
    t = cat.create_table("db.t", "k BIGINT NOT NULL")
    assert t.write_arrow(pa.table({"k": [1]})) is not None
    assert cat.get_table("db.t").to_arrow().num_rows == 1


class _IgnoringCreate(ConditionalCreate):
    """A store without conditional writes: a create overwrites whatever is there."""

    def create(self, path: str, data: bytes) -> bool:
        import obstore

        store, key = self._locate(path)
        obstore.put(store, key, data)
        return True


_FOR_FILESYSTEM = ConditionalCreate.for_filesystem


def _ignoring(fs: pafs.FileSystem, uri: str | None = None) -> ConditionalCreate | None:
    real = _FOR_FILESYSTEM(fs, uri)
    assert real is not None
    return _IgnoringCreate(real.kind, real._config, real._client_options, f"{real.label} without conditions")


def test_a_store_without_conditional_create_refuses_commits_with_one_clear_error(
        s3_server: S3Server, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    warehouse = s3_server.warehouse()
    cat = FileSystemCatalog(warehouse)
    cat.create_database("db")
    cat.create_table("db.t", "k BIGINT NOT NULL")
    monkeypatch.setattr(lsmlake.fs.ConditionalCreate, "for_filesystem", staticmethod(_ignoring))

    t = FileSystemCatalog(warehouse).get_table("db.t")
    manifests_before = {i.name for i in t.io.list(f"{t.path}/manifest")}
    # a definite failure (the probe runs before anything is published), not an unknown outcome
    with pytest.raises(PublicationUnsupportedError, match="does not refuse to create an object that exists") as e:
        t.write_arrow(pa.table({"k": [1]}))
    assert not isinstance(e.value, CommitStateUnknownError)
    assert "commit through the catalog service" in str(e.value)
    assert t.snapshots.ids() == []  # nothing was published
    assert {i.name for i in t.io.list(f"{t.path}/manifest")} == manifests_before  # and its metadata was removed

    with caplog.at_level(logging.WARNING, logger="lsmlake.fs.file_io"):
        t = FileSystemCatalog(warehouse, publications_serialized=True).get_table("db.t")
        assert t.write_arrow(pa.table({"k": [1]})) is not None
        assert t.write_arrow(pa.table({"k": [2]})) is not None
    warnings = [r for r in caplog.records if "does not refuse" in r.getMessage()]
    assert len(warnings) == 1, caplog.text
    assert "in-process lock" in warnings[0].getMessage()
    assert t.snapshots.ids() == [1, 2]
    assert sorted(r["k"] for r in t.to_arrow().to_pylist()) == [1, 2]


@pytest.mark.parametrize(("uri", "kind", "config", "client"), [
    ("s3://AK:SK@lake/wh?region=eu-west-1&endpoint_override=127.0.0.1:9000&scheme=http", "s3",
     {"access_key_id": "AK", "secret_access_key": "SK", "region": "eu-west-1", "endpoint": "http://127.0.0.1:9000"},
     {"allow_http": True}),
    ("s3://lake/wh?region=eu-west-1&endpoint_override=https://minio.example:9000", "s3",
     {"region": "eu-west-1", "endpoint": "https://minio.example:9000"}, {}),
    ("gs://lake/wh?endpoint_override=127.0.0.1:4443&scheme=http", "gcs",
     {"base_url": "http://127.0.0.1:4443"}, {"allow_http": True}),
    ("abfs://acct:a2V5@box/wh?blob_storage_authority=127.0.0.1:10000&dfs_storage_authority=127.0.0.1:10000"
     "&enable_tls=false", "azure",
     {"account_name": "acct", "account_key": "a2V5", "endpoint": "http://127.0.0.1:10000/acct"}, {"allow_http": True}),
    ("abfss://box@acct.dfs.core.windows.net/wh", "azure", {"account_name": "acct"}, {}),
])
def test_the_store_is_what_pyarrow_made_of_the_uri(uri: str, kind: str, config: dict[str, object],
                                                   client: dict[str, object]) -> None:
    fs, _ = pafs.FileSystem.from_uri(uri)
    cc = ConditionalCreate.for_filesystem(fs, uri)
    assert cc is not None
    assert (cc.kind, cc._config, cc._client_options) == (kind, config, client)


def test_no_conditional_create_for_local_or_in_memory_filesystems(tmp_path: Path) -> None:
    assert ConditionalCreate.for_filesystem(pafs.LocalFileSystem()) is None
    assert ConditionalCreate.for_filesystem(_MockFileSystem()) is None
    assert FileSystemCatalog(str(tmp_path)).io.conditional is None
