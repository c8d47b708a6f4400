"""The writer's settings keep an object-store warehouse URI as given: query string, credentials and all."""

from __future__ import annotations

import pytest

from writer_svc.server import Settings

URI = "s3://AK:S%2FK@lake/prefix/wh?endpoint_override=127.0.0.1:9000&scheme=http&region=us-east-1"


@pytest.mark.parametrize("uri", [URI, "s3://lake/wh", "s3://lake/wh/", "gs://bucket/wh?endpoint_override=h:1"])
def test_warehouse_uri_from_a_flag_or_the_environment_is_kept_whole(uri: str) -> None:
    from_flag = Settings.from_args(["--warehouse", uri, "--catalog", "127.0.0.1:1"], env={})
    from_env = Settings.from_args([], env={"LSMLAKE_WAREHOUSE": uri, "LSMLAKE_CATALOG": "127.0.0.1:1"})
    assert from_flag.warehouse == uri
    assert from_env.warehouse == uri


def test_a_missing_warehouse_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        Settings.from_args(["--catalog", "127.0.0.1:1"], env={})
    assert "--warehouse and --catalog are required" in capsys.readouterr().err
