"""A deletion vector as an Iceberg v2 position delete file: Parquet with `file_path` and `pos`, sorted by position.

The file's name is derived from the data file and the vector's content, so a vector that did not change maps to the
delete file already written (reused, never rewritten), and two publishers of the same vector write the same bytes.
"""

from __future__ import annotations

import hashlib
import io

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from pyroaring import BitMap

FILE_PATH_ID = 2147483546
POS_ID = 2147483545

_SCHEMA = pa.schema([
    pa.field("file_path", pa.string(), nullable=False, metadata={b"PARQUET:field_id": str(FILE_PATH_ID).encode()}),
    pa.field("pos", pa.int64(), nullable=False, metadata={b"PARQUET:field_id": str(POS_ID).encode()}),
])


def delete_file_name(data_file_name: str, vector: BitMap) -> str:
    """The name of the delete file of one data file's vector (same vector, same name)."""
    digest = hashlib.sha256(vector.serialize()).hexdigest()[:24]
    stem = data_file_name.rsplit(".", 1)[0]
    return f"{stem}-dv-{digest}.parquet"


def encode(data_file_path: str, vector: BitMap) -> bytes:
    """The Parquet bytes of the position deletes of `vector` (a roaring bitmap iterates sorted)."""
    positions = np.frombuffer(vector.to_array(), dtype=np.uint32).astype(np.int64)
    paths = pc.take(pa.array([data_file_path], pa.string()), pa.array(np.zeros(len(positions), dtype=np.int32)))
    table = pa.table({"file_path": paths, "pos": pa.array(positions, pa.int64())}, schema=_SCHEMA)
    buf = io.BytesIO()
    pq.write_table(table, buf, compression="zstd")
    return buf.getvalue()
