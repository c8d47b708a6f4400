"""Open streams cannot take the threads unary calls (commits) need: the catalog service with tokens, on a
loopback port, with many health Watch, WatchSnapshots and reflection streams open at once (issue 19).

The catalog has 16 worker threads. Before the fix every open health Watch (the interceptor made it blocking)
and every WatchSnapshots or reflection stream held one, so 16 of them froze the service. Each test asserts
outcomes only (which calls are answered, which refused and how), with generous deadlines.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor, wait
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

from catalog_svc.server import CatalogServer, Settings
from lsmlake.proto_gen.lsmlake.v1 import catalog_pb2, catalog_pb2_grpc, common_pb2
from lsmlake.rpc.security import ChannelSecurity, ServerSecurity
from tests.support.local_server import Local

CALL_S = 30.0  # a unary call that must succeed; generous for a loaded machine, and a frozen pool still fails it
STREAM_S = 120.0  # deadline of a stream the test opens (it cancels them itself)
ANSWER_S = 60.0  # how long the first answers of all open streams may take
PRINCIPALS = ("alice", "bob", "carol")  # readers
ROLES = {**{p: "reader" for p in PRINCIPALS}, "writer": "writer", "admin": "admin"}
WORKERS = 16  # the catalog's default


@dataclass
class Catalog:
    server: CatalogServer
    address: str
    warehouse: str
    stack: ExitStack
    ident: common_pb2.TableIdentifier

    def channel(self, who: str | None) -> grpc.Channel:
        """A new channel (closed at the end of the test) with `who`'s token, or none."""
        token = None if who is None else f"token-of-{who}-0123456789abcdef"
        return self.stack.enter_context(ChannelSecurity(token=token).open_channel(self.address))

    def stub(self, who: str | None) -> catalog_pb2_grpc.CatalogServiceStub:
        return catalog_pb2_grpc.CatalogServiceStub(self.channel(who))

    def commit(self, number: int) -> None:
        """A commit of the writer, which must succeed while streams are open."""
        local = Local(self.server, self.stub("writer"), self.channel("writer"), self.warehouse)
        local.commit(self.ident, "stream-test", number, local.write(self.ident, {"id": [number], "v": ["x"]}))

    def unary_calls_are_answered(self, number: int) -> None:
        assert "s" in self.stub("alice").ListDatabases(catalog_pb2.ListDatabasesRequest(), timeout=CALL_S).databases
        self.commit(number)


class Streams:
    """Streams opened by a test, cancelled at its end (before its server stops)."""

    def __init__(self) -> None:
        self.calls: list[Any] = []
        self.unblock = threading.Event()  # ends the request streams of reflection calls

    def add(self, call: Any) -> Any:
        self.calls.append(call)
        return call

    def close(self) -> None:
        self.unblock.set()
        for c in self.calls:
            c.cancel()


@pytest.fixture
def streams() -> Iterator[Streams]:
    s = Streams()
    try:
        yield s
    finally:
        s.close()


@contextmanager
def running_catalog(tmp_path: Path, streams: Streams, **settings: Any) -> Iterator[Catalog]:
    tokens = tmp_path / "tokens.json"
    tokens.write_text(json.dumps({"tokens": [{"principal": p, "role": r, "token": f"token-of-{p}-0123456789abcdef"}
                                             for p, r in ROLES.items()]}))
    warehouse = str(tmp_path / "wh")
    server = CatalogServer(Settings(warehouse=warehouse, metastore=f"sqlite:///{tmp_path}/meta.sqlite",
                                    security=ServerSecurity(auth_tokens=str(tokens)), expire_interval_s=0,
                                    orphan_interval_s=0, reconcile_interval_s=0, **settings))
    stack = ExitStack()
    try:
        port = server.start()
        cat = Catalog(server, f"127.0.0.1:{port}", warehouse, stack, common_pb2.TableIdentifier())
        admin = Local(server, cat.stub("admin"), cat.channel("admin"), warehouse)
        cat.ident = admin.create_table("s", "t", [("id", "BIGINT NOT NULL"), ("v", "STRING")], ["id"],
                                       {"bucket": "1"})
        cat.commit(1)  # a snapshot: WatchSnapshots from 0 answers at once when admitted
        yield cat
    finally:
        streams.close()  # the test's streams end before the server stops (which would wait for them)
        stack.close()
        server.stop()


@pytest.fixture
def catalog(tmp_path: Path, streams: Streams) -> Iterator[Catalog]:
    with running_catalog(tmp_path, streams) as cat:
        yield cat


def first_answer(call: Any) -> Any:
    """The first response of a stream, or the status code that ended it before one."""
    try:
        return next(call)
    except grpc.RpcError as e:
        return e.code()


def first_answers(calls: list[Any]) -> list[Any]:
    """The first answers of `calls`, waited for together (a stream the server never serves does not answer)."""
    with ThreadPoolExecutor(max_workers=len(calls)) as pool:
        futures = [pool.submit(first_answer, c) for c in calls]
        _, not_done = wait(futures, timeout=ANSWER_S)
        if not_done:  # cancelled, so that the pool's threads waiting for them end
            for c in calls:
                c.cancel()
        assert not not_done, f"{len(not_done)} of {len(calls)} streams never answered (the server's threads " \
                             "are all taken)"
        return [f.result() for f in futures]


def open_watch(cat: Catalog, streams: Streams, who: str) -> Any:
    """WatchSnapshots of the test table from its start: an admitted stream answers with snapshot 1 at once and
    then holds a server thread, waiting for the next commit."""
    return streams.add(cat.stub(who).WatchSnapshots(
        catalog_pb2.WatchSnapshotsRequest(table=cat.ident, after_snapshot_id=0), timeout=STREAM_S))


def watch_snapshots(cat: Catalog, streams: Streams, who: str) -> Any:
    return first_answers([open_watch(cat, streams, who)])[0]


def watch_health(cat: Catalog, streams: Streams, n: int) -> list[Any]:
    channel = cat.channel(None)  # health needs no token
    stub = health_pb2_grpc.HealthStub(channel)
    calls = [streams.add(stub.Watch(health_pb2.HealthCheckRequest(service=""), timeout=STREAM_S))
             for _ in range(n)]
    return first_answers(calls)


def _refused(answer: Any) -> bool:
    return answer == grpc.StatusCode.RESOURCE_EXHAUSTED


def _admitted_snapshot(answer: Any) -> bool:
    return isinstance(answer, catalog_pb2.WatchSnapshotsResponse) and answer.snapshot.id == 1


# -- regressions: each of these froze the catalog before the fix -------------------------------------------------


def test_32_health_watch_streams_hold_no_thread(catalog: Catalog, streams: Streams) -> None:
    """The health servicer's Watch is non-blocking: the undecodable-request interceptor must keep it so (it made
    it a blocking function, and each open Watch held a thread)."""
    answers = watch_health(catalog, streams, 2 * WORKERS)
    assert all(a.status == health_pb2.HealthCheckResponse.SERVING for a in answers), answers
    catalog.unary_calls_are_answered(2)


def test_one_reader_opening_16_snapshot_streams_leaves_threads_for_commits(catalog: Catalog,
                                                                          streams: Streams) -> None:
    answers = first_answers([open_watch(catalog, streams, "alice") for _ in range(WORKERS)])
    assert all(_admitted_snapshot(a) or _refused(a) for a in answers), answers
    admitted = sum(map(_admitted_snapshot, answers))
    assert 1 <= admitted < WORKERS // 2 + 1, f"{admitted} of {WORKERS} streams of one reader admitted"
    catalog.unary_calls_are_answered(2)


def test_three_readers_opening_16_snapshot_streams_each_leave_threads_for_commits(catalog: Catalog,
                                                                                 streams: Streams) -> None:
    answers = first_answers([open_watch(catalog, streams, who) for who in PRINCIPALS for _ in range(WORKERS)])
    assert all(_admitted_snapshot(a) or _refused(a) for a in answers), answers
    assert 1 <= sum(map(_admitted_snapshot, answers)) <= WORKERS // 2
    catalog.unary_calls_are_answered(2)


def test_16_reflection_streams_leave_threads_for_commits(catalog: Catalog, streams: Streams) -> None:
    """Reflection is open to anybody, and its stream holds a thread while it waits for the client's next
    request: capped per host and in total like any stream."""

    def requests() -> Iterator[reflection_pb2.ServerReflectionRequest]:
        yield reflection_pb2.ServerReflectionRequest(list_services="")
        streams.unblock.wait(STREAM_S)  # the stream stays open, the server waiting for the next request

    stub = reflection_pb2_grpc.ServerReflectionStub(catalog.channel(None))
    answers = first_answers([streams.add(stub.ServerReflectionInfo(requests(), timeout=STREAM_S))
                             for _ in range(WORKERS)])
    listed = [a for a in answers if isinstance(a, reflection_pb2.ServerReflectionResponse)]
    assert all(_refused(a) for a in answers if a not in listed), answers
    assert 1 <= len(listed) <= WORKERS // 2
    assert "lsmlake.v1.CatalogService" in {s.name for s in listed[0].list_services_response.service}
    catalog.unary_calls_are_answered(2)


# -- the limits --------------------------------------------------------------------------------------------------


@pytest.fixture
def small_limits(tmp_path: Path, streams: Streams) -> Iterator[Catalog]:
    from lsmlake.rpc.limits import RpcLimits

    with running_catalog(tmp_path, streams, limits=RpcLimits(max_streams=6, max_streams_per_principal=3,
                                                             max_watch_streams=32)) as cat:
        yield cat


def _eventually_admitted(open_one: Any) -> Any:
    """Open streams until one is admitted (a released stream is uncounted once the server is done with it)."""
    for _ in range(int(ANSWER_S / 0.2)):
        answer = open_one()
        if not _refused(answer):
            return answer
        threading.Event().wait(0.2)
    return answer


def _eventually_served(make_call: Any) -> Any:
    for _ in range(int(ANSWER_S / 0.2)):
        try:
            return make_call()
        except grpc.RpcError as e:
            if e.code() != grpc.StatusCode.RESOURCE_EXHAUSTED:
                raise
        threading.Event().wait(0.2)
    return make_call()


def test_a_principal_and_the_server_are_capped(small_limits: Catalog, streams: Streams) -> None:
    cat = small_limits
    alice = [watch_snapshots(cat, streams, "alice") for _ in range(3)]
    assert all(map(_admitted_snapshot, alice)), alice
    with pytest.raises(grpc.RpcError) as fourth:
        next(open_watch(cat, streams, "alice"))
    assert fourth.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert "principal alice already holds 3 open streams" in fourth.value.details()
    assert "--max-streams-per-principal" in fourth.value.details()

    assert all(_admitted_snapshot(watch_snapshots(cat, streams, "bob")) for _ in range(3))
    with pytest.raises(grpc.RpcError) as full:
        next(open_watch(cat, streams, "carol"))
    assert full.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert "already holds 6 open streams" in full.value.details() and "--max-streams" in full.value.details()
    cat.unary_calls_are_answered(2)

    streams.calls[0].cancel()  # one of alice's: its thread is given back, and the count with it
    assert _admitted_snapshot(_eventually_admitted(lambda: watch_snapshots(cat, streams, "carol")))
    assert _refused(watch_snapshots(cat, streams, "carol"))  # 6 open again
    cat.unary_calls_are_answered(3)


def test_health_watch_streams_are_capped_per_host(small_limits: Catalog, streams: Streams) -> None:
    """32 threadless streams at most, 32/16 = 2 of them per host: a flood of Watch streams costs bounded memory."""
    cat = small_limits
    answers = watch_health(cat, streams, 3)
    assert sum(isinstance(a, health_pb2.HealthCheckResponse) for a in answers) == 2, answers
    refused = [a for a in answers if not isinstance(a, health_pb2.HealthCheckResponse)]
    assert refused == [grpc.StatusCode.RESOURCE_EXHAUSTED]
    admitted = [c for c, a in zip(streams.calls, answers, strict=True) if isinstance(a, health_pb2.HealthCheckResponse)]
    admitted[0].cancel()
    again = _eventually_admitted(lambda: watch_health(cat, streams, 1)[0])
    assert isinstance(again, health_pb2.HealthCheckResponse) and again.status == health_pb2.HealthCheckResponse.SERVING
    cat.unary_calls_are_answered(2)


def test_callers_without_a_token_take_at_most_half_the_streams(tmp_path: Path, streams: Streams) -> None:
    """Reflection needs no token: its streams may hold half of --max-streams, the rest stays for readers."""
    from lsmlake.rpc.limits import RpcLimits

    with running_catalog(tmp_path, streams, limits=RpcLimits(max_streams=6, max_streams_per_principal=6)) as cat:

        def requests() -> Iterator[reflection_pb2.ServerReflectionRequest]:
            yield reflection_pb2.ServerReflectionRequest(list_services="")
            streams.unblock.wait(STREAM_S)

        stub = reflection_pb2_grpc.ServerReflectionStub(cat.channel(None))
        answers = first_answers([streams.add(stub.ServerReflectionInfo(requests(), timeout=STREAM_S))
                                 for _ in range(8)])
        refused = [a for a in answers if not isinstance(a, reflection_pb2.ServerReflectionResponse)]
        assert len(refused) == 5 and set(refused) == {grpc.StatusCode.RESOURCE_EXHAUSTED}
        with pytest.raises(grpc.RpcError) as stranger:
            next(streams.add(stub.ServerReflectionInfo(requests(), timeout=STREAM_S)))
        assert "callers without a token already hold 3 open streams" in stranger.value.details()
        assert all(_admitted_snapshot(watch_snapshots(cat, streams, "alice")) for _ in range(3))
        assert _refused(watch_snapshots(cat, streams, "bob"))  # 6 in all
        cat.unary_calls_are_answered(2)


def test_the_limits_are_flags_and_environment(tmp_path: Path) -> None:
    from compactor_svc.server import Settings as CompactorSettings
    from lsmlake.rpc.limits import RpcLimits
    from writer_svc.server import Settings as WriterSettings

    base = ["--warehouse", str(tmp_path)]
    s = Settings.from_args(base, env={})
    assert (s.workers, s.limits.resolved(s.workers)) == (16, RpcLimits(128, 8, 4, 1024))
    s = Settings.from_args([*base, "--workers", "40", "--max-streams", "10", "--max-streams-per-principal", "5",
                            "--max-concurrent-rpcs", "0", "--max-watch-streams", "64"], env={})
    assert (s.workers, s.limits) == (40, RpcLimits(0, 10, 5, 64))
    s = Settings.from_args(base, env={"LSMLAKE_WORKERS": "8", "LSMLAKE_MAX_STREAMS": "2"})
    assert (s.workers, s.limits.resolved(s.workers)) == (8, RpcLimits(64, 2, 1, 1024))
    w = WriterSettings.from_args([*base, "--catalog", "c:1"], env={})
    assert (w.workers, w.limits.resolved(w.workers)) == (32, RpcLimits(256, 16, 8, 1024))
    k = CompactorSettings.from_args([*base, "--catalog", "c:1", "--kafka", "k:1"], env={})
    assert (k.workers, k.limits.resolved(k.workers)) == (8, RpcLimits(64, 4, 2, 1024))
    for bad in (["--max-streams", "16"], ["--workers", "0"], ["--max-streams", "-1"],
                ["--max-concurrent-rpcs", "3"], ["--workers", "many"]):
        with pytest.raises(SystemExit):
            Settings.from_args([*base, *bad], env={})


def test_calls_beyond_max_concurrent_rpcs_are_refused_not_queued() -> None:
    """gRPC's `maximum_concurrent_rpcs` is set on every server `new_server` builds (default 8 x workers)."""
    from grpc_health.v1 import health

    from lsmlake.rpc.limits import RpcLimits
    from lsmlake.rpc.server import new_server

    entered, release = threading.Semaphore(0), threading.Event()

    def slow(request: bytes, context: grpc.ServicerContext) -> bytes:
        entered.release()
        release.wait(CALL_S)
        return b"done"

    server, port = new_server("test.Slow", health.HealthServicer(), "127.0.0.1", 0, 2,
                              limits=RpcLimits(max_concurrent_rpcs=2))
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(
        "test.Slow", {"Call": grpc.unary_unary_rpc_method_handler(slow)}),))
    server.start()
    try:
        with grpc.insecure_channel(f"127.0.0.1:{port}") as ch:
            call = ch.unary_unary("/test.Slow/Call")
            running = [call.future(b"", timeout=CALL_S) for _ in range(2)]
            assert entered.acquire(timeout=CALL_S) and entered.acquire(timeout=CALL_S)
            with pytest.raises(grpc.RpcError) as e:
                call(b"", timeout=CALL_S)
            assert e.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
            release.set()
            assert [f.result() for f in running] == [b"done", b"done"]
            assert _eventually_served(lambda: call(b"", timeout=CALL_S)) == b"done"  # the server uncounts them
    finally:
        release.set()
        server.stop(0)
