"""The write buffer of one (partition, bucket): its rows between two flushes, in memory and in spilled runs.

See `write_buffer` for how spills and flushes number and fold the rows; this module holds the buffer
itself, the options it obeys and the figures it reports.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Generator
from dataclasses import dataclass, fields

import numpy as np
import pyarrow as pa

from lsmlake.format import options as opts
from lsmlake.format.data_file_meta import DataFileMeta
from lsmlake.format.data_file_writer import bucket_dir
from lsmlake.format.row_kind import is_retract
from lsmlake.format.schema import SEQUENCE_NUMBER, VALUE_KIND, TableSchema
from lsmlake.mergetree.dedupe import sort_and_group
from lsmlake.mergetree.merge.merge_function import MergeFunction
from lsmlake.table.spill_runs import SpilledRun, key_chunks, merge_key_ranges, read_run, remove_file, write_run
from lsmlake.table.write import BucketTarget, CommitMessage, TableWrite, fold_rows

_log = logging.getLogger(__name__)


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
        name = options.get(opts.SPILL_COMPRESSION).lower()
        codec: str | None = {"lzo": "lz4", "none": None}.get(name, name)  # Arrow IPC knows zstd and lz4 only
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
        self._runs: list[SpilledRun] = []
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
        spilled = write_run(self.spill_dir, [(run, starts)], self.options.compression,
                            self.options.compression_level)
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

    def _merge_runs(self) -> None:
        """Merge every spilled run into one (the fan-in of the final merge is `local-sort.max-num-file-handles`)."""
        readers = [read_run(r.path) for r in self._runs]
        try:
            sorted_chunks = (self._sorted_run(chunk) for chunk in merge_key_ranges(readers, self.keys))
            merged = write_run(self.spill_dir, sorted_chunks, self.options.compression, self.options.compression_level)
        finally:
            for reader in readers:
                reader.close()
        for r in self._runs:
            remove_file(r.path)
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
        readers: list[Generator[pa.Table, None, None]] = [read_run(r.path) for r in self._runs]
        try:
            if self._memory:
                readers.append(key_chunks(*self._sorted_run(self._memory_table())))
            data = _LayeredFiles(self._file_sink(table_write, "data-", message.new_files, first_sequence),
                                 self.schema.table_options.target_file_size(self.schema.is_primary_key_table))
            changelog = _LayeredFiles(self._file_sink(table_write, "changelog-", message.changelog_files,
                                                      first_sequence), data.target_size)
            if self.merge_function is None:
                for reader in readers:  # runs are in sequence order, memory last
                    for chunk in reader:
                        data.add(0, chunk)
            else:
                for chunk in merge_key_ranges(readers, self.keys):
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
            remove_file(r.path)
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
