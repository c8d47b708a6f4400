"""Process-wide thread pools made on first use, and made afresh in a forked child.

A forked child (Spark's Python workers, `multiprocessing` with fork) has none of its parent's threads, so a pool
made before the fork would queue tasks that never run: each `SharedPool` forgets its executor in the child.
Each pool is its own: a task of one pool may wait on another pool's tasks, never on its own pool's.
"""

from __future__ import annotations

import os
import threading
import weakref
from concurrent.futures import ThreadPoolExecutor

_POOLS: weakref.WeakSet[SharedPool] = weakref.WeakSet()


class SharedPool:
    """A ThreadPoolExecutor of `workers` threads named `name-N`, made at the first `get`."""

    def __init__(self, name: str, workers: int) -> None:
        self.name = name
        self.workers = workers
        self._lock = threading.Lock()
        self._executor: ThreadPoolExecutor | None = None
        _POOLS.add(self)

    def get(self) -> ThreadPoolExecutor:
        with self._lock:
            if self._executor is None:
                self._executor = ThreadPoolExecutor(self.workers, thread_name_prefix=self.name)
            return self._executor

    def _forget(self) -> None:
        self._lock = threading.Lock()
        self._executor = None


def _forget_all_in_child() -> None:
    for pool in list(_POOLS):
        pool._forget()


os.register_at_fork(after_in_child=_forget_all_in_child)
