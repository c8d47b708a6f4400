"""Log lines a caller can cause at will (refused calls), without letting a flood of calls fill the log.

`LogLimiter` logs the first line of each key (say: reason and peer) at once, and at most `burst` lines one by
one per `interval_s` in all. What it holds back is counted per key and summed up in one line per interval
("... 4,812 more like the lines above in the last 60 s: 4,800 x UNAUTHENTICATED from ipv4:10.1.2.3 ..."), so
nothing is lost but the repetition. The summary comes at the next line after the interval, from a timer when
no line follows, and at `flush_all()` (shutdown).
"""

from __future__ import annotations

import logging
import threading
import time
import weakref
from collections import Counter
from collections.abc import Callable, Hashable
from typing import Any

INTERVAL_S = 60.0  # at most one summary line per key group and interval
BURST = 5  # lines logged one by one per interval, whatever their keys
MAX_KEYS = 1_000  # keys remembered; beyond, lines are counted together as "other"
TOP_KEYS = 5  # keys the summary names, the most frequent first

_limiters: weakref.WeakSet[LogLimiter] = weakref.WeakSet()


def peer_host(peer: str | None) -> str:
    """A gRPC peer (`ipv4:10.1.2.3:51234`, `ipv6:[::1]:51234`) without its port: every connection of a host
    has another port, so the host is what identifies a caller that has no token."""
    if not peer:
        return "unknown peer"
    kind, sep, rest = peer.partition(":")
    if sep and kind in ("ipv4", "ipv6"):
        host, colon, port = rest.rpartition(":")
        if colon and port.isdigit():
            return f"{kind}:{host}"
    return peer


def _label(key: Hashable) -> str:
    return " ".join(str(k) for k in key) if isinstance(key, tuple) else str(key)


class LogLimiter:
    """Logs through `logger` at most `burst` lines one by one per `interval_s`, one per key, and a summary of
    the others. Thread-safe; `clock` and `background` (the timer that logs a summary nobody else triggers)
    are for tests."""

    def __init__(self, logger: logging.Logger, what: str, interval_s: float = INTERVAL_S, burst: int = BURST,
                 max_keys: int = MAX_KEYS, label: Callable[[Hashable], str] = _label,
                 clock: Callable[[], float] = time.monotonic, background: bool = True) -> None:
        self.logger = logger
        self.what = what
        self.interval_s = interval_s
        self.burst = burst
        self.max_keys = max_keys
        self._label = label
        self._clock = clock
        self._background = background
        self._lock = threading.RLock()  # a finalizer run by the garbage collector may log
        self._window_start = clock()
        self._lines = 0  # lines logged one by one in this window
        self._last: dict[Hashable, float] = {}  # key -> when its last line was logged one by one
        self._held: Counter[Hashable] = Counter()  # key -> lines held back in this window
        self._held_other = 0  # lines held back of keys beyond max_keys
        self._held_level = logging.NOTSET
        self._timer: threading.Timer | None = None
        _limiters.add(self)

    def log(self, level: int, key: Hashable, msg: str, *args: Any) -> bool:
        """Log `msg % args` now, or count it under `key` for the summary. Whether it was logged now."""
        if not self.logger.isEnabledFor(level):
            return False
        with self._lock:
            now = self._clock()
            summary = self._take_summary(now) if now - self._window_start >= self.interval_s else None
            last = self._last.get(key)
            now_or_never = (last is None or now - last >= self.interval_s) and self._lines < self.burst
            if now_or_never:
                self._lines += 1
                if key in self._last or len(self._last) < self.max_keys:
                    self._last[key] = now
            else:
                self._hold(level, key, now)
        if summary is not None:
            self._emit(*summary)
        if now_or_never:
            self.logger.log(level, msg, *args)
        return now_or_never

    def flush(self) -> None:
        """Log the summary of what is held back now, and start a new interval."""
        with self._lock:
            summary = self._take_summary(self._clock())
        if summary is not None:
            self._emit(*summary)

    def _hold(self, level: int, key: Hashable, now: float) -> None:
        if key in self._held or len(self._held) < self.max_keys:
            self._held[key] += 1
        else:
            self._held_other += 1
        self._held_level = max(self._held_level, level)
        if self._background and self._timer is None:
            self._timer = threading.Timer(max(0.0, self._window_start + self.interval_s - now), self._due)
            self._timer.daemon = True
            self._timer.start()

    def _due(self) -> None:
        with self._lock:
            self._timer = None
            now = self._clock()
            summary = self._take_summary(now) if now - self._window_start >= self.interval_s else None
            if summary is None and (self._held or self._held_other) and self._background:
                self._timer = threading.Timer(max(0.0, self._window_start + self.interval_s - now), self._due)
                self._timer.daemon = True
                self._timer.start()
        if summary is not None:
            self._emit(*summary)

    def _take_summary(self, now: float) -> tuple[int, str, tuple[Any, ...], dict[str, Any]] | None:
        """The summary line of the window ending now (None when nothing was held back); starts a new window."""
        held, other, level = self._held, self._held_other, self._held_level
        elapsed = now - self._window_start
        self._window_start, self._lines = now, 0
        self._held, self._held_other, self._held_level = Counter(), 0, logging.NOTSET
        self._last = {k: t for k, t in self._last.items() if now - t < self.interval_s}
        total = sum(held.values()) + other
        if not total:
            return None
        top = held.most_common(TOP_KEYS)
        parts = [f"{n:,} x {self._label(k)}" for k, n in top]
        rest = len(held) - len(top)
        if rest > 0:
            parts.append(f"{sum(held.values()) - sum(n for _, n in top):,} of {rest} other key(s)")
        if other:
            parts.append(f"{other:,} of further keys (only {self.max_keys} are told apart)")
        return (level, "%s: %s more like the lines above in the last %.0f s, not logged one by one: %s",
                (self.what, f"{total:,}", elapsed, "; ".join(parts)), {"suppressed": total})

    def _emit(self, level: int, msg: str, args: tuple[Any, ...], extra: dict[str, Any]) -> None:
        self.logger.log(level, msg, *args, extra=extra)


def flush_all() -> None:
    """Log the summary of every limiter (at shutdown, so that no count is lost)."""
    for limiter in list(_limiters):
        limiter.flush()
