"""A local cache of the key columns of data files, for lookups during compaction.

Data files never change once written, so their keys (with row positions) can be kept between
compactions of a long-lived compactor. The cache holds at most `lookup.cache-max-memory-size` bytes
in memory (least recently used entries leave first) and spills what it evicts to a local folder as
Arrow IPC files, which are read back (memory-mapped) instead of the data file. Deletion vectors are
applied by the caller, since they change while the file does not.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import threading
from collections import OrderedDict
from collections.abc import Callable

import pyarrow as pa
import pyarrow.ipc as ipc


class LookupCache:
    """File name -> Arrow table of its keys and positions, bounded in memory, spilling to disk."""

    def __init__(self, max_memory_bytes: int, spill_dir: str | None = None) -> None:
        self.max_memory_bytes = max_memory_bytes
        self._spill_dir = spill_dir
        self._memory: OrderedDict[str, pa.Table] = OrderedDict()
        self._spilled: dict[str, str] = {}
        self._bytes = 0
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0

    @property
    def spill_dir(self) -> str:
        if self._spill_dir is None:
            self._spill_dir = tempfile.mkdtemp(prefix="lsmlake-lookup-")
        os.makedirs(self._spill_dir, exist_ok=True)
        return self._spill_dir

    @property
    def memory_bytes(self) -> int:
        return self._bytes

    def get(self, file_name: str, load: Callable[[], pa.Table]) -> pa.Table:
        with self._lock:
            table = self._memory.get(file_name)
            if table is not None:
                self._memory.move_to_end(file_name)
                self.hits += 1
                return table
            path = self._spilled.get(file_name)
        if path is not None:
            self.hits += 1
            with pa.memory_map(path) as source:
                return ipc.open_file(source).read_all()
        self.misses += 1
        table = load()
        self._put(file_name, table)
        return table

    def _put(self, file_name: str, table: pa.Table) -> None:
        with self._lock:
            self._memory[file_name] = table
            self._bytes += table.nbytes
            while self._bytes > self.max_memory_bytes and len(self._memory) > 1:
                name, old = self._memory.popitem(last=False)
                self._bytes -= old.nbytes
                self._spill(name, old)

    def _spill(self, file_name: str, table: pa.Table) -> None:
        path = os.path.join(self.spill_dir, file_name + ".arrow")
        with pa.OSFile(path, "wb") as sink, ipc.new_file(sink, table.schema) as writer:
            writer.write_table(table)
        self._spilled[file_name] = path

    def forget(self, file_names: list[str]) -> None:
        """Drop entries of files compaction removed."""
        with self._lock:
            for name in file_names:
                old = self._memory.pop(name, None)
                if old is not None:
                    self._bytes -= old.nbytes
                path = self._spilled.pop(name, None)
                if path is not None:
                    try:
                        os.remove(path)
                    except OSError:
                        pass

    def close(self) -> None:
        with self._lock:
            self._memory.clear()
            self._bytes = 0
            self._spilled.clear()
            if self._spill_dir is not None:
                shutil.rmtree(self._spill_dir, ignore_errors=True)


_CACHES: dict[int, LookupCache] = {}


def process_cache(max_memory_bytes: int) -> LookupCache:
    """The lookup cache of this process for a given memory bound (shared by its compactions)."""
    cache = _CACHES.get(max_memory_bytes)
    if cache is None:
        cache = _CACHES[max_memory_bytes] = LookupCache(max_memory_bytes)
    return cache
