"""Where `lake up` keeps a cluster's state, for a warehouse folder and for an object-store URI, how the other
commands find it from the same URI, and the S3 settings they open the warehouse with."""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import pytest

from lsmlake.cli import main as cli
from lsmlake.cli.cluster import (
    Cluster,
    ClusterError,
    ClusterState,
    default_state_dir,
    find_endpoints,
    public_uri,
    state_dir_of,
    warehouse_key,
)
from lsmlake.cli.local_s3 import LocalS3, LocalS3Error
from lsmlake.cli.warehouse import settings_uri
from lsmlake.errors import InvalidInputError
from lsmlake.fs.storage_settings import StorageSettings
from tests.support.s3_server import SECRET_KEY, S3Server, free_port

SECRET = "s3cr3t/+="
URI = f"s3://AKIA:{SECRET.replace('/', '%2F').replace('+', '%2B').replace('=', '%3D')}@bucket/some/prefix/" \
      "?endpoint_override=http%3A%2F%2F127.0.0.1%3A9000&region=eu-west-1&session_token=tok"


def test_a_warehouse_uri_is_named_by_its_bucket_and_prefix_alone() -> None:
    assert warehouse_key(URI) == "s3://bucket/some/prefix"
    assert warehouse_key("s3://bucket/some/prefix") == "s3://bucket/some/prefix"
    assert warehouse_key("wh") == os.path.abspath("wh")
    with pytest.raises(InvalidInputError, match="names no bucket"):
        warehouse_key("s3:///prefix")


def test_the_public_uri_keeps_the_endpoint_and_drops_every_secret() -> None:
    shown = public_uri(URI)
    assert "AKIA" not in shown and "s3cr3t" not in shown and "tok" not in shown
    back = StorageSettings.from_uri(shown)
    assert (back.endpoint, back.region, back.access_key_id, back.session_token) == (
        "http://127.0.0.1:9000", "eu-west-1", None, None)
    assert shown.startswith("s3://bucket/some/prefix?")
    assert public_uri("/data/wh") == "/data/wh"


def test_state_folders(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.delenv("LAKE_STATE_DIR", raising=False)
    one = default_state_dir(URI)
    # the same folder whatever settings the URI carries; another prefix, another folder
    assert one == default_state_dir("s3://bucket/some/prefix") == state_dir_of("s3://bucket/some/prefix/")
    assert one.startswith(str(tmp_path / ".lake" / "clusters" / "s3-bucket-some-prefix-"))
    assert default_state_dir("s3://bucket/some/prefix2") != one
    assert default_state_dir("s3://bucket/some-prefix") != default_state_dir("s3://bucket/some/prefix")
    assert default_state_dir(str(tmp_path / "wh")) == str(tmp_path / "wh" / ".lake")
    monkeypatch.setenv("LAKE_STATE_DIR", str(tmp_path / "st"))
    assert state_dir_of(URI) == str(tmp_path / "st")
    assert state_dir_of(str(tmp_path / "wh")) == str(tmp_path / "wh" / ".lake")  # a folder keeps its own
    assert state_dir_of(URI, str(tmp_path / "given")) == str(tmp_path / "given")


def test_commands_find_the_cluster_of_an_s3_warehouse_from_its_bare_uri(tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """A record whose `lake up` process is alive (this one) is found from the URI with or without its query."""
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.delenv("LAKE_STATE_DIR", raising=False)
    state = ClusterState(warehouse=public_uri(URI), pid=os.getpid(), kafka="127.0.0.1:1", catalog="127.0.0.1:2",
                         writer="127.0.0.1:3", compactor=None, embedded_kafka=True, logs="logs",
                         state_dir=default_state_dir(URI), storage={"endpoint": "http://127.0.0.1:9000"})
    state.save()
    assert os.stat(ClusterState.path(state.state_dir)).st_mode & 0o077 == 0
    for uri in (URI, "s3://bucket/some/prefix"):
        found = find_endpoints(uri)
        assert found is not None and found.catalog == "127.0.0.1:2"
        assert found.storage_settings().endpoint == "http://127.0.0.1:9000"
    assert find_endpoints("s3://bucket/other") is None


def test_settings_uri_gives_back_the_settings() -> None:
    settings = StorageSettings(endpoint="http://127.0.0.1:9000", region="r", access_key_id="k/1",
                               secret_access_key=SECRET, session_token="t", path_style=True)
    uri = settings_uri("s3://bucket/p", settings)
    assert warehouse_key(uri) == "s3://bucket/p"
    assert StorageSettings.from_uri(uri) == settings


def test_lake_up_s3_refuses_a_local_warehouse(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["--warehouse", str(tmp_path / "wh"), "up", "--s3"]) == 2
    err = capsys.readouterr().err
    assert "--s3 runs the cluster on an s3:// warehouse" in err and "--warehouse is" in err, err
    assert not (tmp_path / "wh").exists()


def test_without_moto_the_local_s3_server_says_how_to_install_it(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "moto" else real(name, *a))
    with pytest.raises(LocalS3Error, match=r'pip install "moto\[server\]"'):
        LocalS3.start(str(tmp_path / "s3.log"))
    assert not (tmp_path / "s3.log").exists()


def test_a_catalog_service_given_is_completed_by_the_cluster_recorded_for_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`--catalog-service` naming the catalog of the cluster `lake up` runs on the warehouse gets that cluster's
    writer and compactor; another catalog gets only the flags given."""
    import argparse

    from lsmlake.cli.warehouse import find_services

    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.delenv("LAKE_STATE_DIR", raising=False)
    ClusterState(warehouse="s3://b/w", pid=os.getpid(), kafka="127.0.0.1:1", catalog="127.0.0.1:2",
                 writer="127.0.0.1:3", compactor="127.0.0.1:4", embedded_kafka=True, logs="logs",
                 state_dir=default_state_dir("s3://b/w")).save()

    def services(catalog: str | None, writer: str | None = None) -> tuple[str | None, ...] | None:
        found = find_services(argparse.Namespace(warehouse="s3://b/w", catalog_target=catalog, writer_target=writer,
                                                 compactor_target=None, kafka_target=None))
        return None if found is None else (found.catalog, found.writer, found.compactor, found.kafka)

    assert services(None) == ("127.0.0.1:2", "127.0.0.1:3", "127.0.0.1:4", "127.0.0.1:1")
    assert services("127.0.0.1:2") == ("127.0.0.1:2", "127.0.0.1:3", "127.0.0.1:4", "127.0.0.1:1")
    assert services("127.0.0.1:2", "127.0.0.1:9") == ("127.0.0.1:2", "127.0.0.1:9", "127.0.0.1:4", "127.0.0.1:1")
    assert services("127.0.0.1:7") == ("127.0.0.1:7", None, None, None)


def test_a_read_with_only_a_catalog_service_says_why_it_needs_the_warehouse(capsys: pytest.CaptureFixture[str],
                                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("LAKE_WAREHOUSE", raising=False)
    assert cli.main(["--catalog-service", "127.0.0.1:1", "scan", "db.t"]) == 2
    err = capsys.readouterr().err
    assert "no warehouse: pass --warehouse" in err and "the catalog service 127.0.0.1:1 is given" in err, err


def test_lake_up_on_a_missing_bucket_says_so_before_starting_anything(
        s3_server: S3Server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The S3 settings come from the environment here; the error names the bucket and shows no secret."""
    monkeypatch.setenv("HOME", str(tmp_path))
    for key, value in s3_server.env().items():
        monkeypatch.setenv(key, value)
    cluster = Cluster("s3://no-such-bucket/wh", ports={n: free_port() for n in ("catalog", "writer", "compactor")},
                      compactor=False, rest_port=None, ui_port=None)
    with pytest.raises(ClusterError, match="bucket 'no-such-bucket' does not exist") as e:
        cluster.start()
    assert SECRET_KEY not in str(e.value) and s3_server.endpoint in str(e.value)
    assert cluster._procs == [] and not ClusterState.path(cluster.state_dir).exists()
