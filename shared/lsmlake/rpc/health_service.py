"""The gRPC health service (`grpc.health.v1.Health`: Check and Watch) of every lsmlake server.

`Watch` is a non-blocking stream: gRPC hands it a function that sends a response, and the stream holds no
worker thread while it is open. That function waits until gRPC's event thread has sent the message; the
same event thread runs the callbacks of calls that end, and a closing Watch's callback takes this
service's lock. So a status is never sent while that lock is held: grpcio-health-checking's servicer
(1.85) does send under it, and deadlocks the server when a Watch closes while `set` or
`enter_graceful_shutdown` runs (seen at shutdown, with watchers going away). Status changes are sent one
at a time, in order, under a lock of their own that no callback takes.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator
from typing import Any

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

_log = logging.getLogger(__name__)

Status = int  # a health_pb2.HealthCheckResponse.ServingStatus
Send = Callable[[Any], Any]  # sends a response; None ends the stream

SERVING = health_pb2.HealthCheckResponse.SERVING
NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING
SERVICE_UNKNOWN = health_pb2.HealthCheckResponse.SERVICE_UNKNOWN


class _BlockingWatch:
    """A Watch for a server that does not run non-blocking streams: the latest status, as an iterator."""

    def __init__(self) -> None:
        self._changed = threading.Condition()
        self._latest: Any = None
        self._open = True

    def __call__(self, response: Any) -> None:
        with self._changed:
            if response is None:
                self._open = False
            else:
                self._latest = response
            self._changed.notify()

    def __iter__(self) -> Iterator[Any]:
        while True:
            with self._changed:
                while self._latest is None and self._open:
                    self._changed.wait()
                if self._latest is None:
                    return
                response, self._latest = self._latest, None
            yield response


class HealthServicer(health_pb2_grpc.HealthServicer):
    """Check and Watch of the statuses that `set` gives; the overall status ("") starts SERVING."""

    def __init__(self) -> None:
        self._lock = threading.Lock()  # the statuses and watchers; never held while sending
        self._sending = threading.Lock()  # one status change sent at a time, so watchers see them in order
        self._statuses: dict[str, Status] = {"": SERVING}
        self._watchers: dict[str, set[Send]] = {}
        self._final = False  # after enter_graceful_shutdown

    def Check(self, request: Any, context: grpc.ServicerContext) -> Any:
        with self._lock:
            status = self._statuses.get(request.service)
        if status is None:
            context.set_code(grpc.StatusCode.NOT_FOUND)
            context.set_details(f"no health status for the service {request.service[:200]!r}")
            return health_pb2.HealthCheckResponse()
        return health_pb2.HealthCheckResponse(status=status)

    def Watch(self, request: Any, context: grpc.ServicerContext, send_response_callback: Send | None = None) -> Any:
        """The status of `request.service` now and at every change, until the client goes away."""
        blocking: _BlockingWatch | None = None
        send: Send
        if send_response_callback is None:  # a server that runs it as a blocking stream
            blocking = send = _BlockingWatch()
        else:
            send = send_response_callback
        service = request.service
        with self._sending:
            with self._lock:
                status = self._statuses.get(service, SERVICE_UNKNOWN)
                self._watchers.setdefault(service, set()).add(send)
            if context.add_callback(lambda: self._forget(service, send)):
                self._send([send], status)
            else:  # the call already ended
                self._forget(service, send)
        return blocking

    Watch.experimental_non_blocking = True  # type: ignore[attr-defined]

    def set(self, service: str, status: Status) -> None:
        """Set the status of `service` ("" for the server as a whole) and send it to its watchers; ignored
        after `enter_graceful_shutdown`."""
        with self._sending:
            with self._lock:
                if self._final:
                    return
                self._statuses[service] = status
                watchers = list(self._watchers.get(service, ()))
            self._send(watchers, status)

    def enter_graceful_shutdown(self) -> None:
        """Every status NOT_SERVING, for good: later `set` calls are ignored."""
        with self._sending:
            with self._lock:
                if self._final:
                    return
                self._final = True
                watchers: list[Send] = []
                for service in self._statuses:
                    self._statuses[service] = NOT_SERVING
                    watchers += self._watchers.get(service, ())
            self._send(watchers, NOT_SERVING)

    def _forget(self, service: str, send: Send) -> None:
        with self._lock:
            watchers = self._watchers.get(service)
            if watchers is not None:
                watchers.discard(send)
                if not watchers:
                    del self._watchers[service]
        send(None)  # ends the stream (a no-op for a call that is already over)

    @staticmethod
    def _send(watchers: list[Send], status: Status) -> None:
        response = health_pb2.HealthCheckResponse(status=status)
        for send in watchers:
            try:
                send(response)
            except Exception:  # a stream ending meanwhile; the others still get the status
                _log.debug("health status not sent to a watcher", exc_info=True)
