"""The sorted runs a write buffer spills to local disk: Arrow IPC files, read back and merged key range by key range.

A run's record batches never split the rows of a key, so a merge can always cut between two batches.
"""

from __future__ import annotations

import bisect
import os
import uuid
from collections.abc import Generator, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa

#: rows of a spilled run are written (and read back) in record batches of about this size
SPILL_BATCH_BYTES = 4 << 20


@dataclass(frozen=True)
class SpilledRun:
    """A spilled sorted run: an Arrow IPC file whose record batches never split the rows of a key."""

    path: str
    rows: int
    size: int


def write_run(spill_dir: str, pieces: Iterable[tuple[pa.Table, np.ndarray]], compression: str | None,
              compression_level: int | None) -> SpilledRun | None:
    """Write sorted pieces (each with its key starts) as one run file; no record batch splits a key.

    Arrow IPC rather than Parquet: the file is private, short-lived and read back by this process,
    so no encoding or statistics are worth their cost, and IPC reads back batch by batch (the
    merge streams) with the codec of `spill-compression` (`compression`: an Arrow IPC codec or None).
    """
    path = os.path.join(spill_dir, f"run-{uuid.uuid4().hex}.arrow")
    write_options = pa.ipc.IpcWriteOptions(
        compression=None if compression is None else pa.Codec(compression, compression_level))
    rows = 0
    try:
        with pa.OSFile(path, "wb") as sink:
            writer = None
            for table, starts in pieces:
                if writer is None:
                    writer = pa.ipc.new_file(sink, table.schema, options=write_options)
                for a, b in batch_bounds(table, starts):
                    writer.write_table(table.slice(a, b - a).combine_chunks(), max_chunksize=b - a)
                rows += table.num_rows
            if writer is not None:
                writer.close()
        if rows == 0:
            remove_file(path)
            return None
        return SpilledRun(path, rows, os.path.getsize(path))
    except BaseException:
        remove_file(path)
        raise


def batch_bounds(table: pa.Table, starts: np.ndarray) -> list[tuple[int, int]]:
    """Slices of about SPILL_BATCH_BYTES that begin at key starts (the rows of a key stay together)."""
    n = table.num_rows
    if n == 0:
        return []
    per_batch = max(1, int(SPILL_BATCH_BYTES // max(1, table.nbytes // n)))
    wanted = np.arange(per_batch, n, per_batch)
    cuts = starts[np.minimum(np.searchsorted(starts, wanted), len(starts) - 1)]
    bounds = np.unique(np.r_[0, cuts[cuts > 0], n])
    return list(zip(bounds[:-1].tolist(), bounds[1:].tolist(), strict=True))


def key_chunks(table: pa.Table, starts: np.ndarray) -> Generator[pa.Table, None, None]:
    for a, b in batch_bounds(table, starts):
        yield table.slice(a, b - a)


def read_run(path: str) -> Generator[pa.Table, None, None]:
    with pa.OSFile(path, "rb") as source:
        reader = pa.ipc.open_file(source)
        for i in range(reader.num_record_batches):
            yield pa.Table.from_batches([reader.get_batch(i)])


class _KeyView(Sequence[tuple[Any, ...]]):
    """The key of each row as a Python tuple that orders like Arrow's sort, for bisect.

    Nulls come first and NaN last, as `sort_and_group` orders them; temporal values compare by
    their integer storage (nanosecond timestamps have no exact Python value).
    """

    def __init__(self, table: pa.Table, keys: list[str]) -> None:
        self.columns = [_comparable(table.column(k)) for k in keys]
        self.n = table.num_rows

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: Any) -> Any:
        return tuple(_sort_value(c[i].as_py()) for c in self.columns)

    def last(self) -> tuple[Any, ...]:
        return self[self.n - 1]


def _comparable(col: pa.ChunkedArray) -> pa.ChunkedArray:
    t = col.type
    if pa.types.is_timestamp(t) or pa.types.is_time64(t) or pa.types.is_date64(t) or pa.types.is_duration(t):
        return col.cast(pa.int64())
    if pa.types.is_date32(t) or pa.types.is_time32(t):
        return col.cast(pa.int32())
    return col


def _sort_value(v: Any) -> tuple[Any, ...]:
    if v is None:
        return (0,)
    if isinstance(v, float) and v != v:  # NaN
        return (2,)
    return (1, v)


def merge_key_ranges(sources: Sequence[Iterator[pa.Table]], keys: list[str]) -> Iterator[pa.Table]:
    """K-way merge of sorted runs, one key range at a time: each yielded table holds every row of its keys.

    Every source yields tables sorted by key that never split a key across two tables. The range
    ends at the smallest last key among the sources that are not exhausted: no source can hold a
    row of a smaller or equal key in a later table.
    """
    pending: list[pa.Table | None] = [None] * len(sources)
    live = [True] * len(sources)
    while True:
        for i, source in enumerate(sources):
            while live[i] and (pending[i] is None or pending[i].num_rows == 0):  # type: ignore[union-attr]
                nxt = next(source, None)
                if nxt is None:
                    live[i] = False
                else:
                    pending[i] = nxt
        present = [i for i, t in enumerate(pending) if t is not None and t.num_rows]
        if not present:
            return
        bounded = [i for i in present if live[i]]
        taken = []
        if not bounded:  # every source is exhausted: the rest is one range
            taken = [pending[i] for i in present]
            pending = [None] * len(sources)
        else:
            bound = min(_KeyView(pending[i], keys).last() for i in bounded)
            for i in present:
                t = pending[i]
                assert t is not None
                cut = bisect.bisect_right(_KeyView(t, keys), bound)
                if cut:
                    taken.append(t.slice(0, cut))
                    pending[i] = t.slice(cut)
        yield taken[0] if len(taken) == 1 else pa.concat_tables(taken)


def remove_file(path: str) -> None:
    try:
        os.remove(path)
    except FileNotFoundError:
        pass
