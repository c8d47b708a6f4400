"""lsmlake's health service on a real server (loopback): Watch streams hold no thread, see every status in
order, and a status can be set while watchers go away (grpcio's servicer deadlocks there, issue 19)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from lsmlake.rpc.health_service import HealthServicer
from lsmlake.rpc.server import new_server

TIMEOUT_S = 60.0
NAME = "test.Service"
WORKERS = 8  # calls in progress or queued at once: 64
SERVING, NOT_SERVING = health_pb2.HealthCheckResponse.SERVING, health_pb2.HealthCheckResponse.NOT_SERVING


@pytest.fixture
def served() -> Iterator[tuple[HealthServicer, str]]:
    h = HealthServicer()
    server, port = new_server(NAME, h, "127.0.0.1", 0, WORKERS)
    server.start()
    try:
        yield h, f"127.0.0.1:{port}"
    finally:
        server.stop(0)


def _watch(channel: grpc.Channel, service: str = NAME) -> Any:
    return health_pb2_grpc.HealthStub(channel).Watch(health_pb2.HealthCheckRequest(service=service),
                                                     timeout=TIMEOUT_S)


def test_watch_streams_hold_no_thread(served: tuple[HealthServicer, str]) -> None:
    """40 watchers on a server of 8 threads: every one answers, then every change reaches all of them."""
    h, address = served
    with grpc.insecure_channel(address) as ch:
        calls = [_watch(ch) for _ in range(40)]
        assert {next(c).status for c in calls} == {NOT_SERVING}  # new_server starts NOT_SERVING
        h.set(NAME, SERVING)
        assert {next(c).status for c in calls} == {SERVING}
        reply = health_pb2_grpc.HealthStub(ch).Check(health_pb2.HealthCheckRequest(service=NAME),
                                                     timeout=TIMEOUT_S)
        assert reply.status == SERVING
        for c in calls:
            c.cancel()


def test_statuses_arrive_in_order_and_shutdown_is_final(served: tuple[HealthServicer, str]) -> None:
    h, address = served
    with grpc.insecure_channel(address) as ch:
        unknown = _watch(ch, "test.Later")
        assert next(unknown).status == health_pb2.HealthCheckResponse.SERVICE_UNKNOWN
        with pytest.raises(grpc.RpcError) as e:
            health_pb2_grpc.HealthStub(ch).Check(health_pb2.HealthCheckRequest(service="test.Later"),
                                                 timeout=TIMEOUT_S)
        assert e.value.code() == grpc.StatusCode.NOT_FOUND
        h.set("test.Later", SERVING)
        assert next(unknown).status == SERVING

        watch = _watch(ch)
        assert next(watch).status == NOT_SERVING
        for i in range(10):  # the watcher may skip none: each change is sent before the next one
            h.set(NAME, SERVING if i % 2 == 0 else NOT_SERVING)
        assert [next(watch).status for _ in range(10)] == [SERVING, NOT_SERVING] * 5
        h.enter_graceful_shutdown()
        assert next(watch).status == NOT_SERVING and next(unknown).status == NOT_SERVING
        h.set(NAME, SERVING)  # ignored from now on
        reply = health_pb2_grpc.HealthStub(ch).Check(health_pb2.HealthCheckRequest(service=NAME),
                                                     timeout=TIMEOUT_S)
        assert reply.status == NOT_SERVING
        watch.cancel()
        unknown.cancel()


def test_setting_a_status_while_watchers_go_away_does_not_deadlock(served: tuple[HealthServicer, str]) -> None:
    """grpcio-health-checking's servicer sends to watchers under the lock a closing watcher's callback takes,
    on the server's event thread that the send waits for: it hangs here every time."""
    h, address = served
    channels = [grpc.insecure_channel(address) for _ in range(4)]
    try:
        calls = [_watch(channels[i % 4]) for i in range(48)]
        for c in calls:
            next(c)

        def storm() -> None:
            for i in range(20):
                h.set(NAME, SERVING if i % 2 == 0 else NOT_SERVING)
            h.enter_graceful_shutdown()

        setter = threading.Thread(target=storm, daemon=True)  # daemon: a deadlock fails the test, no more
        setter.start()
        for c in calls:
            c.cancel()
        setter.join(TIMEOUT_S)
        assert not setter.is_alive(), "setting the health status deadlocked"
    finally:
        for ch in channels:
            ch.close()


class _Context:
    """Just what Watch needs of a context, for the blocking form."""

    def __init__(self) -> None:
        self.callbacks: list[Any] = []

    def add_callback(self, callback: Any) -> bool:
        self.callbacks.append(callback)
        return True


def test_blocking_watch_for_a_server_without_non_blocking_streams() -> None:
    h = HealthServicer()
    context = _Context()
    statuses = iter(h.Watch(health_pb2.HealthCheckRequest(service=""), context))  # type: ignore[arg-type]
    assert next(statuses).status == SERVING
    h.set("", NOT_SERVING)
    assert next(statuses).status == NOT_SERVING
    for callback in context.callbacks:  # the call ends
        callback()
    assert list(statuses) == []
