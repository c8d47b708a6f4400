"""How much of a gRPC server open streams, and one caller's streams, may take.

A sync gRPC server runs each call on a thread of one pool. A unary call gives its thread back within its
deadline; a streamed response that blocks (`WatchSnapshots` waiting for the next snapshot, the reflection
stream waiting for the client's next request) holds its thread for as long as the stream is open. Unlimited,
as many open streams as the pool has threads leave no thread for anything else: commits wait until their
deadline. `StreamLimits` admits a new streamed response only while

- its caller (the token's principal; without a token, the peer's host) holds fewer than
  `max_streams_per_principal` streams,
- all streams together hold fewer than `max_streams` threads, which is less than the pool, so that some
  threads always stay free for unary calls;
- on a server that checks tokens, streams without one (reflection, open to anybody) hold fewer than half of
  `max_streams`, so that callers without a token cannot take every stream from the readers that have one.

Otherwise the call fails at once with RESOURCE_EXHAUSTED, naming the limit. A stream that holds no thread
(the health service's non-blocking `Watch`, which gRPC feeds from callbacks) is counted apart, in total and per
caller, against limits that bound only the memory such streams take. gRPC's own `maximum_concurrent_rpcs`
bounds the calls in progress or waiting for a thread, so that a flood of unary calls is refused rather than
queued without end.
"""

from __future__ import annotations

import argparse
import logging
import threading
from collections import Counter
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import grpc

from lsmlake.auth.principal import current_principal
from lsmlake.errors import InvalidInputError
from lsmlake.rpc.errors import same_mode
from lsmlake.runtime.log_limit import LogLimiter, peer_host

_log = logging.getLogger(__name__)
_refusals = LogLimiter(_log, "refused streams")

CONCURRENT_RPCS_PER_WORKER = 8  # default maximum_concurrent_rpcs: this many calls per pool thread
WATCH_STREAMS = 1_024  # default total of threadless streams (health Watch)
WATCH_SHARE = 16  # one caller may hold 1/WATCH_SHARE of the threadless streams


@dataclass(frozen=True)
class RpcLimits:
    """The limits of one server; None: derived from its worker count (see `resolved`)."""

    max_concurrent_rpcs: int | None = None  # calls in progress or waiting for a thread; 0: no limit
    max_streams: int | None = None  # thread-holding streams in total; fewer than the workers
    max_streams_per_principal: int | None = None  # thread-holding streams of one caller
    max_watch_streams: int = WATCH_STREAMS  # threadless streams in total; a caller may hold 1/16 of them

    def resolved(self, workers: int) -> RpcLimits:
        """Every limit as a number for a pool of `workers` threads; InvalidInputError when they cannot work.

        Defaults: 8 calls per worker in progress or waiting; streams may hold half the workers, one caller
        half of that (at least one)."""
        if workers < 1:
            raise InvalidInputError(f"--workers must be at least 1, got {workers}")
        concurrent = CONCURRENT_RPCS_PER_WORKER * workers if self.max_concurrent_rpcs is None \
            else self.max_concurrent_rpcs
        streams = workers // 2 if self.max_streams is None else self.max_streams
        per_principal = min(streams, max(1, streams // 2)) if self.max_streams_per_principal is None \
            else self.max_streams_per_principal
        for flag, value in (("--max-concurrent-rpcs", concurrent), ("--max-streams", streams),
                            ("--max-streams-per-principal", per_principal),
                            ("--max-watch-streams", self.max_watch_streams)):
            if value < 0:
                raise InvalidInputError(f"{flag} must not be negative, got {value}")
        if streams >= workers:
            raise InvalidInputError(f"--max-streams {streams} must be less than --workers {workers}, or open "
                                    "streams could leave no thread for unary calls (commits)")
        if concurrent and concurrent < workers:
            raise InvalidInputError(f"--max-concurrent-rpcs {concurrent} must be at least --workers {workers} "
                                    "(0: no limit)")
        return RpcLimits(concurrent, streams, per_principal, self.max_watch_streams)

    def server_options(self, workers: int) -> dict[str, Any]:
        """The `grpc.server` keyword arguments of these limits."""
        r = self.resolved(workers)
        return {"maximum_concurrent_rpcs": r.max_concurrent_rpcs or None}

    def interceptor(self, workers: int, tokens_checked: bool = False) -> StreamLimits:
        """The interceptor of these limits for a pool of `workers` threads; `tokens_checked`: the server checks
        tokens, so that a caller without one is a stranger (see the module)."""
        r = self.resolved(workers)
        assert r.max_streams is not None and r.max_streams_per_principal is not None
        return StreamLimits(r.max_streams, r.max_streams_per_principal, r.max_watch_streams,
                            max(1, r.max_watch_streams // WATCH_SHARE) if r.max_watch_streams else 0, workers,
                            max(1, r.max_streams // 2) if tokens_checked else None)

    @staticmethod
    def add_arguments(p: argparse.ArgumentParser, env: Mapping[str, str], workers: int) -> None:
        """`--workers` and the limits' flags; `workers` is the server's default worker count."""
        p.add_argument("--workers", type=int, default=env.get("LSMLAKE_WORKERS") or workers,
                       help=f"threads serving calls (env LSMLAKE_WORKERS; default {workers})")
        p.add_argument("--max-concurrent-rpcs", type=int, default=env.get("LSMLAKE_MAX_CONCURRENT_RPCS") or None,
                       help="calls in progress or waiting for a thread; more are refused with RESOURCE_EXHAUSTED "
                            f"(env LSMLAKE_MAX_CONCURRENT_RPCS; default {CONCURRENT_RPCS_PER_WORKER} x --workers; "
                            "0: no limit)")
        p.add_argument("--max-streams", type=int, default=env.get("LSMLAKE_MAX_STREAMS") or None,
                       help="open streams that hold a thread (WatchSnapshots, reflection), in total; less than "
                            "--workers (env LSMLAKE_MAX_STREAMS; default half of --workers)")
        p.add_argument("--max-streams-per-principal", type=int,
                       default=env.get("LSMLAKE_MAX_STREAMS_PER_PRINCIPAL") or None,
                       help="such streams of one token's principal, or of one host without a token "
                            "(env LSMLAKE_MAX_STREAMS_PER_PRINCIPAL; default half of --max-streams, at least 1)")
        p.add_argument("--max-watch-streams", type=int, default=env.get("LSMLAKE_MAX_WATCH_STREAMS") or WATCH_STREAMS,
                       help="open health Watch streams (they hold no thread), in total; one caller may hold "
                            f"1/{WATCH_SHARE} of them (env LSMLAKE_MAX_WATCH_STREAMS; default {WATCH_STREAMS})")

    @staticmethod
    def from_args(p: argparse.ArgumentParser, a: argparse.Namespace) -> tuple[int, RpcLimits]:
        """The worker count and limits of parsed flags; a bad setting is a usage error."""
        limits = RpcLimits(a.max_concurrent_rpcs, a.max_streams, a.max_streams_per_principal, a.max_watch_streams)
        try:
            limits.resolved(a.workers)
        except InvalidInputError as e:
            p.error(str(e))
        return a.workers, limits


class StreamLimits(grpc.ServerInterceptor):
    """Admits a streamed response only within the limits (see the module); RESOURCE_EXHAUSTED otherwise.

    Install it inside the token check, where the call's principal is known, and inside `UndecodableRequests`
    (which refuses undecodable bytes before they count): last in the server's interceptor list.
    """

    def __init__(self, max_streams: int, max_streams_per_principal: int, max_watch_streams: int,
                 max_watch_streams_per_principal: int, workers: int,
                 max_anonymous_streams: int | None = None) -> None:
        self.max_streams = max_streams
        self.max_anonymous_streams = max_anonymous_streams  # None: no share of its own (no tokens checked)
        self.max_streams_per_principal = max_streams_per_principal
        self.max_watch_streams = max_watch_streams
        self.max_watch_streams_per_principal = max_watch_streams_per_principal
        self.workers = workers
        # reentrant: a stream's generator that the garbage collector closes releases its count on whatever
        # thread the collection runs, possibly one inside `_admit`
        self._lock = threading.RLock()
        self._open: Counter[tuple[bool, str]] = Counter()  # (holds a thread, caller) -> open streams
        self._total: Counter[bool] = Counter()  # holds a thread -> open streams
        self._anonymous = 0  # open streams holding a thread, of callers without a token

    def intercept_service(self, continuation: Callable[[grpc.HandlerCallDetails], grpc.RpcMethodHandler | None],
                          details: grpc.HandlerCallDetails) -> grpc.RpcMethodHandler | None:
        handler = continuation(details)
        if handler is None or not handler.response_streaming:
            return handler
        method: str = details.method
        kw = {"request_deserializer": handler.request_deserializer, "response_serializer": handler.response_serializer}
        if handler.request_streaming:
            return grpc.stream_stream_rpc_method_handler(self._limited(handler.stream_stream, method), **kw)
        return grpc.unary_stream_rpc_method_handler(self._limited(handler.unary_stream, method), **kw)

    def _limited(self, behavior: Callable[..., Any], method: str) -> Callable[..., Any]:
        if getattr(behavior, "experimental_non_blocking", False):
            def threadless(request: Any, context: grpc.ServicerContext, *callback: Any) -> Any:
                release = self._admit(False, method, context)
                try:
                    result = behavior(request, context, *callback)
                except BaseException:
                    release()
                    raise
                if not context.add_callback(release):  # the call already ended
                    release()
                return result

            return same_mode(behavior, threadless)

        def holding(request: Any, context: grpc.ServicerContext) -> Iterator[Any]:
            # a generator: admitted at the first response asked for, released when the stream is done with
            # its thread (the generator ends or is closed), so the count never runs ahead of the threads
            release = self._admit(True, method, context)
            try:
                yield from behavior(request, context)
            finally:
                release()

        return same_mode(behavior, holding)

    def _admit(self, holds_thread: bool, method: str, context: grpc.ServicerContext) -> Callable[[], None]:
        """Count a new stream, or abort the call with RESOURCE_EXHAUSTED; the function that uncounts it."""
        principal = current_principal()
        caller = f"principal {principal.name}" if principal is not None else f"peer {peer_host(context.peer())}"
        key = (holds_thread, caller)
        anonymous = holds_thread and principal is None and self.max_anonymous_streams is not None
        total_limit, own_limit = (self.max_streams, self.max_streams_per_principal) if holds_thread else \
            (self.max_watch_streams, self.max_watch_streams_per_principal)
        kind = "streams" if holds_thread else "health Watch streams"
        refusal = reason = None
        with self._lock:
            if self._open[key] >= own_limit:
                reason = "caller at its limit"
                refusal = (f"{caller} already holds {self._open[key]} open {kind} on this server, the most one "
                           f"caller may (--max-{'streams-per-principal' if holds_thread else 'watch-streams'}); "
                           "close one first")
            elif anonymous and self._anonymous >= (self.max_anonymous_streams or 0):
                reason = "strangers at their limit"
                refusal = (f"callers without a token already hold {self._anonymous} open streams on this server, "
                           "half of --max-streams, the most they may; try again later")
            elif self._total[holds_thread] >= total_limit:
                reason = "server at its limit"
                share = f", a share of its {self.workers} worker threads" if holds_thread else ""
                refusal = (f"this server already holds {self._total[holds_thread]} open {kind}{share}, the most it "
                           f"takes (--max-{'streams' if holds_thread else 'watch-streams'}); try again later")
            else:
                self._open[key] += 1
                self._total[holds_thread] += 1
                self._anonymous += anonymous
        if refusal is not None:
            _refusals.log(logging.WARNING, (reason, caller), "refused %s from %s (%s): %s", method, context.peer(),
                          caller, refusal)
            context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, refusal)
        done = threading.Event()  # released once, whoever calls first

        def release() -> None:
            with self._lock:
                if done.is_set():
                    return
                done.set()
                self._open[key] -= 1
                if not self._open[key]:
                    del self._open[key]
                self._total[holds_thread] -= 1
                self._anonymous -= anonymous

        return release
