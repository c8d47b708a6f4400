"""What a commit may do to a table's index files, checked against the index manifest it is applied to.

The index files are the deletion vectors (one file per bucket, holding the vectors of all its data files) and the
dynamic-bucket HASH index (one file per bucket, its whole key set). Every commit path asks the same two questions
here: the library's `FileStoreCommit` (and so the catalog's gRPC `Commit`, `CompleteCompaction` and Spark's batch
writes, which commit through it) and the REST commit, whose client sends the new index manifest whole.

1. **Was the commit planned against the index it replaces?** For every (partition, bucket, index type) the commit
   touches, the live entries now must be exactly the ones it removes. A bucket's vectors live in one file, so a
   commit that deletes data files of a bucket planned against that bucket's vectors too: a compaction that read
   no vectors, committed after a delete that added some, would bring the deleted rows back. Otherwise the commit
   raises `CommitConflictError`: it was not applied, and a retry on the latest snapshot may succeed.
2. **Does it lose nothing?** While a data file is live its vector only grows, and a HASH file only gains keys.
   A change that drops or shrinks the vector of a file that stays live, or a HASH file that is not replaced by a
   larger one (outside the partitions an overwrite replaces), raises `InvalidInputError`: no retry would help.
   The HASH keys themselves are compared (not only their counts) when the commit's index manifest was sent whole.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass

import numpy as np
from pyroaring import BitMap

from lsmlake.errors import CommitConflictError, CorruptMetadataError, InvalidInputError
from lsmlake.format import deletion_vector
from lsmlake.format.index_manifest import DELETION_VECTORS, HASH_INDEX, IndexEntry, IndexManifestStore

#: index types of which a bucket has at most one live file
ONE_PER_BUCKET = (DELETION_VECTORS, HASH_INDEX)

Key = tuple[bytes, int, str]  # (partition, bucket, index type)
FileKey = tuple[bytes, int, str]  # (partition, bucket, data file name)


@dataclass(frozen=True)
class IndexChange:
    """The index entries a commit adds and removes, and what else it was planned against.

    `data_deleted`: the (partition, bucket) of every data file the commit removes for good (a level upgrade that
    re-adds the same file does not count); their deletion vectors were part of its plan.
    `replaced_partitions`: partitions an overwrite replaces whole (their index goes with their files).
    `sent_whole`: the client sent the new index manifest whole (REST): its HASH files are compared by content.
    """

    added: tuple[IndexEntry, ...] = ()
    removed: tuple[IndexEntry, ...] = ()
    data_deleted: frozenset[tuple[bytes, int]] = frozenset()
    replaced_partitions: frozenset[bytes] | None = frozenset()  # None: every partition (a whole-table overwrite)
    sent_whole: bool = False

    def is_empty(self) -> bool:
        return not self.added and not self.removed and not self.data_deleted

    def replaces(self, partition: bytes) -> bool:
        return self.replaced_partitions is None or partition in self.replaced_partitions


def diff(current: Sequence[IndexEntry],
         sent: Sequence[IndexEntry]) -> tuple[tuple[IndexEntry, ...], tuple[IndexEntry, ...]]:
    """(added, removed): what an index manifest sent whole changes in `current` (an entry changed in place is both)."""
    now, new = {_identity(e) for e in current}, {_identity(e) for e in sent}
    return tuple(e for e in sent if _identity(e) not in now), tuple(e for e in current if _identity(e) not in new)


def _identity(e: IndexEntry) -> tuple[object, ...]:
    """Every field of an entry, hashable (a global index's metadata is a dict)."""
    return (e.partition, e.bucket, e.index_type, e.file_name, e.file_size, e.row_count, e.dv_ranges, e.external_path,
            json.dumps(e.global_index, sort_keys=True, default=repr) if e.global_index is not None else None)


def _key(e: IndexEntry) -> Key:
    return (e.partition, e.bucket, e.index_type)


def _where(partition: bytes, bucket: int) -> str:
    return f"bucket {bucket} of partition {partition.hex() if partition else '()'}"


def check_planned_against(current: Sequence[IndexEntry], change: IndexChange) -> None:
    """CommitConflictError when an index entry the commit planned against (see the module) changed since."""
    touched = {_key(e) for e in change.added} | {_key(e) for e in change.removed}
    touched |= {(p, b, DELETION_VECTORS) for p, b in change.data_deleted}
    by_key: dict[Key, set[str]] = {}
    for e in current:
        by_key.setdefault(_key(e), set()).add(e.file_name)
    planned: dict[Key, set[str]] = {}
    for e in change.removed:
        planned.setdefault(_key(e), set()).add(e.file_name)
    for key in sorted(touched):
        partition, bucket, kind = key
        if change.replaces(partition):
            continue
        now, then = by_key.get(key, set()), planned.get(key, set())
        if now != then:
            what = "deletion vectors" if kind == DELETION_VECTORS else f"{kind} index"
            raise CommitConflictError(
                f"the {what} of {_where(partition, bucket)} changed since this commit was planned (another commit "
                f"{'deleted rows or rewrote files' if kind == DELETION_VECTORS else 'changed it'} there: "
                f"{len(now - then)} file(s) new, {len(then - now)} gone); this commit was not applied")


def check_nothing_lost(change: IndexChange, live_after: Collection[FileKey],
                       vectors_of: Callable[[IndexEntry], dict[str, BitMap]],
                       hashes_of: Callable[[IndexEntry], np.ndarray]) -> None:
    """InvalidInputError when the change drops a deletion vector of a file that stays live, shrinks one, or drops
    or shrinks a HASH file (outside replaced partitions)."""
    added = {_key(e): e for e in change.added}
    for old in change.removed:
        key = _key(old)
        new = added.get(key)
        if old.index_type == DELETION_VECTORS:
            _check_vectors_kept(old, new, live_after, vectors_of, change.sent_whole)
        elif old.index_type == HASH_INDEX and not change.replaces(old.partition):
            where = _where(old.partition, old.bucket)
            if new is None or new.row_count < old.row_count:
                raise InvalidInputError(
                    f"index: the HASH index of {where} would lose keys ({old.row_count} -> "
                    f"{0 if new is None else new.row_count}): a key would be assigned a second bucket")
            if change.sent_whole and not np.isin(hashes_of(old), hashes_of(new)).all():
                raise InvalidInputError(f"index: the new HASH index of {where} leaves out keys of the old one: a key "
                                        "would be assigned a second bucket")


def _check_vectors_kept(old: IndexEntry, new: IndexEntry | None, live_after: Collection[FileKey],
                        vectors_of: Callable[[IndexEntry], dict[str, BitMap]], sent_whole: bool) -> None:
    kept = [r for r in old.dv_ranges or () if (old.partition, old.bucket, r.file_name) in live_after]
    if not kept:
        return
    where = _where(old.partition, old.bucket)
    new_ranges = {r.file_name: r for r in new.dv_ranges or ()} if new is not None else {}
    missing = [r.file_name for r in kept if r.file_name not in new_ranges]
    if missing:
        raise InvalidInputError(f"index: the deletion vectors of {where} would drop the vector of live data file "
                                f"{missing[0]}: its deleted rows would come back")
    if not sent_whole and all(_grew(r.cardinality, new_ranges[r.file_name].cardinality) for r in kept):
        return  # our writers derive a vector from the old one, so a count no smaller is the same or a larger one
    assert new is not None
    before, after = vectors_of(old), vectors_of(new)
    for r in kept:
        if not before.get(r.file_name, BitMap()) <= after.get(r.file_name, BitMap()):
            raise InvalidInputError(f"index: the deletion vector of live data file {r.file_name} in {where} would "
                                    "lose positions: its deleted rows would come back")


def _grew(before: int | None, after: int | None) -> bool:
    """Whether cardinalities alone show that a vector kept its positions (unknown ones: read the vectors)."""
    return before is not None and after is not None and after >= before


def entries_after(current: Sequence[IndexEntry], change: IndexChange,
                  live_after: Collection[FileKey]) -> list[IndexEntry]:
    """The index manifest's entries after the change: the current ones less the removed, plus the added.

    CommitConflictError when a removed entry is gone, when a bucket would hold two files of one type, or when a
    vector marks rows of a data file that is not live after the commit.
    """
    names = {e.file_name for e in current}
    gone = [e.file_name for e in change.removed if e.file_name not in names]
    if gone:
        raise CommitConflictError(f"index file(s) {gone} are no longer live: another commit changed the index of "
                                  "this bucket; this commit was not applied")
    drop = {e.file_name for e in change.removed}
    kept = [e for e in current if e.file_name not in drop]
    taken = {_key(e) for e in kept if e.index_type in ONE_PER_BUCKET}
    for e in change.added:
        if e.index_type in ONE_PER_BUCKET:
            if _key(e) in taken:
                raise CommitConflictError(f"{_where(e.partition, e.bucket)} would have two {e.index_type} index "
                                          "files; this commit was not applied")
            taken.add(_key(e))
        for r in e.dv_ranges or ():
            if (e.partition, e.bucket, r.file_name) not in live_after:
                raise CommitConflictError(f"a deletion vector marks rows of {r.file_name}, which is no longer live "
                                          f"in {_where(e.partition, e.bucket)}; this commit was not applied")
    return kept + list(change.added)


def apply_index_change(current: Sequence[IndexEntry], change: IndexChange, live_after: Collection[FileKey],
                       indexes: IndexManifestStore) -> list[IndexEntry]:
    """Check the change against `current` (both questions of the module) and return the entries after it."""
    check_planned_against(current, change)
    after = entries_after(current, change, live_after)
    check_nothing_lost(change, live_after, lambda e: read_vectors(indexes, e), lambda e: read_hashes(indexes, e))
    return after


def _read_index_file(indexes: IndexManifestStore, e: IndexEntry) -> bytes:
    """An index file's bytes from the table's `index/` folder, never more than its entry records (a file of another
    size is refused, never read to its end)."""
    if e.external_path is not None:
        raise InvalidInputError(f"index: index file {e.file_name} has an external path ({e.external_path[:80]}); "
                                "lsmlake checks only index files in the table's index folder")
    path = indexes.index_path(e.file_name)
    size = indexes.io.size(path) if indexes.io.exists(path) else None
    if size != e.file_size:
        raise InvalidInputError(f"index: index file {e.file_name} has {size} bytes, not the {e.file_size} its entry "
                                "records")
    return indexes.io.read_bytes(path)


def read_vectors(indexes: IndexManifestStore, e: IndexEntry) -> dict[str, BitMap]:
    if not e.dv_ranges:
        return {}
    try:
        return deletion_vector.deserialize(_read_index_file(indexes, e), list(e.dv_ranges))
    except (CorruptMetadataError, ValueError, IndexError) as err:
        raise InvalidInputError(f"index: deletion-vector file {e.file_name} does not read as one: {err}") from None


def read_hashes(indexes: IndexManifestStore, e: IndexEntry) -> np.ndarray:
    from_bytes = np.frombuffer(_read_index_file(indexes, e), dtype=">i4") if e.file_size % 4 == 0 else None
    if from_bytes is None:
        raise InvalidInputError(f"index: HASH file {e.file_name} has {e.file_size} bytes, not a multiple of 4")
    return from_bytes.astype(np.int32)
