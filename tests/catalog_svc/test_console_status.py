"""The catalog's status service over real gRPC, with two catalog replicas over one warehouse and metadata store:
the writer's and compactor's heartbeat senders (their services' own modules) report to one replica and the other
lists them; each replica lists itself; a stopped service is down at once, a silent one after the missed beats;
bad heartbeats are refused and recorded nowhere; with tokens, a service token reports and a reader lists."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from compactor_svc.heartbeat import compactor_heartbeat
from compactor_svc.ownership import Ownership
from compactor_svc.state import CompactorState, RunningPlan
from lsmlake.metastore.services import MISSED_BEATS
from lsmlake.proto_gen.lsmlake.v1 import status_pb2, status_pb2_grpc
from lsmlake.rpc.catalog_client import CatalogClient
from lsmlake.rpc.heartbeat import HeartbeatSender
from lsmlake.rpc.security import ChannelSecurity, ServerSecurity
from tests.support.local_server import Local, local_server
from tests.support.security import Tokens
from writer_svc.heartbeat import writer_heartbeat

TIMEOUT_S = 30.0
BEAT_S = 0.2


@pytest.fixture
def replicas(tmp_path: Path) -> Iterator[tuple[Local, Local]]:
    warehouse = str(tmp_path / "wh")
    quiet = {"expire_interval_s": 0, "orphan_interval_s": 0, "reconcile_interval_s": 0, "health_interval_s": 0}
    with local_server(warehouse, **quiet) as a, local_server(warehouse, **quiet) as b:
        yield a, b


def _list(local: Local) -> status_pb2.ListServicesResponse:
    return status_pb2_grpc.StatusServiceStub(local.channel).ListServices(status_pb2.ListServicesRequest(),
                                                                         timeout=TIMEOUT_S)


def _by_id(local: Local) -> dict[str, status_pb2.ServiceStatus]:
    return {s.instance_id: s for s in _list(local).services}


def _until(what: str, check: object, deadline_s: float = 30.0) -> None:
    end = time.monotonic() + deadline_s
    while not check():  # type: ignore[operator]
        if time.monotonic() > end:
            raise AssertionError(f"not within {deadline_s} s: {what}")
        time.sleep(0.05)


def test_heartbeats_to_one_replica_are_listed_by_the_other(replicas: tuple[Local, Local]) -> None:
    a, b = replicas
    client = CatalogClient(f"127.0.0.1:{b.server.port}", timeout_s=10)
    ownership, state = Ownership(), CompactorState()
    ownership.update({0, 2}, 4)
    state.plan_started(RunningPlan("db.t", "17", 3, True, time.monotonic(), ()))
    writer = writer_heartbeat(client, "writer-1", "127.0.0.1:1", "writer-1-abc", BEAT_S).start()
    compactor = compactor_heartbeat(client, "compactor-1", "127.0.0.1:2", ownership, state, BEAT_S).start()
    try:
        _until("both heartbeats listed", lambda: {"writer-1", "compactor-1"} <= set(_by_id(a)))
        listed = _by_id(a)
        w, c = listed["writer-1"], listed["compactor-1"]
        assert w.kind == status_pb2.SERVICE_KIND_WRITER and w.up and w.address == "127.0.0.1:1"
        assert w.detail == "commit user writer-1-abc" and w.interval_ms == 200
        assert c.kind == status_pb2.SERVICE_KIND_COMPACTOR and c.up
        assert list(c.owned_partitions) == [0, 2] and c.total_partitions == 4
        (plan,) = c.running_plans
        assert (plan.table, plan.plan_id, plan.buckets, plan.full) == ("db.t", "17", 3, True)
        # each replica reports itself, and both list the same services
        catalogs = [s for s in _list(a).services if s.kind == status_pb2.SERVICE_KIND_CATALOG]
        assert sorted(s.address.rsplit(":", 1)[1] for s in catalogs) == sorted(
            str(r.server.port) for r in (a, b)) and all(s.up for s in catalogs)
        assert set(_by_id(a)) == set(_by_id(b))

        # a compactor that stops says so: down at once, with why
        compactor.stop()
        c = _by_id(a)["compactor-1"]
        assert not c.up and "stopped" in c.down_reason
        # a writer that dies says nothing: down once it missed the beats
        writer.stop(goodbye=False)
        _until("the silent writer shown down", lambda: not _by_id(a)["writer-1"].up)
        assert f"{MISSED_BEATS} missed" in _by_id(b)["writer-1"].down_reason
        assert _list(a).missed_beats == MISSED_BEATS
    finally:
        writer.stop(goodbye=False)
        compactor.stop(goodbye=False)
        client.close()


@pytest.mark.parametrize(("request_", "message"), [
    (status_pb2.HeartbeatRequest(instance_id="x", interval_ms=1000), "is not a writer or compactor"),
    (status_pb2.HeartbeatRequest(kind=status_pb2.SERVICE_KIND_CATALOG, instance_id="x", interval_ms=1000),
     "is not a writer or compactor"),
    (status_pb2.HeartbeatRequest(kind=status_pb2.SERVICE_KIND_WRITER, instance_id="x"),
     "interval_ms 0 must be positive"),
    (status_pb2.HeartbeatRequest(kind=status_pb2.SERVICE_KIND_WRITER, interval_ms=1000),
     "instance id '' must be a non-empty string"),
], ids=["no-kind", "catalog", "no-interval", "no-id"])
def test_bad_heartbeats_are_refused_and_recorded_nowhere(replicas: tuple[Local, Local],
                                                         request_: status_pb2.HeartbeatRequest, message: str) -> None:
    a, _ = replicas
    before = _by_id(a)
    with pytest.raises(grpc.RpcError) as e:
        status_pb2_grpc.StatusServiceStub(a.channel).Heartbeat(request_, timeout=TIMEOUT_S)
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT and message in (e.value.details() or "")
    assert set(_by_id(a)) == set(before)


def test_with_tokens_a_service_token_beats_and_a_reader_lists(tmp_path: Path, tokens: Tokens) -> None:
    warehouse = str(tmp_path / "wh")
    with local_server(warehouse, security=ServerSecurity(auth_tokens=tokens.file), expire_interval_s=0,
                      orphan_interval_s=0, reconcile_interval_s=0, health_interval_s=0) as local:
        target = f"127.0.0.1:{local.server.port}"

        def sender(token: str) -> tuple[CatalogClient, HeartbeatSender]:
            client = CatalogClient(target, timeout_s=10, security=ChannelSecurity(token=token))
            return client, writer_heartbeat(client, f"writer-{token[:4]}", "h:1", "u", BEAT_S)

        service_client, service = sender(tokens.service)
        writer_client, writer = sender(tokens.writer)
        reader_client = CatalogClient(target, timeout_s=10, security=ChannelSecurity(token=tokens.reader))
        try:
            assert service.beat() and not writer.beat()  # a writer token may not report a service
            listing = reader_client.call(status_pb2_grpc.StatusServiceStub(reader_client.channel).ListServices,
                                         status_pb2.ListServicesRequest(), changes_state=False)
            ids = {s.instance_id for s in listing.services}
            assert f"writer-{tokens.service[:4]}" in ids and f"writer-{tokens.writer[:4]}" not in ids
        finally:
            for c in (service_client, writer_client, reader_client):
                c.close()
