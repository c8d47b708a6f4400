"""A service's heartbeat to the catalog's `StatusService`, on the channel (and token) of its catalog client.

Every `interval_s` the sender asks `report` what to say (who it is, what it does) and sends it; at `stop` it sends
a last one saying it stops, so the console shows it down at once instead of after the missed beats. A heartbeat
that fails is logged (the first of a run of failures as a warning) and never stops the service.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable, Mapping

from lsmlake.errors import InvalidInputError, LakeError
from lsmlake.proto_gen.lsmlake.v1 import status_pb2, status_pb2_grpc
from lsmlake.rpc.catalog_client import CatalogClient

_log = logging.getLogger(__name__)

BEAT_S = 5.0
ENV = "LSMLAKE_HEARTBEAT_INTERVAL"


def interval_from_env(env: Mapping[str, str] | None = None) -> float:
    """Seconds between heartbeats: `LSMLAKE_HEARTBEAT_INTERVAL`, or 5."""
    text = (os.environ if env is None else env).get(ENV, "")
    if not text:
        return BEAT_S
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0.05 <= value <= 3600:  # also refuses nan
        raise InvalidInputError(f"{ENV}={text!r} is not a number of seconds in 0.05..3600")
    return value


class HeartbeatSender:
    """Sends `report()` to the catalog every `interval_s` on a thread of its own, until `stop`."""

    def __init__(self, client: CatalogClient, report: Callable[[], status_pb2.HeartbeatRequest],
                 interval_s: float = BEAT_S) -> None:
        self.client = client
        self.report = report
        self.interval_s = interval_s
        self.stub = status_pb2_grpc.StatusServiceStub(client.channel)
        self.sent = 0  # heartbeats the catalog recorded
        self._failing = False
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="heartbeat", daemon=True)

    def start(self) -> HeartbeatSender:
        self._thread.start()
        return self

    def stop(self, goodbye: bool = True) -> None:
        """End the beats; with `goodbye`, a last heartbeat saying the service stops."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=self.client.timeout_s + 5)
        if goodbye:
            self.beat(stopping=True)

    def beat(self, stopping: bool = False) -> bool:
        """Send one heartbeat now; whether the catalog recorded it."""
        try:
            request = self.report()
            request.interval_ms = max(1, round(self.interval_s * 1000))
            request.stopping = stopping
            self.client.call(self.stub.Heartbeat, request, changes_state=True,
                             timeout_s=min(self.client.timeout_s, max(1.0, self.interval_s)))
        except LakeError as e:
            if not self._failing:
                _log.warning("heartbeat to the catalog at %s failed (the console shows this service down until "
                             "one gets through): %s", self.client.target, e)
            self._failing = True
            return False
        if self._failing:
            _log.info("heartbeats to the catalog at %s get through again", self.client.target)
        self._failing = False
        self.sent += 1
        return True

    def _loop(self) -> None:
        self.beat()
        while not self._stop.wait(self.interval_s):
            self.beat()
