"""Fixed-bucket assignment as Paimon does it: MurmurHash3 (x86_32, seed 42) of the bucket-key BinaryRow,
then `abs(hash % N)` (fact sheet section 7)."""

from __future__ import annotations

import struct
from collections.abc import Sequence

import numpy as np
import pyarrow as pa

from lsmlake.errors import InvalidInputError
from lsmlake.format.binary_row_columns import encode_rows
from lsmlake.format.types import AnyType

#: Paimon's bucket numbers of the two bucket modes below 0 (option `bucket` -1 and -2): dynamic, postpone
DYNAMIC_BUCKET = -1
POSTPONE_BUCKET = -2
POSTPONE_DIR = "bucket-postpone"  # where postponed rows wait for a compaction to place them
_SEED = 42
_C1 = np.uint32(0xCC9E2D51)
_C2 = np.uint32(0x1B873593)
_M5 = np.uint32(5)
_N1 = np.uint32(0xE6546B64)
_F1 = np.uint32(0x85EBCA6B)
_F2 = np.uint32(0xC2B2AE35)
_MASK32 = 0xFFFFFFFF


def _rotl(x: np.ndarray, r: int) -> np.ndarray:
    return (x << np.uint32(r)) | (x >> np.uint32(32 - r))


def _fmix(h: np.ndarray) -> np.ndarray:
    h ^= h >> np.uint32(16)
    h *= _F1
    h ^= h >> np.uint32(13)
    h *= _F2
    h ^= h >> np.uint32(16)
    return h


def murmur3_rows(flat: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    """Paimon's MurmurHash3 of each row `flat[offsets[i]:offsets[i+1]]` (4-byte LE words), as int32."""
    offsets = np.asarray(offsets, dtype=np.int64)
    n = len(offsets) - 1
    if n < 0:
        raise InvalidInputError("offsets must hold at least one entry")
    lengths = np.diff(offsets)
    if (lengths % 4).any() or (lengths < 0).any():
        # Paimon hashes BinaryRows by whole words only; their length is always a multiple of 8.
        raise InvalidInputError("every row must be a whole number of 4-byte words")
    data = np.ascontiguousarray(np.asarray(flat, dtype=np.uint8)[offsets[0]:offsets[-1]])
    words = data.view("<u4")
    # The key mixing (k * c1, rotl 15, * c2) does not depend on the running hash: do it for all
    # words at once, so the per-word loop below only does the sequential part.
    k = words * _C1
    k = _rotl(k, 15)
    k *= _C2
    n_words = lengths // 4
    h = np.full(n, _SEED, dtype=np.uint32)
    if n and (n_words == n_words[0]).all():
        # Equal-length rows: a (rows, words) matrix, one column per step.
        kmat = k.reshape(n, int(n_words[0]))
        for j in range(int(n_words[0])):
            h ^= kmat[:, j]
            h = _rotl(h, 13)
            h *= _M5
            h += _N1
    elif n:
        # Ragged rows: sort longest first, so the rows still hashing at word j are a prefix.
        # (A stable sort of small integers is a radix sort: much faster on int16 than on int64.)
        keys = -n_words.astype(np.int16) if n_words.max() < 2 ** 15 else -n_words
        order = np.argsort(keys, kind="stable")
        starts = (offsets[:-1] - offsets[0])[order] // 4
        active = np.searchsorted(-n_words[order], -np.arange(int(n_words.max())), side="left")
        hs = h[order]
        for j, count in enumerate(active):
            part = hs[:count]
            part ^= k[starts[:count] + j]
            part = _rotl(part, 13)
            part *= _M5
            part += _N1
            hs[:count] = part
        h[order] = hs
    h ^= lengths.astype(np.uint32)
    return _fmix(h).view(np.int32)


def hash_bytes(data: bytes) -> int:
    """Paimon's MurmurHash3 of one BinaryRow (length a multiple of 4), as a signed int32."""
    if len(data) % 4:
        raise InvalidInputError("data must be a whole number of 4-byte words")
    h = _SEED
    for (word,) in struct.iter_unpack("<I", data):
        kw = (word * 0xCC9E2D51) & _MASK32
        kw = ((kw << 15) | (kw >> 17)) & _MASK32
        kw = (kw * 0x1B873593) & _MASK32
        h ^= kw
        h = ((h << 13) | (h >> 19)) & _MASK32
        h = (h * 5 + 0xE6546B64) & _MASK32
    h ^= len(data)
    h ^= h >> 16
    h = (h * 0x85EBCA6B) & _MASK32
    h ^= h >> 13
    h = (h * 0xC2B2AE35) & _MASK32
    h ^= h >> 16
    return h - (1 << 32) if h >= 1 << 31 else h


def bucket_ids(columns: Sequence[pa.Array | pa.ChunkedArray], types: Sequence[AnyType],
               num_buckets: int) -> np.ndarray:
    """Paimon's default bucket of every row: `abs(hash % num_buckets)` with Java's truncating `%`."""
    if num_buckets <= 0:
        raise InvalidInputError(f"num_buckets must be positive, got {num_buckets}")
    hashes = murmur3_rows(*encode_rows(columns, types))
    # np.fmod truncates toward zero like Java's %; int64 avoids abs(INT_MIN) overflow.
    return np.abs(np.fmod(hashes.astype(np.int64), num_buckets)).astype(np.int32)
