"""The role table covers every RPC of every service, and a real server enforces it method by method."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import grpc
import pytest
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

from lsmlake.auth.roles import METHOD_ROLES, Role
from lsmlake.proto_gen.lsmlake.v1 import (
    catalog_pb2,
    catalog_pb2_grpc,
    compactor_pb2,
    compactor_pb2_grpc,
    status_pb2,
    status_pb2_grpc,
    writer_pb2,
    writer_pb2_grpc,
)
from lsmlake.rpc.security import ChannelSecurity, ServerSecurity
from lsmlake.rpc.server import new_server
from tests.support.paths import ROOT
from tests.support.security import Tokens

DOCS = ROOT / "docs" / "security.md"
TIMEOUT_S = 30.0

# What each role is meant to do, written out independently of the code's table.
READ = {"CatalogService": {"ListDatabases", "GetTable", "ListTables", "GetSnapshot", "ListSnapshots",
                           "LatestSnapshot", "SnapshotAtTime", "PlanScan", "WatchSnapshots", "ListCompactionPlans",
                           "FindWrites", "ListTableHealth", "ListTags", "GetTag"},
        "CompactorService": {"CompactionStatus", "BucketLevels"},
        "StatusService": {"ListServices"}}
WRITE = {"CatalogService": {"Commit"},
         "WriterService": {"Write", "WriteRows"},
         "CompactorService": {"TriggerCompaction"}}
SERVICE = {"CatalogService": {"AllocateSequences", "AssignBuckets", "RequestCompaction", "StartCompaction",
                              "CompleteCompaction", "RollbackCompaction"},
           "StatusService": {"Heartbeat"}}
ADMIN = {"CatalogService": {"CreateDatabase", "DropDatabase", "CreateTable", "DropTable", "AlterTable",
                            "RenameTable", "CreateTag", "DeleteTag", "ExpireSnapshots", "RemoveOrphanFiles",
                            "SyncIceberg"}}

SERVICES = [(catalog_pb2, catalog_pb2_grpc, "CatalogService"), (writer_pb2, writer_pb2_grpc, "WriterService"),
            (compactor_pb2, compactor_pb2_grpc, "CompactorService"), (status_pb2, status_pb2_grpc, "StatusService")]


def _all_methods() -> dict[str, Any]:
    """Every method of every service in the generated code: path -> MethodDescriptor."""
    out = {}
    for module in (catalog_pb2, writer_pb2, compactor_pb2, status_pb2):
        for service in module.DESCRIPTOR.services_by_name.values():
            for m in service.methods:
                out[f"/{service.full_name}/{m.name}"] = m
    return out


def _expected(path: str) -> Role:
    service, method = path.strip("/").split("/")
    service = service.rsplit(".", 1)[-1]
    for role, table in ((Role.READER, READ), (Role.WRITER, WRITE), (Role.SERVICE, SERVICE), (Role.ADMIN, ADMIN)):
        if method in table.get(service, ()):
            return role
    raise AssertionError(f"{path} has no expected role in this test")


def test_every_method_of_every_service_has_a_role_and_no_other_entry() -> None:
    methods = _all_methods()
    assert len(methods) >= 27
    missing = sorted(set(methods) - set(METHOD_ROLES))
    stale = sorted(set(METHOD_ROLES) - set(methods))
    assert not missing, f"methods without a role (denied to everybody): {missing}"
    assert not stale, f"roles for methods no service has: {stale}"
    assert {p: _expected(p) for p in methods} == METHOD_ROLES


def test_the_role_table_in_the_docs_is_the_codes() -> None:
    rows = re.findall(r"^\|\s*`?(\w+)`?\s*\|\s*`?(\w+)`?\s*\|\s*`?(reader|writer|service|admin)`?\s*\|",
                      DOCS.read_text(), flags=re.MULTILINE)
    documented = {f"/lsmlake.v1.{s}/{m}": Role.parse(r) for s, m, r in rows}
    assert documented == METHOD_ROLES


@pytest.fixture(scope="module")
def servers(tokens: Tokens) -> Iterator[dict[str, int]]:
    """A real server per service, with token checking and the generated base servicers (they answer
    UNIMPLEMENTED: a call that gets that far passed the checks). Service name -> port."""
    security = ServerSecurity(auth_tokens=tokens.file)
    ports, running = {}, []
    for pb2, pb2_grpc, name in SERVICES:
        full = pb2.DESCRIPTOR.services_by_name[name].full_name
        server, port = new_server(full, health.HealthServicer(), "127.0.0.1", 0, 4, security=security)
        getattr(pb2_grpc, f"add_{name}Servicer_to_server")(getattr(pb2_grpc, f"{name}Servicer")(), server)
        server.start()
        ports[name], running = port, [*running, server]
    try:
        yield ports
    finally:
        for s in running:
            s.stop(0)


def _call(channel: grpc.Channel, path: str, method: Any) -> grpc.StatusCode:
    """The status of one call with an empty request (valid for every message type)."""
    kw = {"request_serializer": lambda _: b"", "response_deserializer": lambda b: b}
    try:
        if method.client_streaming and method.server_streaming:
            list(channel.stream_stream(path, **kw)(iter([b""]), timeout=TIMEOUT_S))
        elif method.client_streaming:
            channel.stream_unary(path, **kw)(iter([b""]), timeout=TIMEOUT_S)
        elif method.server_streaming:
            list(channel.unary_stream(path, **kw)(b"", timeout=TIMEOUT_S))
        else:
            channel.unary_unary(path, **kw)(b"", timeout=TIMEOUT_S)
    except grpc.RpcError as e:
        return e.code()
    return grpc.StatusCode.OK


@pytest.mark.parametrize("who", ["nobody", "unknown", "reader", "writer", "service", "admin"])
def test_each_role_reaches_exactly_the_methods_it_may_call(servers: dict[str, int], tokens: Tokens,
                                                           who: str) -> None:
    token = None if who == "nobody" else tokens.of(who)
    role = None if who in ("nobody", "unknown") else Role.parse(who)
    seen: dict[str, grpc.StatusCode] = {}
    want: dict[str, grpc.StatusCode] = {}
    for path, method in _all_methods().items():
        service = path.strip("/").split("/")[0].rsplit(".", 1)[-1]
        with ChannelSecurity(token=token).open_channel(f"127.0.0.1:{servers[service]}") as ch:
            seen[path] = _call(ch, path, method)
        if role is None:
            want[path] = grpc.StatusCode.UNAUTHENTICATED
        elif role >= _expected(path):
            want[path] = grpc.StatusCode.UNIMPLEMENTED  # let through to the (base) servicer
        else:
            want[path] = grpc.StatusCode.PERMISSION_DENIED
    assert seen == want


def test_health_and_reflection_need_no_token(servers: dict[str, int]) -> None:
    with grpc.insecure_channel(f"127.0.0.1:{servers['CatalogService']}") as ch:
        reply = health_pb2_grpc.HealthStub(ch).Check(health_pb2.HealthCheckRequest(), timeout=TIMEOUT_S)
        assert reply.status == health_pb2.HealthCheckResponse.NOT_SERVING  # nobody switched it on here
        answers = list(reflection_pb2_grpc.ServerReflectionStub(ch).ServerReflectionInfo(
            iter([reflection_pb2.ServerReflectionRequest(list_services="")]), timeout=TIMEOUT_S))
        names = {s.name for s in answers[0].list_services_response.service}
        assert "lsmlake.v1.CatalogService" in names


def test_a_method_missing_from_the_table_is_denied_even_to_admin(tokens: Tokens) -> None:
    server, port = new_server("lsmlake.v1.CatalogService", health.HealthServicer(), "127.0.0.1", 0, 2,
                              security=ServerSecurity(auth_tokens=tokens.file))
    handler = grpc.unary_unary_rpc_method_handler(lambda req, ctx: b"secret", request_deserializer=None,
                                                  response_serializer=None)
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(
        "lsmlake.v1.CatalogService", {"NewMethod": handler}),))
    server.start()
    try:
        with ChannelSecurity(token=tokens.admin).open_channel(f"127.0.0.1:{port}") as ch:
            with pytest.raises(grpc.RpcError) as e:
                ch.unary_unary("/lsmlake.v1.CatalogService/NewMethod")(b"", timeout=TIMEOUT_S)
            assert e.value.code() == grpc.StatusCode.PERMISSION_DENIED
            assert "not open to any role" in e.value.details()
    finally:
        server.stop(0)
