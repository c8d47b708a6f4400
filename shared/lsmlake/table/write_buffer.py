"""The write buffer of a long-running writer: the rows of one (partition, bucket) between two commits.

Paimon's writer keeps incoming records in a sort buffer; when it is full it either spills a sorted
run to local disk (`write-buffer-spillable`) or flushes to level-0 files. Here the buffer keeps the
incoming Arrow batches as they are and numbers their rows on arrival from 0: only their relative order
is known until the flush. A spill sorts the rows by (key, local number), folds them with the table's
merge function (the same fold a direct write does: keys whose retractions need their history keep
every row) and writes one sorted run. A flush takes one range of the bucket's real sequence numbers
from the table's `SequenceAllocator` (the catalog, in the writer service: see `sequence_numbers`),
shifts the local numbers into it, merges the in-memory rows and the runs key range by key range and
writes the folded rows through `TableWrite.write_files`, so the level-0 files carry exactly the
metadata of a direct write.

`BufferedTableWrite` holds one buffer per (partition, bucket) of a table and shares one memory
budget between them, as Paimon's writers share one memory pool: when the budget is exceeded the
largest buffer spills, or the caller is told to flush.
"""

from __future__ import annotations

import bisect
import logging
import os
import shutil
import tempfile
import uuid
from collections.abc import Callable, Generator, Iterator, Sequence
from dataclasses import dataclass, fields
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa

from lsmlake.format import options as opts
from lsmlake.format.data_file_meta import DataFileMeta
from lsmlake.format.data_file_writer import bucket_dir
from lsmlake.format.row_kind import is_retract
from lsmlake.format.schema import SEQUENCE_NUMBER, VALUE_KIND, TableSchema
from lsmlake.mergetree.dedupe import sort_and_group
from lsmlake.mergetree.merge.merge_function import MergeFunction
from lsmlake.table.input_rows import conform
from lsmlake.table.sequence_numbers import RestoredSequences, SequenceAllocator
from lsmlake.table.write import BucketTarget, CommitMessage, TableWrite, fold_rows

if TYPE_CHECKING:
    from lsmlake.table.file_store_table import FileStoreTable

_log = logging.getLogger(__name__)

#: rows of a spilled run are written (and read back) in record batches of about this size
SPILL_BATCH_BYTES = 4 << 20


@dataclass(frozen=True)
class WriteBufferOptions:
    """The table options a write buffer obeys, read once."""

    buffer_size: int
    spillable: bool
    max_disk_size: int | None  # None: unbounded
    max_num_file_handles: int
    compression: str | None  # Arrow IPC codec of spill files
    compression_level: int | None

    @staticmethod
    def from_table(options: opts.TableOptions, object_store: bool, streaming: bool = True) -> WriteBufferOptions:
        """Options of a table; `object_store` and `streaming` decide the default of `write-buffer-spillable`."""
        codec = (options.get(opts.SPILL_COMPRESSION) or "zstd").lower()
        codec = {"lzo": "lz4", "none": None}.get(codec, codec)  # Arrow IPC knows zstd and lz4 only
        if codec not in ("zstd", "lz4", None):
            codec = "zstd"
        return WriteBufferOptions(
            buffer_size=options.require(opts.WRITE_BUFFER_SIZE),
            spillable=options.write_buffer_spillable(object_store, streaming),
            max_disk_size=options.get(opts.WRITE_BUFFER_SPILL_MAX_DISK_SIZE),
            max_num_file_handles=max(2, options.require(opts.LOCAL_SORT_MAX_NUM_FILE_HANDLES)),
            compression=codec,
            compression_level=options.get(opts.SPILL_COMPRESSION_ZSTD_LEVEL) if codec == "zstd" else None)


@dataclass(frozen=True)
class WriteBufferStats:
    """Figures for metrics; `+` adds the figures of several buffers."""

    memory_bytes: int = 0  # Arrow buffer bytes of the rows held in memory
    memory_rows: int = 0  # rows held in memory
    buffered_rows: int = 0  # rows added since the last flush, in memory or spilled (before folding)
    disk_bytes: int = 0  # bytes of spill files on disk now
    spill_count: int = 0  # runs spilled since the buffer was created
    spilled_bytes: int = 0  # bytes written to spill files since the buffer was created

    def __add__(self, other: WriteBufferStats) -> WriteBufferStats:
        return WriteBufferStats(*(getattr(self, f.name) + getattr(other, f.name) for f in fields(self)))


@dataclass(frozen=True)
class _Run:
    """A spilled sorted run: an Arrow IPC file whose record batches never split the rows of a key."""

    path: str
    rows: int
    size: int


class WriteBuffer:
    """The rows of one (partition, bucket) since the last flush: Arrow batches in memory, then spilled runs.

    Args:
        schema: the table schema.
        target: the (partition, bucket) the rows belong to.
        next_sequence: the local number of the first row added (0: numbers are shifted at the flush).
        options: the table's write-buffer options.
        spill_dir: local directory for spill files (created on the first spill).
        merge_function: the table's merge function (None for append tables).
        changelog_input: keep every row for `changelog-producer = input` (spills sort but do not fold).
    """

    def __init__(self, schema: TableSchema, target: BucketTarget, options: WriteBufferOptions, spill_dir: str,
                 merge_function: MergeFunction | None = None, changelog_input: bool = False,
                 next_sequence: int = 0) -> None:
        self.schema = schema
        self.target = target
        self.next_sequence = next_sequence
        self.options = options
        self.spill_dir = spill_dir
        self.merge_function = merge_function
        self.changelog_input = changelog_input
        self.keys = list(schema.primary_keys)
        self._names = schema.field_names
        self._memory: list[pa.Table] = []
        self._memory_bytes = 0
        self._memory_rows = 0
        self._runs: list[_Run] = []
        self._buffered_rows = 0
        self._spill_count = 0
        self._spilled_bytes = 0
        self._must_flush = False

    # -- adding rows ---------------------------------------------------------------------------

    def add(self, rows: pa.Table, kinds: np.ndarray | None = None) -> None:
        """Append rows already conformed to the table schema (`kinds`: their `_VALUE_KIND`, +I when None).

        Each row gets the next local number, in order. When memory exceeds `write-buffer-size` the
        buffer spills, or, when it may not, `must_flush` becomes true.
        """
        n = rows.num_rows
        if n == 0:
            return
        if kinds is None:
            kinds = np.zeros(n, np.int8)
        seq = np.arange(self.next_sequence, self.next_sequence + n, dtype=np.int64)
        self.next_sequence += n
        table = pa.Table.from_arrays(rows.columns + [pa.array(seq, pa.int64()), pa.array(kinds, pa.int8())],
                                     names=self._names + [SEQUENCE_NUMBER, VALUE_KIND])
        self._memory.append(table)
        self._memory_bytes += table.nbytes
        self._memory_rows += n
        self._buffered_rows += n
        if self._memory_bytes > self.options.buffer_size:
            self.make_room()

    @property
    def memory_bytes(self) -> int:
        return self._memory_bytes

    @property
    def numbers_needed(self) -> int:
        """How many sequence numbers a flush takes: one per local number given out since the last flush."""
        return self.next_sequence

    @property
    def must_flush(self) -> bool:
        """True when the buffer is full and may not (or can no longer) spill: flush it to level-0 files."""
        return self._must_flush

    @property
    def is_empty(self) -> bool:
        return not self._memory and not self._runs

    @property
    def disk_bytes(self) -> int:
        return sum(r.size for r in self._runs)

    def can_spill(self) -> bool:
        limit = self.options.max_disk_size
        return self.options.spillable and (limit is None or self.disk_bytes < limit)

    def make_room(self) -> None:
        """Spill the in-memory rows if allowed; otherwise ask for a flush."""
        if not self._memory:
            return
        if not self.can_spill():
            self._must_flush = True
            return
        try:
            self.spill()
        except Exception:  # the rows stay in memory; a flush writes them to the table instead
            _log.warning("spilling the write buffer of bucket %d failed; asking for a flush", self.target.bucket,
                         exc_info=True)
            self._must_flush = True

    def stats(self) -> WriteBufferStats:
        return WriteBufferStats(self._memory_bytes, self._memory_rows, self._buffered_rows, self.disk_bytes,
                                self._spill_count, self._spilled_bytes)

    # -- spilling ------------------------------------------------------------------------------

    def spill(self) -> None:
        """Sort and fold the in-memory rows and write them as one sorted run to the spill directory.

        On failure the partial file is removed and the rows stay in memory.
        """
        if not self._memory:
            return
        table = self._memory_table()
        run, starts = self._sorted_run(table)
        os.makedirs(self.spill_dir, exist_ok=True)
        spilled = self._write_run([(run, starts)])
        self._memory, self._memory_bytes, self._memory_rows = [], 0, 0
        if spilled is None:
            return  # everything folded away (for example only ignored deletes)
        self._runs.append(spilled)
        self._spill_count += 1
        self._spilled_bytes += spilled.size
        if len(self._runs) >= self.options.max_num_file_handles:
            self._merge_runs()

    def _memory_table(self) -> pa.Table:
        return self._memory[0] if len(self._memory) == 1 else pa.concat_tables(self._memory)

    def _sorted_run(self, table: pa.Table) -> tuple[pa.Table, np.ndarray]:
        """Rows sorted by (key, sequence number), folded where that is exact, and the start of each key.

        Append tables keep arrival order (one "key" per row); `changelog-producer = input` keeps every row.
        """
        n = table.num_rows
        if self.merge_function is None:
            return table, np.arange(n, dtype=np.int64)
        if not self.changelog_input:
            rows, _, seq, kinds, layer = fold_rows(
                self.merge_function, self.keys, table.select(self._names), np.zeros(n, np.int64),
                table.column(SEQUENCE_NUMBER).to_numpy(), table.column(VALUE_KIND).to_numpy().astype(np.int8))
            table = pa.Table.from_arrays(rows.columns + [pa.array(seq, pa.int64()), pa.array(kinds, pa.int8())],
                                         names=table.column_names)
            if not layer.any():  # one row per key, in key order
                return table, np.arange(table.num_rows, dtype=np.int64)
        # keys holding several rows: order them by sequence number inside the key
        idx, starts = sort_and_group([table.column(k) for k in self.keys],
                                     [(table.column(SEQUENCE_NUMBER), "ascending")])
        return table.take(pa.array(idx, pa.int64())), starts

    def _write_run(self, pieces: Iterator[tuple[pa.Table, np.ndarray]] | list[tuple[pa.Table, np.ndarray]]
                   ) -> _Run | None:
        """Write sorted pieces (each with its key starts) as one run file; no record batch splits a key.

        Arrow IPC rather than Parquet: the file is private, short-lived and read back by this process,
        so no encoding or statistics are worth their cost, and IPC reads back batch by batch (the
        merge streams) with the codec of `spill-compression`.
        """
        path = os.path.join(self.spill_dir, f"run-{uuid.uuid4().hex}.arrow")
        write_options = pa.ipc.IpcWriteOptions(
            compression=None if self.options.compression is None
            else pa.Codec(self.options.compression, self.options.compression_level))
        rows = 0
        try:
            with pa.OSFile(path, "wb") as sink:
                writer = None
                for table, starts in pieces:
                    if writer is None:
                        writer = pa.ipc.new_file(sink, table.schema, options=write_options)
                    for a, b in _batch_bounds(table, starts):
                        writer.write_table(table.slice(a, b - a).combine_chunks(), max_chunksize=b - a)
                    rows += table.num_rows
                if writer is not None:
                    writer.close()
            if rows == 0:
                _remove(path)
                return None
            return _Run(path, rows, os.path.getsize(path))
        except BaseException:
            _remove(path)
            raise

    def _merge_runs(self) -> None:
        """Merge every spilled run into one (the fan-in of the final merge is `local-sort.max-num-file-handles`)."""
        readers = [_read_run(r.path) for r in self._runs]
        try:
            merged = self._write_run(self._sorted_run(chunk) for chunk in _merge_key_ranges(readers, self.keys))
        finally:
            for r in readers:
                r.close()
        for r in self._runs:
            _remove(r.path)
        self._runs = [] if merged is None else [merged]
        self._spilled_bytes += 0 if merged is None else merged.size

    # -- flushing ------------------------------------------------------------------------------

    def flush(self, table_write: TableWrite, first_sequence: int) -> CommitMessage:
        """Merge the in-memory rows and the spilled runs and write them as level-0 files.

        Local number i becomes sequence number `first_sequence + i` (a range of `numbers_needed` taken
        from the allocator). Returns the bucket's new data (and changelog) files; the spill files are
        deleted. On failure
        (a full warehouse disk, say) the files this flush wrote are deleted and the buffered rows kept, so
        that the flush can be retried; the caller may instead drop everything (`BufferedTableWrite.abort`).
        """
        message = CommitMessage(self.target.partition, self.target.bucket, self.schema.num_buckets)
        if self.is_empty:
            return message
        readers: list[Generator[pa.Table, None, None]] = [_read_run(r.path) for r in self._runs]
        try:
            if self._memory:
                readers.append(_chunks(*self._sorted_run(self._memory_table())))
            data = _LayeredFiles(self._file_sink(table_write, "data-", message.new_files, first_sequence),
                                 self.schema.table_options.target_file_size(self.schema.is_primary_key_table))
            changelog = _LayeredFiles(self._file_sink(table_write, "changelog-", message.changelog_files,
                                                      first_sequence), data.target_size)
            if self.merge_function is None:
                for reader in readers:  # runs are in sequence order, memory last
                    for chunk in reader:
                        data.add(0, chunk)
            else:
                for chunk in _merge_key_ranges(readers, self.keys):
                    self._emit(chunk, data, changelog)
            data.close()
            changelog.close()
        except BaseException:
            directory = bucket_dir(table_write.table_path, self.target.partition_path, self.target.bucket)
            for f in message.new_files + message.changelog_files:
                table_write.io.delete_quietly(f"{directory}/{f.file_name}")
            raise
        finally:
            for r in readers:
                r.close()
        self.discard()
        return message

    def _emit(self, chunk: pa.Table, data: _LayeredFiles, changelog: _LayeredFiles) -> None:
        """Fold one key range (every row of its keys) into its layers of level-0 rows."""
        assert self.merge_function is not None
        seq = chunk.column(SEQUENCE_NUMBER).to_numpy()
        kinds = chunk.column(VALUE_KIND).to_numpy().astype(np.int8)
        if self.changelog_input:
            keep = ~is_retract(kinds) if getattr(self.merge_function, "ignore_delete", False) else None
            idx, _ = sort_and_group([chunk.column(k) for k in self.keys], [(seq, "ascending")])
            if keep is not None:
                idx = idx[keep[idx]]
            changelog.add(0, chunk.take(pa.array(idx, pa.int64())))
        rows, _, seq, kinds, layer = fold_rows(self.merge_function, self.keys, chunk.select(self._names),
                                               np.zeros(chunk.num_rows, np.int64), seq, kinds)
        folded = pa.Table.from_arrays(rows.columns + [pa.array(seq, pa.int64()), pa.array(kinds, pa.int8())],
                                      names=chunk.column_names)
        cuts = np.flatnonzero(np.r_[True, layer[1:] != layer[:-1], True])  # rows come ordered by (layer, key)
        for a, b in zip(cuts[:-1].tolist(), cuts[1:].tolist(), strict=True):
            data.add(int(layer[a]), folded.slice(a, b - a))

    def _file_sink(self, table_write: TableWrite, prefix: str, out: list[DataFileMeta],
                   first_sequence: int) -> Callable[[pa.Table], None]:
        def write(table: pa.Table) -> None:
            out.extend(table_write.write_files(
                self.target, table.select(self._names), table.column(SEQUENCE_NUMBER).to_numpy() + first_sequence,
                table.column(VALUE_KIND).to_numpy().astype(np.int8), prefix=prefix))
        return write

    def discard(self) -> None:
        """Drop the buffered rows and delete the spill files; local numbering starts again from 0."""
        for r in self._runs:
            _remove(r.path)
        self._runs = []
        self._memory, self._memory_bytes, self._memory_rows = [], 0, 0
        self._buffered_rows = 0
        self._must_flush = False
        self.next_sequence = 0

    def close(self) -> None:
        """Drop everything buffered and remove the spill files."""
        self.discard()


class _LayeredFiles:
    """Collects the folded rows of each layer in key order and writes them as files of about the target size.

    Layer 0 holds one row per key; the held rows of a key go to layers 1, 2, ... so that every file
    keeps its keys unique (see `fold_rows`).
    """

    def __init__(self, write: Callable[[pa.Table], None], target_size: int) -> None:
        self.write = write
        self.target_size = target_size
        self._pending: dict[int, list[pa.Table]] = {}
        self._bytes: dict[int, int] = {}

    def add(self, layer: int, rows: pa.Table) -> None:
        if rows.num_rows == 0:
            return
        self._pending.setdefault(layer, []).append(rows)
        self._bytes[layer] = self._bytes.get(layer, 0) + rows.nbytes
        if self._bytes[layer] >= self.target_size:
            self._write(layer)

    def _write(self, layer: int) -> None:
        parts = self._pending.pop(layer, [])
        self._bytes.pop(layer, None)
        if parts:
            self.write(pa.concat_tables(parts))

    def close(self) -> None:
        for layer in sorted(self._pending):
            self._write(layer)


class BufferedTableWrite:
    """One table's write buffers, one per (partition, bucket), for a writer that commits many small writes at once.

    Typical use by a service: `write` each request's rows; when `must_flush` is true call `flush`;
    at a group commit call `prepare_commit`, commit the messages, and when that commit definitely
    failed call `delete_files(messages)`; `close` at shutdown. Not thread-safe: one caller at a time.
    """

    def __init__(self, table: FileStoreTable, spill_root: str | None = None, streaming: bool = True,
                 sequences: SequenceAllocator | None = None) -> None:
        self.table = table
        self.options = WriteBufferOptions.from_table(table.options, object_store=not table.io.local,
                                                     streaming=streaming)
        self.spill_dir = os.path.join(spill_root or tempfile.gettempdir(), f"lsmlake-write-buffer-{uuid.uuid4().hex}")
        # one allocator for the life of the buffers: alone on its buckets, it restores each bucket once
        self.sequences = sequences or RestoredSequences(table.max_sequence_restorer())
        self._write = table.new_write(self.sequences)
        self._buffers: dict[tuple[bytes, int], WriteBuffer] = {}
        self._pending: dict[tuple[bytes, int], CommitMessage] = {}  # files flushed since the last prepare_commit
        self._paths: dict[bytes, str] = {}  # partition -> directory, for delete_files
        self._must_flush = False

    def write(self, data: pa.Table | pa.RecordBatch) -> None:
        """Validate the rows and buffer them; nothing is buffered when they are invalid."""
        rows, kinds_arr = conform(self.table.schema, data)
        n = rows.num_rows
        if n == 0:
            return
        kinds = kinds_arr.to_numpy(zero_copy_only=False).astype(np.int8)
        self._write.check_kinds(kinds)
        routing = self._write.route(rows)
        for target, idx in routing.runs():
            buffer = self._buffer(target)
            if len(idx) == n:  # the whole batch goes to one bucket: no copy
                buffer.add(rows, kinds)
            else:
                buffer.add(rows.take(pa.array(idx, pa.int64())), kinds[idx])
        self._make_room()

    def _buffer(self, target: BucketTarget) -> WriteBuffer:
        key = (target.partition, target.bucket)
        buffer = self._buffers.get(key)
        if buffer is None:
            self._paths[target.partition] = target.partition_path
            buffer = WriteBuffer(self.table.schema, target, self.options, self.spill_dir, self._write.merge_function,
                                 self._write.changelog_input)
            self._buffers[key] = buffer
        return buffer

    def _make_room(self) -> None:
        """Keep the buffers' memory within `write-buffer-size`: spill the largest first, as Paimon's pool does."""
        total = sum(b.memory_bytes for b in self._buffers.values())
        while total > self.options.buffer_size:
            biggest = max(self._buffers.values(), key=lambda b: b.memory_bytes)
            before = biggest.memory_bytes
            biggest.make_room()
            if biggest.memory_bytes >= before:  # not allowed to spill, or the spill failed
                self._must_flush = True
                return
            total -= before - biggest.memory_bytes

    @property
    def must_flush(self) -> bool:
        """True when the buffers are full and may not spill: call `flush` (or `prepare_commit`)."""
        return self._must_flush or any(b.must_flush for b in self._buffers.values())

    def flush(self) -> None:
        """Write every buffer as level-0 files; they are committed with the next `prepare_commit`.

        The sequence numbers of every bucket are taken in one call to the allocator, now: a change
        acknowledged before these rows arrived was numbered at its own, earlier flush, so below them.
        On failure the error is raised with nothing lost: the buffers written so far hold their files for
        the next `prepare_commit`, the failed one and the rest still hold their rows, so `flush` (or
        `prepare_commit`) can be called again (taking new numbers; unused ones are never reused); `abort`
        drops everything instead.
        """
        waiting = {key: b for key, b in self._buffers.items() if not b.is_empty}
        if not waiting:
            self._must_flush = False
            return
        first = self.sequences.allocate({key: b.numbers_needed for key, b in waiting.items()})
        for key, buffer in waiting.items():
            message = buffer.flush(self._write, first[key])
            pending = self._pending.setdefault(key, CommitMessage(message.partition, message.bucket,
                                                                  message.total_buckets))
            pending.new_files.extend(message.new_files)
            pending.changelog_files.extend(message.changelog_files)
        self._must_flush = False

    def prepare_commit(self) -> list[CommitMessage]:
        """Flush every buffer and hand over the commit messages of everything written since the last call.

        The caller owns the returned files from now on: it commits them, and deletes them with
        `delete_files` only when the commit definitely failed (never when its outcome is unknown).
        On failure nothing is handed over and nothing is lost (see `flush`).
        """
        self.flush()
        messages = [m for m in self._pending.values() if m.new_files or m.changelog_files]
        self._pending = {}
        self._write = self.table.new_write(self.sequences)  # a new cycle: `abort` must never touch handed-over files
        return messages

    def delete_files(self, messages: Sequence[CommitMessage]) -> None:
        """Delete the data and changelog files of messages whose commit definitely failed."""
        for m in messages:
            directory = bucket_dir(self.table.path, self._paths[m.partition], m.bucket)
            for f in m.new_files + m.changelog_files:
                self.table.io.delete_quietly(f"{directory}/{f.file_name}")

    def stats(self) -> WriteBufferStats:
        """The summed figures of every buffer."""
        total = WriteBufferStats()
        for b in self._buffers.values():
            total = total + b.stats()
        return total

    @property
    def buffers(self) -> dict[tuple[bytes, int], WriteBuffer]:
        """The buffer of each (partition bytes, bucket), for per-bucket metrics."""
        return dict(self._buffers)

    def abort(self) -> None:
        """Drop every buffered row and spill file, and delete the files written since the last `prepare_commit`."""
        for b in self._buffers.values():
            b.discard()
        self._pending = {}
        self._must_flush = False
        self._write.abort()

    def close(self) -> None:
        """Abort and remove the spill directory."""
        self.abort()
        shutil.rmtree(self.spill_dir, ignore_errors=True)

    def __enter__(self) -> BufferedTableWrite:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


# -- sorted runs, read back and merged ------------------------------------------------------------

def _batch_bounds(table: pa.Table, starts: np.ndarray) -> list[tuple[int, int]]:
    """Slices of about SPILL_BATCH_BYTES that begin at key starts (the rows of a key stay together)."""
    n = table.num_rows
    if n == 0:
        return []
    per_batch = max(1, int(SPILL_BATCH_BYTES // max(1, table.nbytes // n)))
    wanted = np.arange(per_batch, n, per_batch)
    cuts = starts[np.minimum(np.searchsorted(starts, wanted), len(starts) - 1)]
    bounds = np.unique(np.r_[0, cuts[cuts > 0], n])
    return list(zip(bounds[:-1].tolist(), bounds[1:].tolist(), strict=True))


def _chunks(table: pa.Table, starts: np.ndarray) -> Generator[pa.Table, None, None]:
    for a, b in _batch_bounds(table, starts):
        yield table.slice(a, b - a)


def _read_run(path: str) -> Generator[pa.Table, None, None]:
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


def _merge_key_ranges(sources: list[Iterator[pa.Table]], keys: list[str]) -> Iterator[pa.Table]:
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
            bound = min(_KeyView(pending[i], keys).last() for i in bounded)  # type: ignore[arg-type]
            for i in present:
                t = pending[i]
                assert t is not None
                cut = bisect.bisect_right(_KeyView(t, keys), bound)
                if cut:
                    taken.append(t.slice(0, cut))
                    pending[i] = t.slice(cut)
        yield taken[0] if len(taken) == 1 else pa.concat_tables(taken)


def _remove(path: str) -> None:
    try:
        os.remove(path)
    except FileNotFoundError:
        pass
