"""rbm32 and rbm64: the union of serialized roaring bitmaps, and the byte formats Paimon stores them in.

rbm64 byte format. Paimon's `RoaringBitmap64` wraps RoaringBitmap-Java's `Roaring64Bitmap` and
serializes it with `Roaring64Bitmap.serialize(DataOutput)` after `runOptimize()`: the library's own
ART layout, not the portable 64-bit format of the Roaring spec that pyroaring's `BitMap64.serialize`
writes (pypaimon leaves rbm64 out for that reason). Read from RoaringBitmap-Java's `HighLowContainer`,
`Art`, `Node4/16/48/256`, `LeafNode` and `art.Containers`, all little-endian:
  tag u8 (0 = empty, nothing follows; 1 = not empty), key count i64, then the ART nodes in pre-order
  (each: type u8 [0 Node4, 1 Node16, 2 Node48, 3 Node256, 4 leaf], child count i16, prefix length
  u8, prefix bytes; Node4/Node16 bodies hold the child key bytes in 4/16 bytes, each 8-byte (4 for
  Node4) word byte-reversed; Node48 a 256-byte key -> child slot table (0xFF empty), byte-reversed per
  8 bytes; Node256 a 256-bit little-endian mask; a leaf the 6-byte big-endian high 48 bits of its
  values and an i64 container index), then the containers: number of container arrays i32, and per
  array a trim mark u8 (0xFE), its length i32 and per slot 0 (empty) or 1, container type u8
  (0 run, 1 bitmap, 2 array), cardinality i32 and the body (run: count u16 and (start, length-1) u16
  pairs; bitmap: 1024 u64 words; array: sorted u16 values); then the container count i64 and the
  last first/second-level indices i32, i32. `rbm64_serialize` writes what Java writes for a bitmap
  built by adding its values in ascending order (the path-compressed trie, containers in key order,
  the array grown as `Containers.grow` grows it, a container's kind picked as `runOptimize` picks
  it; checked against the Java source, not against a JVM); `rbm64_deserialize` reads any tree Java
  writes. A union computed by Java keeps its accumulator's container order and kinds, so its bytes
  can differ from ours for the same set; either side reads the other's. rbm32 uses the portable
  RoaringBitmap format (`RoaringBitmap.serialize`, identical to pyroaring's `BitMap.serialize`).
"""

from __future__ import annotations

import struct
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa

from lsmlake.errors import InvalidInputError
from lsmlake.mergetree.merge.aggregators.groups import AggContext, first_of_run, scatter

if TYPE_CHECKING:
    from pyroaring import BitMap, BitMap64

def agg_rbm(ctx: AggContext, bits: int) -> pa.Array:
    c = ctx.compact(ctx.use & ctx.valid)
    if len(c.idx) == 0:
        return pa.nulls(ctx.G, ctx.type)
    single = c.counts == 1
    multi = c.counts > 1
    parts = []
    if single.any():  # agg(null, b) returns b itself
        parts.append((np.flatnonzero(single), ctx.take(c.idx[c.starts[single]])))
    if multi.any():
        rows = multi[c.g]
        blobs = ctx.take(c.idx[rows]).to_pylist()
        g = c.g[rows]
        bounds = np.append(np.flatnonzero(first_of_run(g)), len(g))
        out = []
        for b in range(len(bounds) - 1):  # one pyroaring union per key (see the package docstring)
            group = blobs[int(bounds[b]):int(bounds[b + 1])]
            try:
                if bits == 32:
                    out.append(rbm32_serialize(_union32([rbm32_deserialize(x) for x in group])))
                else:
                    out.append(rbm64_serialize(_union64([rbm64_deserialize(x) for x in group])))
            except (ValueError, InvalidInputError) as e:
                raise ctx.error(f"a value is not a serialized {bits}-bit roaring bitmap: {e}") from e
        parts.append((np.flatnonzero(multi), pa.array(out, type=ctx.type)))
    return scatter(ctx.G, ctx.type, parts)


def _union32(bms: list[BitMap]) -> BitMap:
    from pyroaring import BitMap

    return BitMap.union(*bms) if len(bms) > 1 else BitMap(bms[0])


def _union64(bms: list[BitMap64]) -> BitMap64:
    from pyroaring import BitMap64

    return BitMap64.union(*bms) if len(bms) > 1 else BitMap64(bms[0])


def rbm32_serialize(bitmap: BitMap) -> bytes:
    """Paimon's `RoaringBitmap32.serialize`: run-optimise, then the portable RoaringBitmap format."""
    from pyroaring import BitMap

    bm = BitMap(bitmap)
    bm.run_optimize()
    return bytes(bm.serialize())


def rbm32_deserialize(data: bytes) -> BitMap:
    from pyroaring import BitMap

    try:
        return BitMap.deserialize(bytes(data))
    except Exception as e:  # pyroaring raises ValueError/OverflowError on bad bytes
        raise InvalidInputError(f"not a serialized 32-bit roaring bitmap: {e}") from e


class _Reader:
    def __init__(self, data: bytes) -> None:
        self.data = memoryview(bytes(data))
        self.pos = 0

    def take(self, n: int) -> memoryview:
        if n < 0 or self.pos + n > len(self.data):
            raise InvalidInputError("truncated 64-bit roaring bitmap")
        out = self.data[self.pos:self.pos + n]
        self.pos += n
        return out

    def unpack(self, fmt: str) -> Any:
        return struct.unpack(fmt, self.take(struct.calcsize(fmt)))[0]


_NODE4, _NODE16, _NODE48, _NODE256, _LEAF = range(5)
_NODE_BODY = {_NODE4: 4, _NODE16: 16, _NODE48: 256, _NODE256: 32}


def _read_node(r: _Reader, leaves: list[tuple[int, int]], depth: int) -> None:
    ntype = r.unpack("<B")
    count = r.unpack("<h")
    prefix_len = r.unpack("<b")
    if prefix_len > 0:
        r.take(prefix_len)
    if ntype == _LEAF:
        key = int.from_bytes(r.take(6), "big")
        leaves.append((key, r.unpack("<q")))
        return
    if ntype not in _NODE_BODY or not 0 < count <= 256 or depth > 6:
        raise InvalidInputError(f"bad ART node (type {ntype}, {count} children) in a 64-bit roaring bitmap")
    r.take(_NODE_BODY[ntype])  # the child keys: the leaves carry their whole keys
    for _ in range(count):
        _read_node(r, leaves, depth + 1)


def _read_container(r: _Reader, ctype: int, card: int) -> np.ndarray:
    if ctype == 0:  # run: count, then (start, length - 1) pairs
        nruns = r.unpack("<H")
        pairs = np.frombuffer(r.take(4 * nruns), dtype="<u2").astype(np.int64)
        starts, lens = pairs[0::2], pairs[1::2] + 1
        total = int(lens.sum())
        within = np.arange(total) - np.repeat(np.cumsum(lens) - lens, lens)
        return (np.repeat(starts, lens) + within).astype(np.uint64)
    if ctype == 1:  # bitmap: 1024 little-endian words
        bitsarr = np.unpackbits(np.frombuffer(r.take(8192), dtype=np.uint8), bitorder="little")
        return np.flatnonzero(bitsarr).astype(np.uint64)
    if ctype == 2:  # array: sorted values
        if card < 0:
            raise InvalidInputError("bad container cardinality in a 64-bit roaring bitmap")
        return np.frombuffer(r.take(2 * card), dtype="<u2").astype(np.uint64)
    raise InvalidInputError(f"bad container type {ctype} in a 64-bit roaring bitmap")


def rbm64_deserialize(data: bytes) -> BitMap64:
    """Read Java's `Roaring64Bitmap.serialize` bytes (the format Paimon's rbm64 stores)."""
    from pyroaring import BitMap64

    r = _Reader(data)
    tag = r.unpack("<B")
    if tag == 0:
        return BitMap64()
    if tag != 1:
        raise InvalidInputError(f"bad 64-bit roaring bitmap tag {tag}")
    key_count = r.unpack("<q")
    leaves: list[tuple[int, int]] = []
    _read_node(r, leaves, 0)
    if len(leaves) != key_count:
        raise InvalidInputError(f"64-bit roaring bitmap: {len(leaves)} leaves but {key_count} keys")
    containers: dict[int, np.ndarray] = {}
    for first in range(r.unpack("<i")):
        r.take(1)  # trim mark
        for second in range(r.unpack("<i")):
            mark = r.unpack("<B")
            if mark == 0:
                continue
            if mark != 1:
                raise InvalidInputError(f"bad container mark {mark} in a 64-bit roaring bitmap")
            ctype = r.unpack("<B")
            card = r.unpack("<i")
            containers[(first << 32) | second] = _read_container(r, ctype, card)
    r.unpack("<q")
    r.unpack("<i")
    r.unpack("<i")
    parts = []
    for key, idx in leaves:
        if idx not in containers:
            raise InvalidInputError(f"64-bit roaring bitmap: leaf points to missing container {idx}")
        parts.append((np.uint64(key) << np.uint64(16)) | containers[idx])
    if not parts:
        return BitMap64()
    return BitMap64(np.concatenate(parts))


def _java_capacity(n: int) -> int:
    """Length of Java's `Containers` array after n additions (`Containers.grow`)."""
    cap = 1
    for k in range(2, n + 1):
        if k > cap:
            cap = max(cap + (cap >> 1), k)
    return cap


def _write_container(lows: np.ndarray) -> bytes:
    card = len(lows)
    breaks = np.flatnonzero(np.diff(lows.astype(np.int64)) != 1)
    nruns = len(breaks) + 1
    other = 2 * card if card <= 4096 else 8192
    if 2 + 4 * nruns < other:  # runOptimize: a run container only when strictly smaller
        starts = lows[np.r_[0, breaks + 1]]
        ends = lows[np.r_[breaks, card - 1]]
        pairs = np.empty(2 * nruns, dtype="<u2")
        pairs[0::2] = starts
        pairs[1::2] = ends - starts
        return struct.pack("<Bi", 0, card) + struct.pack("<H", nruns) + pairs.tobytes()
    if card <= 4096:
        return struct.pack("<Bi", 2, card) + lows.astype("<u2").tobytes()
    bitsarr = np.zeros(65536, dtype=bool)
    bitsarr[lows] = True
    return struct.pack("<Bi", 1, card) + np.packbits(bitsarr, bitorder="little").tobytes()


def _write_art(out: bytearray, keys: list[bytes], lo: int, hi: int, depth: int) -> None:
    if hi - lo == 1:
        out += bytes([_LEAF, 0, 0, 0]) + keys[lo] + struct.pack("<q", lo)
        return
    first, last = keys[lo], keys[hi - 1]
    p = 0
    while first[depth + p] == last[depth + p]:
        p += 1
    split = depth + p
    child_bytes: list[int] = []
    ranges: list[tuple[int, int]] = []
    i = lo
    while i < hi:
        b = keys[i][split]
        j = i + 1
        while j < hi and keys[j][split] == b:
            j += 1
        child_bytes.append(b)
        ranges.append((i, j))
        i = j
    count = len(child_bytes)
    ntype = _NODE4 if count <= 4 else _NODE16 if count <= 16 else _NODE48 if count <= 48 else _NODE256
    out += struct.pack("<BhB", ntype, count, p) + first[depth:split]
    if ntype in (_NODE4, _NODE16):
        width = 4 if ntype == _NODE4 else 16
        slots = child_bytes + [0] * (width - count)
        for w in range(0, width, min(width, 8)):
            out += bytes(reversed(slots[w:w + min(width, 8)]))
    elif ntype == _NODE48:
        table = [0xFF] * 256
        for rank, b in enumerate(child_bytes):
            table[b] = rank
        for w in range(0, 256, 8):
            out += bytes(reversed(table[w:w + 8]))
    else:
        mask = np.zeros(256, dtype=bool)
        mask[child_bytes] = True
        out += np.packbits(mask, bitorder="little").tobytes()
    for a, b in ranges:
        _write_art(out, keys, a, b, split + 1)


def rbm64_serialize(bitmap: BitMap64) -> bytes:
    """Write a bitmap as Java's `Roaring64Bitmap.serialize` does after `runOptimize()`."""
    vals = np.frombuffer(bitmap.to_array(), dtype=np.uint64)
    if len(vals) == 0:
        return b"\x00"
    highs = vals >> np.uint64(16)
    lows = (vals & np.uint64(0xFFFF)).astype(np.uint16)
    uniq, first = np.unique(highs, return_index=True)
    bounds = np.append(first, len(vals))
    keys = [int(h).to_bytes(6, "big") for h in uniq]
    n = len(keys)
    out = bytearray(struct.pack("<Bq", 1, n))
    _write_art(out, keys, 0, n, 0)
    cap = _java_capacity(n)
    out += struct.pack("<iBi", 1, 0xFE, cap)
    for i in range(n):
        out += b"\x01" + _write_container(lows[bounds[i]:bounds[i + 1]])
    out += b"\x00" * (cap - n)
    out += struct.pack("<qii", n, 0, n - 1)
    return bytes(out)
