"""`BackgroundLoop`: a step run again and again on a daemon thread of its own, until `stop()`.

Every background job of the services (the catalog's relay, outbox purge and maintenance, the writer's group
commits and Kafka ingestion, the compactor's planner and event feed) is such a loop. What they share:
- after each step the thread pauses: for what the step returned, or `interval_s` when it returned None;
  `wake()` ends a pause early (a wake during a step ends the next pause at once, none is lost), `stop()`
  ends it for good; a step that returns 0 is run again at once;
- a step that raises is logged (`on_error`) and the loop goes on after `error_wait_s`, a pause that only
  `stop()` ends: a failing step is not hurried by the wake-ups of new work (a broker down while commits
  keep coming), and a loop that should not go on after a failure raises `StopLoop`;
- `stop()` wakes the thread, waits up to its timeout for the step in progress, and warns when the thread
  is still busy; long steps look at `stopping` to end early;
- `on_exit` runs on the loop's thread when it ends, to close what the steps opened (a Kafka client must
  be closed by the thread that used it).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

_log = logging.getLogger(__name__)


class StopLoop(Exception):
    """Raised by a step to end its loop for good (after logging why); `on_exit` still runs."""


class BackgroundLoop:
    """Runs `step` on a daemon thread named `name` until `stop()`; see the module's docstring.

    `what` names the loop in the log lines of `logger` (default: `name`, and this module's logger); the
    default `on_error` logs the traceback.
    """

    def __init__(self, name: str, step: Callable[[], float | None], interval_s: float, *,
                 initial_delay_s: float = 0.0, error_wait_s: float | None = None,
                 on_error: Callable[[Exception], None] | None = None,
                 on_exit: Callable[[], None] | None = None, what: str | None = None,
                 logger: logging.Logger | None = None) -> None:
        self.name = name
        self.what = what or name
        self.log = logger or _log
        self.interval_s = interval_s
        self.initial_delay_s = initial_delay_s
        self.error_wait_s = interval_s if error_wait_s is None else error_wait_s
        self._step = step
        self._on_error = on_error or self._log_error
        self._on_exit = on_exit
        self._stopping = threading.Event()
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def stopping(self) -> threading.Event:
        """Set once `stop()` (or `request_stop()`) was called; steps that take long end early when it is."""
        return self._stopping

    def is_stopping(self) -> bool:
        return self._stopping.is_set()

    @property
    def alive(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def start(self) -> BackgroundLoop:
        self._thread = threading.Thread(target=self._run, name=self.name, daemon=True)
        self._thread.start()
        return self

    def wake(self) -> None:
        """End the current pause (or the next one, when a step is running) now."""
        self._wake.set()

    def request_stop(self) -> None:
        """Stop after the current step without waiting for it."""
        self._stopping.set()
        self._wake.set()

    def stop(self, timeout_s: float) -> bool:
        """Stop after the current step and wait up to `timeout_s` for it; whether the thread has ended."""
        self.request_stop()
        if self._thread is None or self._thread is threading.current_thread():
            return True
        self._thread.join(timeout_s)
        if self._thread.is_alive():
            self.log.warning("%s did not stop within %.1f s", self.what, timeout_s)
            return False
        return True

    def sleep(self, seconds: float) -> bool:
        """A pause that only `stop()` ends (wakes do not); whether the loop is stopping."""
        return self._stopping.wait(seconds) if seconds > 0 else self._stopping.is_set()

    def _pause(self, seconds: float) -> None:
        if seconds > 0:
            self._wake.wait(seconds)
            self._wake.clear()

    def _log_error(self, e: Exception) -> None:
        self.log.exception("%s failed; trying again in %.1f s", self.what, self.error_wait_s)

    def _run(self) -> None:
        try:
            self._pause(self.initial_delay_s)
            while not self._stopping.is_set():
                try:
                    wait = self._step()
                except StopLoop:
                    return
                except Exception as e:
                    try:
                        self._on_error(e)
                    except Exception:  # the loop must live on whatever its handler does
                        self.log.exception("%s: handling a failed step failed", self.what)
                    self.sleep(self.error_wait_s)
                    continue
                self._pause(self.interval_s if wait is None else wait)
        finally:
            if self._on_exit is not None:
                self._on_exit()
