"""Deletion vectors: roaring bitmaps of deleted row positions, stored in Paimon's DV index files.

File layout (version 1, 32-bit bitmaps, which every Paimon reader accepts):
    byte 0: version 1, then per data file: int32 BE size (= 4 + bitmap bytes), int32 BE magic
    1581511376, the portable RoaringBitmap, int32 BE CRC32 of magic + bitmap.
The index manifest records, per data file, the blob's offset (at its size field), its size and its
cardinality.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Mapping
from dataclasses import dataclass

from pyroaring import BitMap

from lsmlake.errors import CorruptMetadataError

VERSION = 1
MAGIC = 1581511376
MAGIC_64 = 1681511377


@dataclass(frozen=True)
class DvRange:
    """Where one data file's deletion vector lies in an index file."""

    file_name: str
    offset: int
    length: int
    cardinality: int | None


def serialize(vectors: Mapping[str, BitMap]) -> tuple[bytes, list[DvRange]]:
    """One DV index file for the given data files (sorted by name, as pypaimon writes them)."""
    out = bytearray([VERSION])
    ranges = []
    for name in sorted(vectors):
        bm = vectors[name]
        if not len(bm):
            continue
        body = struct.pack(">i", MAGIC) + bm.serialize()
        offset = len(out)
        out += struct.pack(">i", len(body)) + body + struct.pack(">I", zlib.crc32(body) & 0xFFFFFFFF)
        ranges.append(DvRange(name, offset, len(body), len(bm)))
    return bytes(out), ranges


def deserialize(data: bytes, ranges: list[DvRange]) -> dict[str, BitMap]:
    """The deletion vectors of an index file, by data file name."""
    if not data or data[0] != VERSION:
        raise CorruptMetadataError(f"deletion-vector file has version {data[:1]!r}, expected {VERSION}")
    out = {}
    for r in ranges:
        size = struct.unpack_from(">i", data, r.offset)[0]
        body = data[r.offset + 4:r.offset + 4 + size]
        magic = struct.unpack_from(">i", body, 0)[0]
        if magic == MAGIC:
            out[r.file_name] = BitMap.deserialize(body[4:])
        elif struct.unpack_from("<i", body, 0)[0] == MAGIC_64:
            raise CorruptMetadataError("64-bit deletion vectors (deletion-vectors.bitmap64) are not supported")
        else:
            raise CorruptMetadataError(f"deletion vector of {r.file_name} has a bad magic number {magic}")
        crc = struct.unpack_from(">I", data, r.offset + 4 + size)[0]
        if crc != zlib.crc32(body) & 0xFFFFFFFF:
            raise CorruptMetadataError(f"deletion vector of {r.file_name} fails its CRC check")
    return out
