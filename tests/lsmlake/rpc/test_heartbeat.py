"""The heartbeat sender's settings, and that a catalog it cannot reach costs the service nothing but a warning."""

from __future__ import annotations

import logging

import pytest

from lsmlake.errors import InvalidInputError
from lsmlake.proto_gen.lsmlake.v1 import status_pb2
from lsmlake.rpc.catalog_client import CatalogClient
from lsmlake.rpc.heartbeat import BEAT_S, ENV, HeartbeatSender, interval_from_env
from tests.support.s3_server import free_port


def test_the_interval_comes_from_the_environment() -> None:
    assert interval_from_env({}) == BEAT_S == 5.0
    assert interval_from_env({ENV: "0.5"}) == 0.5
    for bad in ("0", "-1", "nan", "soon", "7200"):
        with pytest.raises(InvalidInputError) as e:
            interval_from_env({ENV: bad})
        assert str(e.value) == f"{ENV}={bad!r} is not a number of seconds in 0.05..3600"


def test_an_unreachable_catalog_is_a_warning_not_a_failure(caplog: pytest.LogCaptureFixture) -> None:
    client = CatalogClient(f"127.0.0.1:{free_port()}", timeout_s=1)  # nothing listens there
    sender = HeartbeatSender(client, lambda: status_pb2.HeartbeatRequest(
        kind=status_pb2.SERVICE_KIND_WRITER, instance_id="w"), interval_s=0.1)
    try:
        with caplog.at_level(logging.WARNING, logger="lsmlake.rpc.heartbeat"):
            assert sender.beat() is False and sender.beat() is False
            assert sender.beat(stopping=True) is False
        warnings = [r for r in caplog.records if "heartbeat to the catalog" in r.getMessage()]
        assert len(warnings) == 1  # the first of a run of failures only
        assert sender.sent == 0
    finally:
        client.close()
