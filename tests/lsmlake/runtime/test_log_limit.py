"""`LogLimiter`: the first line of each key at once, the repeats counted and summed up once per interval."""

from __future__ import annotations

import logging
import time

import pytest

from lsmlake.runtime.log_limit import LogLimiter, flush_all, peer_host


class Clock:
    def __init__(self) -> None:
        self.now = 1_000.0

    def __call__(self) -> float:
        return self.now


class Lines(logging.Handler):
    """The records of one logger of its own."""

    def __init__(self, logger: logging.Logger) -> None:
        super().__init__(logging.DEBUG)
        self.logger = logger
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)

    @property
    def messages(self) -> list[str]:
        return [r.getMessage() for r in self.records]


@pytest.fixture
def lines(request: pytest.FixtureRequest) -> Lines:
    logger = logging.getLogger(f"test_log_limit.{request.node.name}")
    logger.setLevel(logging.DEBUG)
    logger.propagate = False
    handler = Lines(logger)
    logger.handlers[:] = [handler]
    return handler


def _limiter(lines: Lines, clock: Clock, **kw: object) -> LogLimiter:
    return LogLimiter(lines.logger, "refusals", interval_s=60, clock=clock, background=False,
                      **kw)  # type: ignore[arg-type]


def test_the_first_line_of_each_key_is_logged_and_the_repeats_summed_up(lines: Lines) -> None:
    clock = Clock()
    log = _limiter(lines, clock)
    for i in range(100):
        log.log(logging.WARNING, ("UNAUTHENTICATED", "ipv4:10.0.0.1"), "refused call %d from %s", i, "10.0.0.1")
    log.log(logging.WARNING, ("UNAUTHENTICATED", "ipv4:10.0.0.2"), "refused call from %s", "10.0.0.2")
    assert lines.messages == ["refused call 0 from 10.0.0.1", "refused call from 10.0.0.2"]

    clock.now += 61  # the next line after the interval brings the summary first
    log.log(logging.WARNING, ("UNAUTHENTICATED", "ipv4:10.0.0.1"), "refused call %d from %s", 100, "10.0.0.1")
    summary = lines.records[2]
    assert summary.levelno == logging.WARNING and summary.suppressed == 99  # type: ignore[attr-defined]
    assert summary.getMessage() == ("refusals: 99 more like the lines above in the last 61 s, not logged one by "
                                    "one: 99 x UNAUTHENTICATED ipv4:10.0.0.1")
    assert lines.messages[3] == "refused call 100 from 10.0.0.1"  # a new interval: logged again at once


def test_at_most_burst_lines_per_interval_whatever_the_keys(lines: Lines) -> None:
    clock = Clock()
    log = _limiter(lines, clock, burst=3, max_keys=10)
    logged = [log.log(logging.INFO, ("peer", i), "from peer %d", i) for i in range(50)]
    assert logged == [True] * 3 + [False] * 47
    log.flush()
    assert len(lines.records) == 4
    summary = lines.messages[-1]
    assert summary.startswith("refusals: 47 more like the lines above in the last 0 s")
    assert "1 x peer 3" in summary  # the first keys by count, then the rest summed up
    assert "; 5 of 5 other key(s); 37 of further keys (only 10 are told apart)" in summary
    log.flush()
    assert len(lines.records) == 4  # nothing held back: no summary


def test_a_quiet_key_is_logged_again_after_the_interval(lines: Lines) -> None:
    clock = Clock()
    log = _limiter(lines, clock)
    assert log.log(logging.WARNING, "k", "one")
    clock.now += 30
    assert not log.log(logging.WARNING, "k", "two")
    clock.now += 31  # the summary of "two", then "three" at once: its last line was 61 s ago
    assert log.log(logging.WARNING, "k", "three")
    assert lines.messages[0] == "one" and lines.messages[2] == "three"
    assert "1 x k" in lines.messages[1]


def test_a_summary_comes_without_another_line(lines: Lines) -> None:
    log = LogLimiter(lines.logger, "refusals", interval_s=0.05)
    log.log(logging.ERROR, "k", "first")
    log.log(logging.ERROR, "k", "second")
    for _ in range(300):  # the summary comes from a timer: waited for (30 s at most), never timed
        if len(lines.records) > 1:
            break
        time.sleep(0.1)
    assert len(lines.records) == 2, "the timer never logged the summary"
    assert lines.records[-1].levelno == logging.ERROR and "1 x k" in lines.messages[-1]


def test_flush_all_logs_every_summary(lines: Lines) -> None:
    clock = Clock()
    log = _limiter(lines, clock)
    log.log(logging.WARNING, "k", "first")
    log.log(logging.WARNING, "k", "second")
    flush_all()
    assert "1 x k" in lines.messages[-1]


def test_a_disabled_level_costs_nothing(lines: Lines) -> None:
    clock = Clock()
    log = _limiter(lines, clock)
    log.logger.setLevel(logging.WARNING)
    assert not log.log(logging.INFO, "k", "hidden")
    log.flush()
    assert lines.records == []


@pytest.mark.parametrize(("peer", "host"), [
    ("ipv4:10.1.2.3:51234", "ipv4:10.1.2.3"),
    ("ipv6:[::1]:51234", "ipv6:[::1]"),
    ("ipv6:%5B::1%5D:51234", "ipv6:%5B::1%5D"),
    ("unix:/tmp/s.sock", "unix:/tmp/s.sock"),
    ("ipv4:10.1.2.3", "ipv4:10.1.2.3"),
    ("", "unknown peer"),
    (None, "unknown peer"),
])
def test_peer_host(peer: str | None, host: str) -> None:
    assert peer_host(peer) == host
