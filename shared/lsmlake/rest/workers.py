"""The worker slots of an HTTP port: at most `count` calls served at once, each run in a thread of its pool.

A call takes its slot before its body is read and gives it back once its answer is written, so the bodies and
answers in memory are bounded by `count` times a route's limit, whatever the number of connections.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

T = TypeVar("T")
A = TypeVar("A")


class Workers:
    """`count` slots and a pool of `count` threads for the synchronous handlers; used on the event loop only."""

    def __init__(self, count: int, name: str) -> None:
        self.count = max(1, count)
        self._slots = asyncio.Semaphore(self.count)
        self._pool = ThreadPoolExecutor(self.count, thread_name_prefix=f"{name}-worker")
        self.busy = 0  # slots taken
        self._idle = asyncio.Event()
        self._idle.set()

    async def acquire(self, timeout_s: float) -> bool:
        """Take a slot, waiting at most `timeout_s`; whether one was taken (then `release` it)."""
        try:
            async with asyncio.timeout(timeout_s):
                await self._slots.acquire()
        except TimeoutError:
            return False
        self.busy += 1
        self._idle.clear()
        return True

    def release(self) -> None:
        self._slots.release()
        self.busy -= 1
        if self.busy == 0:
            self._idle.set()

    async def run(self, fn: Callable[[A], T], arg: A) -> T:
        """`fn(arg)` in a worker thread (the caller holds a slot, so one is free)."""
        return await asyncio.get_running_loop().run_in_executor(self._pool, fn, arg)

    async def settled(self, grace_s: float) -> bool:
        """Wait until no slot is taken, at most `grace_s`; whether none is."""
        try:
            async with asyncio.timeout(grace_s):
                await self._idle.wait()
        except TimeoutError:
            return False
        return True

    def close(self) -> None:
        """Let the threads end once their handlers return (a handler cannot be interrupted)."""
        self._pool.shutdown(wait=False, cancel_futures=True)
