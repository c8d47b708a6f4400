"""Dynamic buckets (`bucket = -1`): which bucket a key of a partition lives in, kept in the table's HASH index.

Each (partition, bucket) of a dynamic-bucket table has one HASH index file: the bucket's whole key set as
4-byte big-endian murmur3 hashes of the trimmed primary key, no header (docs/bucket-modes.md). A known key
stays in its bucket; a new key goes to the first bucket (in index-manifest order) with fewer than
`dynamic-bucket.target-row-num` keys, else to the lowest unused bucket while there are fewer than
`dynamic-bucket.max-buckets`, else to an existing bucket chosen by its hash (Paimon chooses at random: any
choice is correct once the index records it). Keys are never removed.

Two writers must never put one key in two buckets, so an assignment is made durable before any file holds
the rows it routes: `CommittingAssigner` reads the partition's index at the latest snapshot, assigns, writes
a new complete index file for every bucket that gained keys and commits them alone (an APPEND that replaces
those buckets' HASH entries). A concurrent assignment to the same bucket makes the commit conflict (the
replaced entry is gone) and the assignment is redone on the newer index; a new bucket two writers both
create conflicts the same way (a bucket cannot have two HASH files). The catalog service runs the same
assigner under the table's commit lock for its writers (`AssignBuckets`), so replicas take turns.

An overwrite replaces the partitions' indexes with the rows it writes: `FreshAssigner` assigns from an empty
index in memory and hands the new index files to the overwrite's own commit.

Cross-partition upsert (a primary key that leaves out partition keys): a key lives in one partition at a time.
Each partition keeps its HASH index as above, and an assignment also reports where else the table's indexes
hold the key's hash (`Assignment.elsewhere`); the writer adds a delete of the key to each of those buckets,
numbered after everything written there before. A hash can be another key's (32-bit hashes collide) or a key
that already moved on: the delete then removes nothing, so it is always safe. Hashes are never taken out of
an index, so a key that moved keeps drawing such no-op deletes into its old bucket until that is compacted.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Protocol

import numpy as np
import pyarrow as pa

from lsmlake.errors import CommitConflictError, CorruptMetadataError, InvalidInputError
from lsmlake.format import options as opts
from lsmlake.format.binary_row_columns import encode_rows
from lsmlake.format.bucket import DYNAMIC_BUCKET, murmur3_rows
from lsmlake.format.index_manifest import HASH_INDEX, IndexEntry, IndexManifestStore
from lsmlake.format.schema import TableSchema
from lsmlake.format.snapshot import SnapshotManager
from lsmlake.table.commit_message import CommitMessage

#: Paimon's bucket ids of dynamic-bucket tables are Java shorts: 0..32767
MAX_DYNAMIC_BUCKETS = 1 << 15


def is_dynamic(schema: TableSchema) -> bool:
    """True for a primary-key table with dynamic buckets."""
    return schema.is_primary_key_table and schema.num_buckets == DYNAMIC_BUCKET


def is_cross_partition(schema: TableSchema) -> bool:
    """True for a dynamic-bucket table whose primary key leaves out partition keys: a key moves between partitions."""
    return is_dynamic(schema) and not set(schema.partition_keys) <= set(schema.primary_keys)


@dataclass(frozen=True)
class Elsewhere:
    """Where other partitions' indexes hold hashes of an assignment: the hash's position, the partition and bucket."""

    positions: np.ndarray  # into the hashes that were assigned
    partitions: list[bytes]  # the distinct partitions named
    partition_ids: np.ndarray  # per position: an index into `partitions`
    buckets: np.ndarray

    @staticmethod
    def none() -> Elsewhere:
        empty = np.zeros(0, np.int32)
        return Elsewhere(empty, [], empty, empty)

    def __len__(self) -> int:
        return len(self.positions)


def elsewhere_of(inverse: np.ndarray, unique_positions: np.ndarray, partitions: Sequence[bytes],
                 buckets: np.ndarray) -> Elsewhere:
    """An `Elsewhere` over the hashes `unique[inverse]` from one answered over the distinct hashes `unique`:
    each (position, partition, bucket) of a distinct hash repeated for every row that has it."""
    if not len(unique_positions):
        return Elsewhere.none()
    parts = sorted(set(partitions))
    pid = {p: i for i, p in enumerate(parts)}
    part_ids = np.array([pid[p] for p in partitions], np.int32)
    rows_by_hash = np.argsort(inverse, kind="stable")
    first = np.searchsorted(inverse[rows_by_hash], unique_positions, "left")
    last = np.searchsorted(inverse[rows_by_hash], unique_positions, "right")
    counts = last - first
    at = np.repeat(first, counts) + (np.arange(counts.sum()) - np.repeat(np.cumsum(counts) - counts, counts))
    return Elsewhere(rows_by_hash[at].astype(np.int32), parts, np.repeat(part_ids, counts),
                     np.repeat(buckets.astype(np.int32), counts))


@dataclass(frozen=True)
class Assignment:
    """The bucket of each hash in the partition asked for, and (cross-partition tables) where else it is."""

    buckets: np.ndarray
    elsewhere: Elsewhere = field(default_factory=Elsewhere.none)


def key_hashes(schema: TableSchema, rows: pa.Table) -> np.ndarray:
    """The HASH index value of every row: murmur3 of its trimmed primary key's BinaryRow, as int32."""
    keys = schema.trimmed_primary_keys
    if not keys:
        raise InvalidInputError(f"a dynamic-bucket table needs a primary key beside its partition keys; "
                                f"{list(schema.primary_keys)} are all partition keys")
    return murmur3_rows(*encode_rows([rows.column(k) for k in keys], schema.types_of(keys), rows.num_rows))


def encode_hashes(hashes: np.ndarray) -> bytes:
    """A HASH index file's bytes: the hashes as sorted 4-byte big-endian ints (pypaimon sorts them too)."""
    return np.sort(np.asarray(hashes, np.int32)).astype(">i4").tobytes()


def decode_hashes(data: bytes, where: str) -> np.ndarray:
    """The hashes of a HASH index file, sorted."""
    if len(data) % 4:
        raise CorruptMetadataError(f"HASH index {where} has {len(data)} bytes, not a multiple of 4")
    return np.sort(np.frombuffer(data, ">i4").astype(np.int32))


@dataclass(frozen=True)
class AssignOptions:
    """The two options that decide where a new key goes."""

    target_rows: int
    max_buckets: int

    @staticmethod
    def of(schema: TableSchema) -> AssignOptions:
        o = schema.table_options
        target, most = o.require(opts.DYNAMIC_BUCKET_TARGET_ROW_NUM), o.require(opts.DYNAMIC_BUCKET_MAX_BUCKETS)
        if target <= 0:
            raise InvalidInputError(f"option 'dynamic-bucket.target-row-num' must be positive, got {target}")
        if most != -1 and not 1 <= most <= MAX_DYNAMIC_BUCKETS:
            raise InvalidInputError(f"option 'dynamic-bucket.max-buckets' must be -1 or 1..{MAX_DYNAMIC_BUCKETS}, "
                                    f"got {most}")
        return AssignOptions(target, MAX_DYNAMIC_BUCKETS if most == -1 else most)


@dataclass
class PartitionIndex:
    """The HASH index of one partition: each bucket's sorted key hashes and its index entry, in manifest order."""

    partition: bytes
    hashes: dict[int, np.ndarray] = field(default_factory=dict)
    entries: dict[int, IndexEntry] = field(default_factory=dict)

    def lookup(self, hashes: np.ndarray) -> np.ndarray:
        """The bucket of each hash, -1 where the partition does not know it."""
        out = np.full(len(hashes), -1, np.int32)
        if not self.hashes or not len(hashes):
            return out
        known, owner = self._sorted
        at = np.minimum(np.searchsorted(known, hashes), len(known) - 1)
        hit = known[at] == hashes
        out[hit] = owner[at[hit]]
        return out

    def arrays(self) -> list[np.ndarray]:
        """The arrays this index holds: each bucket's hashes, and their sorted copy once a lookup built it."""
        return [*self.hashes.values(), *self.__dict__.get("_sorted", ())]

    @cached_property
    def _sorted(self) -> tuple[np.ndarray, np.ndarray]:
        """Every known hash, sorted, and its bucket: built once per index (`HashFiles` keeps the index while its
        files are live), not at every lookup."""
        known = np.concatenate(list(self.hashes.values()))
        owner = np.concatenate([np.full(len(h), b, np.int32) for b, h in self.hashes.items()])
        order = np.argsort(known, kind="stable")
        return known[order], owner[order]

    def assign(self, hashes: np.ndarray, options: AssignOptions) -> tuple[np.ndarray, dict[int, np.ndarray]]:
        """The bucket of each hash, assigning new ones by Paimon's rule; and the new hashes of each bucket."""
        hashes = np.asarray(hashes, np.int32)
        buckets = self.lookup(hashes)
        new_rows = buckets < 0
        if not new_rows.any():
            return buckets, {}
        # the new keys in order of first arrival, each once
        uniq, first = np.unique(hashes[new_rows], return_index=True)
        fresh = uniq[np.argsort(first, kind="stable")]
        plan: list[tuple[int, int]] = []  # (bucket, how many of `fresh` it takes), in assignment order
        left = len(fresh)
        for b, h in self.hashes.items():
            room = options.target_rows - len(h)
            if left and room > 0:
                plan.append((b, min(room, left)))
                left -= plan[-1][1]
        used = set(self.hashes)
        candidate = 0
        while left and len(used) < options.max_buckets:
            while candidate in used:
                candidate += 1
            take = min(options.target_rows, left)
            plan.append((candidate, take))
            used.add(candidate)
            left -= take
        gained: dict[int, list[np.ndarray]] = {}
        at = 0
        for b, take in plan:
            gained.setdefault(b, []).append(fresh[at:at + take])
            at += take
        if left:  # every bucket full and no more allowed: spread the rest over the buckets by hash
            pool = np.array(sorted(used), np.int32)
            rest = fresh[at:]
            chosen = pool[np.abs(rest.astype(np.int64)) % len(pool)]
            for b in np.unique(chosen).tolist():
                gained.setdefault(b, []).append(rest[chosen == b])
        assigned = {b: np.concatenate(parts) for b, parts in gained.items()}
        fresh_bucket = PartitionIndex(self.partition, assigned).lookup(hashes[new_rows])
        buckets[new_rows] = fresh_bucket
        return buckets, assigned

    def changes(self, indexes: IndexManifestStore, gained: dict[int, np.ndarray]) -> list[CommitMessage]:
        """Write a complete index file for each bucket that gained keys; the messages that replace the old ones.

        The written files are named by the messages' `new_index_files` (for `delete_index_files`).
        """
        out = []
        for b, new in sorted(gained.items()):
            old = self.hashes.get(b)
            merged = new if old is None else np.concatenate([old, new])
            name = indexes.write_index_file(encode_hashes(merged))
            entry = IndexEntry(self.partition, b, HASH_INDEX, name, 4 * len(merged), len(merged))
            previous = self.entries.get(b)
            out.append(CommitMessage(self.partition, b, DYNAMIC_BUCKET, new_index_files=[entry],
                                     deleted_index_files=[previous] if previous is not None else []))
        return out

    def apply(self, gained: dict[int, np.ndarray], messages: Sequence[CommitMessage]) -> None:
        """Take the committed (or handed over) assignment into this index."""
        for b, new in gained.items():
            old = self.hashes.get(b)
            self.hashes[b] = np.sort(new if old is None else np.concatenate([old, new]))
        self.__dict__.pop("_sorted", None)  # the hashes changed
        for m in messages:
            for e in m.new_index_files:
                self.entries[m.bucket] = e


def delete_index_files(indexes: IndexManifestStore, messages: Sequence[CommitMessage]) -> None:
    """Delete the index files `messages` add (they were never committed)."""
    for m in messages:
        for e in m.new_index_files:
            indexes.io.delete_quietly(indexes.index_path(e.file_name))


class HashFiles:
    """Reads HASH index files once each: they never change, a newer assignment writes a new file."""

    def __init__(self, indexes: IndexManifestStore) -> None:
        self.indexes = indexes
        self._read: dict[str, np.ndarray] = {}
        # each partition's index (never changed by its users) for the live files it was built from
        self._partitions: dict[bytes, tuple[tuple[str, ...], PartitionIndex]] = {}
        # every partition's hashes, sorted, with their owners, for the live files they were built from
        self._table_index: tuple[tuple[str, ...], list[bytes], np.ndarray, np.ndarray, np.ndarray] | None = None

    def partition(self, all_entries: Sequence[IndexEntry], partition: bytes) -> PartitionIndex:
        """The partition's index from a snapshot's index entries (files no longer live are forgotten)."""
        live = {e.file_name for e in all_entries if e.index_type == HASH_INDEX}
        for name in [n for n in self._read if n not in live]:
            del self._read[name]
        for p in [p for p, (files, _) in self._partitions.items() if not set(files) <= live]:
            del self._partitions[p]
        mine = tuple(e.file_name for e in all_entries if e.index_type == HASH_INDEX and e.partition == partition)
        cached = self._partitions.get(partition)
        if cached is not None and cached[0] == mine:
            return cached[1]
        out = PartitionIndex(partition)
        for e in all_entries:
            if e.index_type != HASH_INDEX or e.partition != partition:
                continue
            if e.bucket in out.entries:
                raise CorruptMetadataError(f"bucket {e.bucket} has two HASH index files: "
                                           f"{out.entries[e.bucket].file_name} and {e.file_name}")
            out.entries[e.bucket] = e
            out.hashes[e.bucket] = self._hashes(e)
        self._partitions[partition] = (mine, out)
        return out


    def elsewhere(self, all_entries: Sequence[IndexEntry], partition: bytes, hashes: np.ndarray) -> Elsewhere:
        """Every (position, partition, bucket) where a partition other than `partition` indexes a hash."""
        files = tuple(sorted(e.file_name for e in all_entries if e.index_type == HASH_INDEX))
        if self._table_index is None or self._table_index[0] != files:
            live = [e for e in all_entries if e.index_type == HASH_INDEX]
            parts = sorted({e.partition for e in live})
            pid = {p: i for i, p in enumerate(parts)}
            arrays = [(self._hashes(e), pid[e.partition], e.bucket) for e in live]
            empty = np.zeros(0, np.int32)
            known = np.concatenate([a for a, _, _ in arrays]) if arrays else empty
            owner_p = np.concatenate([np.full(len(a), i, np.int32) for a, i, _ in arrays]) if arrays else empty
            owner_b = np.concatenate([np.full(len(a), b, np.int32) for a, _, b in arrays]) if arrays else empty
            order = np.argsort(known, kind="stable")
            self._table_index = (files, parts, known[order], owner_p[order], owner_b[order])
        _, parts, known, owner_p, owner_b = self._table_index
        lo, hi = np.searchsorted(known, hashes, "left"), np.searchsorted(known, hashes, "right")
        counts = hi - lo
        positions = np.repeat(np.arange(len(hashes), dtype=np.int32), counts)
        at = np.repeat(lo, counts) + (np.arange(counts.sum()) - np.repeat(np.cumsum(counts) - counts, counts))
        if partition in parts:  # the partition asked for is not "elsewhere"
            other = owner_p[at] != parts.index(partition)
            positions, at = positions[other], at[other]
        used = np.unique(owner_p[at])
        remap = np.full(len(parts), -1, np.int32)
        remap[used] = np.arange(len(used), dtype=np.int32)
        return Elsewhere(positions, [parts[i] for i in used.tolist()], remap[owner_p[at]], owner_b[at])

    def nbytes(self) -> int:
        """Bytes of the hashes held: the files read, the partitions' indexes and sorted copies, the table's
        index; an array shared by several of them counts once."""
        arrays = {id(a): a for a in self._read.values()}
        for _, index in self._partitions.values():
            arrays.update((id(a), a) for a in index.arrays())
        if self._table_index is not None:
            arrays.update((id(a), a) for a in self._table_index[2:])
        return sum(a.nbytes for a in arrays.values())

    def _hashes(self, e: IndexEntry) -> np.ndarray:
        hashes = self._read.get(e.file_name)
        if hashes is None:
            path = e.external_path or self.indexes.index_path(e.file_name)
            hashes = self._read[e.file_name] = decode_hashes(self.indexes.io.read_bytes(path), path)
        return hashes


class BucketAssigner(Protocol):
    """Where the rows of a dynamic-bucket table go: one bucket per key hash of a partition."""

    def assign(self, keys: Sequence[tuple[bytes, np.ndarray]]) -> list[Assignment]:
        """For each (partition, key hashes): the bucket of each hash, durable before this returns unless
        `index_messages` says otherwise; for a cross-partition table also where else the table indexes them."""
        ...

    def index_messages(self) -> list[CommitMessage]:
        """Index changes the writer's own commit must carry (none when assignments commit themselves)."""
        ...


class IndexedTable(Protocol):
    """What an assigner reads of a table (a `FileStore`)."""

    @property
    def identifier(self) -> str: ...
    @property
    def schema(self) -> TableSchema: ...
    @property
    def snapshots(self) -> SnapshotManager: ...
    @property
    def indexes(self) -> IndexManifestStore: ...


class CommittingAssigner:
    """Assigns on the latest index and commits each assignment that adds keys before returning (see the module).

    `commit` publishes index-only messages as one snapshot (raising CommitConflictError when another commit
    changed those buckets' index first); the library commits straight to the table, the catalog service
    through its own commit path.
    """

    def __init__(self, table: IndexedTable, commit: Callable[[list[CommitMessage]], object],
                 max_attempts: int = 20, files: HashFiles | None = None) -> None:
        """`files` is a cache of index files to share between assigners of one table (one is made if not)."""
        self.table = table
        self.options = AssignOptions.of(table.schema)
        self.commit = commit
        self.max_attempts = max_attempts
        self.files = files or HashFiles(table.indexes)

    def assign(self, keys: Sequence[tuple[bytes, np.ndarray]]) -> list[Assignment]:
        """Assign the keys of every partition on one snapshot's index and commit what they add as one snapshot."""
        cross = is_cross_partition(self.table.schema)
        for _ in range(self.max_attempts):
            snapshot = self.table.snapshots.latest()
            entries = self.table.indexes.read(snapshot.index_manifest if snapshot else None)
            answers, messages = [], []
            for partition, hashes in keys:
                index = self.files.partition(entries, partition)
                buckets, gained = index.assign(hashes, self.options)
                if gained:
                    messages += index.changes(self.table.indexes, gained)
                answers.append(Assignment(buckets, self.files.elsewhere(entries, partition, hashes) if cross
                                          else Elsewhere.none()))
            if not messages:
                return answers
            try:
                self.commit(messages)
            except CommitConflictError:
                delete_index_files(self.table.indexes, messages)
                continue  # another writer assigned in these buckets first: assign again on its index
            except BaseException:
                # the outcome may be unknown: an index file that was published must stay (it is harmless
                # unreferenced: orphan-file removal takes it)
                raise
            return answers
        raise CommitConflictError(f"assigning buckets in {self.table.identifier} lost to other writers "
                                  f"{self.max_attempts} times; nothing was written")

    def index_messages(self) -> list[CommitMessage]:
        return []


class FreshAssigner:
    """Assigns from an empty index (an overwrite's), in memory; `index_messages` are the overwrite's new index."""

    def __init__(self, schema: TableSchema, indexes: IndexManifestStore) -> None:
        self.options = AssignOptions.of(schema)
        self.indexes = indexes
        self._partitions: dict[bytes, PartitionIndex] = {}

    def assign(self, keys: Sequence[tuple[bytes, np.ndarray]]) -> list[Assignment]:
        out = []
        for partition, hashes in keys:
            index = self._partitions.setdefault(partition, PartitionIndex(partition))
            buckets, gained = index.assign(hashes, self.options)
            index.apply(gained, [])
            out.append(Assignment(buckets))
        return out

    def index_messages(self) -> list[CommitMessage]:
        out = []
        for p, index in self._partitions.items():
            for b, hashes in sorted(index.hashes.items()):
                name = self.indexes.write_index_file(encode_hashes(hashes))
                out.append(CommitMessage(p, b, DYNAMIC_BUCKET, new_index_files=[
                    IndexEntry(p, b, HASH_INDEX, name, 4 * len(hashes), len(hashes))]))
        self._partitions = {}
        return out
