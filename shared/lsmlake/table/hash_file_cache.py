"""`HashFileCache`: the HASH indexes a catalog keeps in memory between bucket assignments, bounded.

Reading a dynamic-bucket table's HASH index files at every `AssignBuckets` would cost a read of every key
hash of the table per call, so the catalog keeps each table's `HashFiles`. Kept for ever, they grew with
every table ever assigned, dropped ones included. This cache holds at most `max_tables` tables and
`max_bytes` of hashes, evicting the least recently used table first, and forgets a table when it is
dropped. The table just used is never evicted to meet `max_bytes`: an assignment needs its table's whole
index in memory anyway, so keeping it raises nothing but the next assignment's speed.

Entries are keyed by table name and hold the table's identity (`table_uuid`): a table dropped and created
again, or a name another table was renamed to, starts from its own files, never from another table's.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from lsmlake.table.dynamic_bucket import HashFiles

#: tables whose HASH indexes a catalog keeps, by default
MAX_TABLES = 64
#: bytes of key hashes a catalog keeps, by default (a key costs 12 to 24 bytes: about 10 million keys)
MAX_BYTES = 256 << 20


@dataclass
class _Entry:
    table_uuid: str
    files: HashFiles
    nbytes: int = 0  # measured when its last user was done


class HashFileCache:
    """Each table's `HashFiles`, least recently used evicted first past `max_tables` tables or `max_bytes`;
    thread-safe. A table has one user at a time (AssignBuckets holds the table's commit lock)."""

    def __init__(self, max_tables: int = MAX_TABLES, max_bytes: int = MAX_BYTES) -> None:
        if max_tables < 1:
            raise ValueError(f"max_tables must be at least 1, not {max_tables}")
        if max_bytes < 0:
            raise ValueError(f"max_bytes must not be negative, not {max_bytes}")
        self.max_tables = max_tables
        self.max_bytes = max_bytes
        self._lock = threading.Lock()
        self._entries: OrderedDict[str, _Entry] = OrderedDict()  # least recently used first

    @contextmanager
    def use(self, table_id: str, table_uuid: str, make: Callable[[], HashFiles]) -> Iterator[HashFiles]:
        """The table's `HashFiles` (from `make()` when none is held for this identity); once the caller is done,
        its size is measured again (an assignment reads new files) and other tables are evicted past the bounds."""
        with self._lock:
            entry = self._entries.get(table_id)
            if entry is None or entry.table_uuid != table_uuid:  # new, or another table under that name
                entry = self._entries[table_id] = _Entry(table_uuid, make())
            self._entries.move_to_end(table_id)
        try:
            yield entry.files
        finally:
            nbytes = entry.files.nbytes()  # outside the lock: only this table's user changes its files
            with self._lock:
                if self._entries.get(table_id) is entry:  # not forgotten meanwhile
                    entry.nbytes = nbytes
                self._evict(keep=table_id)

    def forget(self, table_id: str) -> None:
        """Drop what is held for a table (it was dropped)."""
        with self._lock:
            self._entries.pop(table_id, None)

    @property
    def nbytes(self) -> int:
        """Bytes of the hashes held, as measured after each use."""
        with self._lock:
            return sum(e.nbytes for e in self._entries.values())

    def __len__(self) -> int:
        with self._lock:
            return len(self._entries)

    def __contains__(self, table_id: object) -> bool:
        with self._lock:
            return table_id in self._entries

    def _evict(self, keep: str) -> None:
        """Evict the least recently used tables but `keep` until within both bounds (under `_lock`)."""
        total = sum(e.nbytes for e in self._entries.values())
        for table_id in list(self._entries):
            if len(self._entries) <= self.max_tables and total <= self.max_bytes:
                return
            if table_id != keep:
                total -= self._entries.pop(table_id).nbytes
