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

`BufferedTableWrite` holds one buffer (`bucket_buffer.WriteBuffer`) per (partition, bucket) of a table
and shares one memory budget between them, as Paimon's writers share one memory pool: when the budget is exceeded the
largest buffer spills, or the caller is told to flush.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import uuid
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa

from lsmlake.format.data_file_writer import bucket_dir
from lsmlake.table.bucket_buffer import WriteBuffer, WriteBufferOptions, WriteBufferStats
from lsmlake.table.dynamic_bucket import BucketAssigner
from lsmlake.table.input_rows import conform
from lsmlake.table.sequence_numbers import RestoredSequences, SequenceAllocator
from lsmlake.table.write import BucketTarget, CommitMessage

if TYPE_CHECKING:
    from lsmlake.table.file_store_table import FileStoreTable

# the buffer of one bucket and its figures are part of this module's interface (metrics, tests)
__all__ = ["BufferedTableWrite", "WriteBuffer", "WriteBufferOptions", "WriteBufferStats"]


class BufferedTableWrite:
    """One table's write buffers, one per (partition, bucket), for a writer that commits many small writes at once.

    Typical use by a service: `write` each request's rows; when `must_flush` is true call `flush`;
    at a group commit call `prepare_commit`, commit the messages, and when that commit definitely
    failed call `delete_files(messages)`; `close` at shutdown. Not thread-safe: one caller at a time.
    """

    def __init__(self, table: FileStoreTable, spill_root: str | None = None, streaming: bool = True,
                 sequences: SequenceAllocator | None = None, assigner: BucketAssigner | None = None) -> None:
        """`sequences` and `assigner` default to the table's own (a writer alone on its buckets; assignments
        committed straight to the table)."""
        self.table = table
        self.options = WriteBufferOptions.from_table(table.options, object_store=not table.io.local,
                                                     streaming=streaming)
        self.spill_dir = os.path.join(spill_root or tempfile.gettempdir(), f"lsmlake-write-buffer-{uuid.uuid4().hex}")
        # one allocator for the life of the buffers: alone on its buckets, it restores each bucket once
        self.sequences = sequences or RestoredSequences(table.max_sequence_restorer())
        self._write = table.new_write(self.sequences, assigner)
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
        rows, kinds, routing = self._write.route_rows(rows, kinds)
        n = rows.num_rows
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
