"""Writes one sorted slice of rows as Paimon Parquet data files (rolling at the target size)."""

from __future__ import annotations

import uuid

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from lsmlake.format import column_codecs
from lsmlake.format import options as opts
from lsmlake.format.binary_row import EMPTY_ROW, serialize_row
from lsmlake.format.bucket import POSTPONE_BUCKET, POSTPONE_DIR
from lsmlake.format.data_file_meta import FILE_SOURCE_APPEND, DataFileMeta, local_now_as_utc_ms
from lsmlake.format.numpy_columns import arrow_of
from lsmlake.format.row_kind import is_retract
from lsmlake.format.schema import TableSchema
from lsmlake.format.stats import EMPTY_STATS, column_stats
from lsmlake.fs.file_io import FileIO
from lsmlake.runtime.thread_pools import SharedPool

_STATS = SharedPool("lsmlake-file-stats", 2)


class DataFileWriter:
    """Turns Arrow rows of one (partition, bucket) into data files and their `DataFileMeta`."""

    def __init__(self, fio: FileIO, schema: TableSchema) -> None:
        self.io = fio
        self.schema = schema
        o = schema.table_options
        self.target_size = o.target_file_size(schema.is_primary_key_table)
        self.compression = o.get(opts.FILE_COMPRESSION)
        self.level = o.get(opts.FILE_COMPRESSION_ZSTD_LEVEL) if self.compression == "zstd" else None
        self.key_types = schema.types_of(schema.trimmed_primary_keys)
        self.value_types = [f.type for f in schema.fields]

    def write(self, bucket_dir: str, rows: pa.Table, seq: np.ndarray | None, kinds: np.ndarray | None,
              level: int = 0, file_source: int = FILE_SOURCE_APPEND, prefix: str = "data-") -> list[DataFileMeta]:
        """Write `rows` (already sorted by key for primary-key tables) into one or more files.

        For primary-key tables `seq` and `kinds` give each row's sequence number and kind; for append
        tables they may be None (then `seq` may still carry the sequence range to record).
        On a local disk every file is synced as it is written and the bucket directory once at the end,
        so the files survive a power cut before any commit names them. On failure the files this call
        wrote are deleted.
        """
        n = rows.num_rows
        if n == 0:
            return []
        per_file = max(1, int(self.target_size // max(1, rows.nbytes // n)))
        metas: list[DataFileMeta] = []
        try:
            for start in range(0, n, per_file):
                end = min(n, start + per_file)
                metas.append(self._write_one(
                    bucket_dir, rows.slice(start, end - start),
                    None if seq is None else seq[start:end], None if kinds is None else kinds[start:end],
                    level, file_source, prefix))
            self.io.sync_dir(bucket_dir)
        except BaseException:
            for m in metas:
                self.io.delete_quietly(f"{bucket_dir}/{m.file_name}")
            raise
        return metas

    def _write_one(self, bucket_dir: str, rows: pa.Table, seq: np.ndarray | None, kinds: np.ndarray | None,
                   level: int, file_source: int, prefix: str) -> DataFileMeta:
        name = f"{prefix}{uuid.uuid4()}-0.parquet"
        pk = self.schema.is_primary_key_table
        if pk:
            assert seq is not None and kinds is not None
            key_cols = [rows.column(k) for k in self.schema.trimmed_primary_keys]
            file_table = pa.Table.from_arrays(
                key_cols + [arrow_of(seq.astype(np.int64, copy=False)), arrow_of(kinds.astype(np.int8, copy=False))]
                + rows.columns,
                schema=self.schema.data_file_schema)
        else:
            file_table = rows.cast(self.schema.data_file_schema)
        sink = pa.BufferOutputStream()
        compression, compression_level = column_codecs.choose(file_table, self.compression, self.level)
        # the statistics are computed while the file encodes (both in Arrow, off the GIL)
        value_stats = _STATS.get().submit(column_stats, rows.columns, self.value_types)
        pq.write_table(file_table, sink, compression=compression, compression_level=compression_level,
                       row_group_size=max(1, file_table.num_rows),
                       use_dictionary=column_codecs.dictionary_columns(file_table))
        data = sink.getvalue().to_pybytes()
        self.io.write_bytes(f"{bucket_dir}/{name}", data, sync_dir=False)  # `write` syncs the directory once
        if pk:
            assert seq is not None and kinds is not None
            first = [c[0].as_py() for c in key_cols]
            last = [c[-1].as_py() for c in key_cols]
            min_key = serialize_row(first, self.key_types)
            max_key = serialize_row(last, self.key_types)
            key_stats = column_stats(key_cols, self.key_types)
            min_seq, max_seq = int(seq.min()), int(seq.max())
            delete_rows = int(np.count_nonzero(is_retract(kinds)))
        else:
            min_key = max_key = EMPTY_ROW
            key_stats = EMPTY_STATS
            min_seq = int(seq.min()) if seq is not None and len(seq) else 0
            max_seq = int(seq.max()) if seq is not None and len(seq) else 0
            delete_rows = 0
        return DataFileMeta(
            file_name=name, file_size=len(data), row_count=rows.num_rows, min_key=min_key, max_key=max_key,
            key_stats=key_stats, value_stats=value_stats.result(),
            min_sequence_number=min_seq, max_sequence_number=max_seq, schema_id=self.schema.id, level=level,
            creation_time_ms=local_now_as_utc_ms(), delete_row_count=delete_rows, file_source=file_source,
            value_stats_cols=None)


def bucket_dir(table_path: str, partition_path: str, bucket: int) -> str:
    """Directory of a bucket's data files: `<table>/<k=v/...>/bucket-<n>`; postponed rows (bucket -2) go to
    `bucket-postpone`, as in Paimon."""
    name = POSTPONE_DIR if bucket == POSTPONE_BUCKET else f"bucket-{bucket}"
    return f"{table_path}/{partition_path}/{name}" if partition_path else f"{table_path}/{name}"

