"""`BackgroundLoop`, the one helper every service loop runs on: pauses, wakes, failures, stopping."""

from __future__ import annotations

import logging
import threading
import time

import pytest

from lsmlake.runtime.background import BackgroundLoop, StopLoop

WAIT_S = 30.0  # bounds on waits that should end at once; never reached unless the helper is broken
LONG_S = 3600.0  # a pause no test may wait out


def test_a_step_runs_again_after_the_pause_it_returns() -> None:
    runs: list[float] = []
    done = threading.Event()

    def step() -> float:
        runs.append(time.monotonic())
        if len(runs) == 3:
            done.set()
        return 0.0  # at once

    loop = BackgroundLoop("t-again", step, interval_s=LONG_S).start()
    try:
        assert done.wait(WAIT_S)
    finally:
        assert loop.stop(WAIT_S)
    assert len(runs) >= 3


def test_wake_ends_a_pause_and_a_wake_during_a_step_is_not_lost() -> None:
    entered, release = threading.Event(), threading.Event()
    count = 0
    second = threading.Event()

    def step() -> None:
        nonlocal count
        count += 1
        if count == 1:
            entered.set()
            assert release.wait(WAIT_S)
        else:
            second.set()
        return None  # pause for interval_s (an hour): only a wake runs the next step

    loop = BackgroundLoop("t-wake", step, interval_s=LONG_S).start()
    try:
        assert entered.wait(WAIT_S)
        loop.wake()  # arrives while the first step runs
        release.set()
        assert second.wait(WAIT_S), "the wake sent during a step was lost"
        n = count
        loop.wake()
        deadline = time.monotonic() + WAIT_S
        while count == n and time.monotonic() < deadline:
            time.sleep(0.01)
        assert count > n, "wake() did not end the pause"
    finally:
        assert loop.stop(WAIT_S)


def test_a_failing_step_is_logged_and_retried_after_the_error_wait_not_on_a_wake(caplog: pytest.LogCaptureFixture
                                                                                   ) -> None:
    calls = 0
    failed = threading.Event()

    def step() -> None:
        nonlocal calls
        calls += 1
        failed.set()
        raise RuntimeError("disk on fire")

    log = logging.getLogger("lsmlake.test.background")
    loop = BackgroundLoop("t-fail", step, interval_s=0.01, error_wait_s=LONG_S, what="the test loop", logger=log)
    with caplog.at_level(logging.ERROR, logger="lsmlake.test.background"):
        loop.start()
        try:
            assert failed.wait(WAIT_S)
            loop.wake()  # new work must not hurry a failing step
            time.sleep(0.2)
            assert calls == 1
        finally:
            assert loop.stop(WAIT_S), "stop() must end the error wait"
    assert any("the test loop failed" in r.getMessage() and r.exc_info for r in caplog.records)


def test_a_failing_error_handler_does_not_end_the_loop() -> None:
    calls = 0
    twice = threading.Event()

    def step() -> None:
        nonlocal calls
        calls += 1
        if calls >= 2:
            twice.set()
        raise ValueError("bad")

    def on_error(e: Exception) -> None:
        raise RuntimeError("the handler fails too")

    loop = BackgroundLoop("t-handler", step, interval_s=0.01, error_wait_s=0.01, on_error=on_error).start()
    try:
        assert twice.wait(WAIT_S)
    finally:
        assert loop.stop(WAIT_S)


def test_stop_loop_ends_the_loop_and_on_exit_runs_on_its_thread() -> None:
    exited: list[str] = []
    ended = threading.Event()

    def step() -> None:
        raise StopLoop

    def on_exit() -> None:
        exited.append(threading.current_thread().name)
        ended.set()

    loop = BackgroundLoop("t-stoploop", step, interval_s=0.01, on_exit=on_exit).start()
    assert ended.wait(WAIT_S)
    assert exited == ["t-stoploop"]
    assert loop.stop(WAIT_S)
    assert not loop.alive


def test_stop_waits_for_the_step_in_progress_and_says_when_it_did_not_end(caplog: pytest.LogCaptureFixture) -> None:
    entered, release = threading.Event(), threading.Event()
    saw_stopping: list[bool] = []
    loop: BackgroundLoop

    def step() -> None:
        entered.set()
        release.wait(WAIT_S)
        saw_stopping.append(loop.is_stopping())

    loop = BackgroundLoop("t-slow", step, interval_s=LONG_S, what="the slow loop",
                          logger=logging.getLogger("lsmlake.test.slow"))
    loop.start()
    assert entered.wait(WAIT_S)
    with caplog.at_level(logging.WARNING, logger="lsmlake.test.slow"):
        assert loop.stop(0.05) is False
    assert any("the slow loop did not stop within" in r.getMessage() for r in caplog.records)
    assert loop.stopping.is_set()
    release.set()
    assert loop.stop(WAIT_S) is True
    assert saw_stopping == [True]


def test_the_initial_delay_is_ended_by_a_wake() -> None:
    ran = threading.Event()
    loop = BackgroundLoop("t-delay", lambda: ran.set(), interval_s=LONG_S, initial_delay_s=LONG_S).start()
    try:
        time.sleep(0.05)
        assert not ran.is_set()
        loop.wake()
        assert ran.wait(WAIT_S)
    finally:
        assert loop.stop(WAIT_S)
