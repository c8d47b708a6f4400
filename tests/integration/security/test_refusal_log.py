"""A flood of refused calls does not flood the log (issue 19): a real server with tokens on a loopback port.

Every refused call used to log a line (a WARNING for a missing or wrong token, an INFO for bytes that do not
decode). Now the first of each (code, reason, host) is logged and the repeats are counted and summed up in one
line per interval (`lsmlake.runtime.log_limit`), so nothing is lost but the repetition.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Iterator

import grpc
import pytest
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from lsmlake.proto_gen.lsmlake.v1 import catalog_pb2, catalog_pb2_grpc
from lsmlake.rpc.security import ChannelSecurity, ServerSecurity
from lsmlake.rpc.server import new_server

TIMEOUT_S = 30.0
FLOOD = 60
SERVICE = "lsmlake.v1.CatalogService"
READER_TOKEN = "flood-reader-token-0123456789"


@pytest.fixture(scope="module")
def address(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A catalog-shaped server checking tokens, with the generated base servicer (nothing gets that far here)."""
    tokens = tmp_path_factory.mktemp("flood") / "tokens.json"
    tokens.write_text(json.dumps({"tokens": [{"principal": "flood-reader", "role": "reader",
                                              "token": READER_TOKEN}]}))
    server, port = new_server(SERVICE, health.HealthServicer(), "127.0.0.1", 0, 4,
                              security=ServerSecurity(auth_tokens=str(tokens)))
    base = catalog_pb2_grpc.CatalogServiceServicer()  # type: ignore[abstract]  # nothing reaches it
    catalog_pb2_grpc.add_CatalogServiceServicer_to_server(base, server)
    server.start()
    try:
        yield f"127.0.0.1:{port}"
    finally:
        server.stop(0)


def _flush() -> None:
    """Log what earlier tests left held back, and start a new interval (a no-op before the fix)."""
    try:
        from lsmlake.runtime.log_limit import flush_all
    except ImportError:
        return
    flush_all()


def _refused(call: object, code: grpc.StatusCode) -> None:
    with pytest.raises(grpc.RpcError) as e:
        call()  # type: ignore[operator]
    assert e.value.code() == code


def _held_back(summaries: list[str], label: str) -> int:
    """The count a summary line gives for the key whose label contains `label`."""
    total = 0
    for s in summaries:
        for n, key in re.findall(r"([\d,]+) x ([^;]+)", s.split("not logged one by one: ", 1)[-1]):
            if label in key:
                total += int(n.replace(",", ""))
    return total


def test_a_flood_without_a_token_logs_a_few_lines(address: str, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="lsmlake.rpc.interceptor")
    _flush()
    caplog.clear()
    with grpc.insecure_channel(address) as ch:
        stub = catalog_pb2_grpc.CatalogServiceStub(ch)
        for _ in range(FLOOD):
            _refused(lambda: stub.ListDatabases(catalog_pb2.ListDatabasesRequest(), timeout=TIMEOUT_S),
                     grpc.StatusCode.UNAUTHENTICATED)
    refusals = [r.getMessage() for r in caplog.records if r.name == "lsmlake.rpc.interceptor"]
    one_by_one = [m for m in refusals if m.startswith("refused ")]
    assert 1 <= len(one_by_one) <= 3, f"{len(one_by_one)} lines for {FLOOD} refused calls"
    assert "no bearer token" in one_by_one[0] and "127.0.0.1" in one_by_one[0]
    assert "/lsmlake.v1.CatalogService/ListDatabases" in one_by_one[0]

    _flush()
    summaries = [r.getMessage() for r in caplog.records
                 if r.name == "lsmlake.rpc.interceptor" and "not logged one by one" in r.getMessage()]
    assert summaries and all(r.levelno == logging.WARNING for r in caplog.records)
    # every refusal is accounted for: logged, or counted in a summary
    assert len(one_by_one) + _held_back(summaries, "UNAUTHENTICATED ipv4:127.0.0.1 no bearer token") == FLOOD


def test_a_flood_of_one_principal_is_counted_under_its_name(address: str,
                                                            caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="lsmlake.rpc.interceptor")
    _flush()
    caplog.clear()
    with ChannelSecurity(token=READER_TOKEN).open_channel(address) as ch:
        stub = catalog_pb2_grpc.CatalogServiceStub(ch)
        for i in range(FLOOD):
            _refused(lambda i=i: stub.CreateDatabase(catalog_pb2.CreateDatabaseRequest(name=f"d{i}"),
                                                     timeout=TIMEOUT_S), grpc.StatusCode.PERMISSION_DENIED)
    one_by_one = [r.getMessage() for r in caplog.records if r.getMessage().startswith("refused ")]
    assert 1 <= len(one_by_one) <= 3, f"{len(one_by_one)} lines for {FLOOD} refused calls"
    assert "flood-reader has role reader" in one_by_one[0]
    _flush()
    summaries = [r.getMessage() for r in caplog.records if "not logged one by one" in r.getMessage()]
    assert len(one_by_one) + _held_back(summaries, "flood-reader has role reader") == FLOOD


def test_a_flood_of_undecodable_bytes_logs_a_few_lines(address: str, caplog: pytest.LogCaptureFixture) -> None:
    """Health checking is open: garbage sent to it needs no token, and is refused INVALID_ARGUMENT."""
    caplog.set_level(logging.INFO, logger="lsmlake.rpc.errors")
    _flush()
    caplog.clear()
    with grpc.insecure_channel(address) as ch:
        check = ch.unary_unary("/grpc.health.v1.Health/Check", request_serializer=lambda b: b,
                               response_deserializer=lambda b: b)
        for _ in range(FLOOD):
            _refused(lambda: check(b"\xff\xff\xff\xff", timeout=TIMEOUT_S), grpc.StatusCode.INVALID_ARGUMENT)
        # a valid check still answers
        reply = health_pb2_grpc.HealthStub(ch).Check(health_pb2.HealthCheckRequest(), timeout=TIMEOUT_S)
        assert reply.status == health_pb2.HealthCheckResponse.NOT_SERVING
    one_by_one = [r.getMessage() for r in caplog.records
                  if r.name == "lsmlake.rpc.errors" and r.getMessage().startswith("refused")]
    assert 1 <= len(one_by_one) <= 3, f"{len(one_by_one)} lines for {FLOOD} refused calls"
    assert "not a valid grpc.health.v1.HealthCheckRequest" in one_by_one[0]
    _flush()
    summaries = [r.getMessage() for r in caplog.records if "not logged one by one" in r.getMessage()]
    assert len(one_by_one) + _held_back(summaries, "grpc.health.v1.HealthCheckRequest ipv4:127.0.0.1") == FLOOD
