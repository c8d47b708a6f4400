"""Merging a table's manifests at commit time, amortised, by Paimon's rules.

A commit's base list is the previous snapshot's base and delta manifests, merged where they have become many
small files. Two steps, as Paimon's manifest merger takes them (options of the same keys and defaults):

- a *full* merge, when the manifests that must change -- those with a DELETE entry or under
  `manifest.target-file-size` -- add up to `manifest.full-compaction-threshold-size`: the deletes are applied and
  only ADD entries are left. A manifest that needs no change (large, no DELETE) is kept as it is when its
  partition statistics cannot hold a deleted file's partition, or when no deleted file is among its entries;
- otherwise a *minor* merge: the manifests are taken in order into groups of about the target size, each
  merged into one; the last, smaller group only once it has `manifest.merge-min-count` manifests.

So a commit rewrites only small manifests (or, rarely, everything that changed since the last full merge,
bounded by the threshold), never the whole table each time. What a merge writes is ordered by partition and
bucket, so that a manifest covers few partitions and a reader of one partition opens few manifests (a stable
order: a DELETE and a later ADD of the same file keep their order).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from lsmlake.format.binary_row import deserialize_row
from lsmlake.format.manifest import ADD, DELETE, ManifestEntry, ManifestFileMeta, ManifestStore
from lsmlake.format.manifest_prune import BucketFilter


@dataclass(frozen=True)
class MergeRules:
    """`manifest.target-file-size`, `manifest.merge-min-count`, `manifest.full-compaction-threshold-size`."""

    target_size: int = 8 << 20
    min_count: int = 30
    full_threshold: int = 16 << 20


def merge_manifests(store: ManifestStore, metas: Sequence[ManifestFileMeta], schema_id: int, rules: MergeRules,
                    written: list[str]) -> list[ManifestFileMeta]:
    """The manifests of a new base list holding what `metas` (in order) hold; new manifests' names go to
    `written`."""
    full = _full_merge(store, metas, schema_id, rules, written)
    if full is not None:
        return full
    return _minor_merge(store, metas, schema_id, rules, written)


def _must_change(m: ManifestFileMeta, rules: MergeRules) -> bool:
    return m.num_deleted_files > 0 or m.file_size < rules.target_size


def _full_merge(store: ManifestStore, metas: Sequence[ManifestFileMeta], schema_id: int, rules: MergeRules,
                written: list[str]) -> list[ManifestFileMeta] | None:
    if sum(m.file_size for m in metas if _must_change(m, rules)) < rules.full_threshold:
        return None
    changing = [m for m in metas if _must_change(m, rules)]
    # what the changing manifests delete, after their own ADDs cancelled what they could
    merged = _replay(store.entries(changing))
    deleted = {e.identifier for e in merged if e.kind == DELETE}
    deleted_buckets = BucketFilter({(e.partition, e.bucket) for e in merged if e.kind == DELETE},
                                   store.partition_types)
    kept: list[ManifestFileMeta] = []
    rewritten: list[ManifestEntry] = []
    for m in metas:
        if _must_change(m, rules):
            continue
        if deleted and deleted_buckets.may_hold(m.partition_stats, m.min_bucket, m.max_bucket,
                                                m.num_added_files):
            entries = store.read_manifest(m.file_name)
            if any(e.identifier in deleted for e in entries):
                rewritten.extend(e for e in entries if e.identifier not in deleted)
                continue
        kept.append(m)
    # a DELETE that found no ADD anywhere deletes nothing: a full merge leaves only ADD entries
    rewritten.extend(e for e in merged if e.kind == ADD)
    return kept + _write_rolling(store, rewritten, schema_id, _entries_per_file(metas, rules), written)


def _minor_merge(store: ManifestStore, metas: Sequence[ManifestFileMeta], schema_id: int, rules: MergeRules,
                 written: list[str]) -> list[ManifestFileMeta]:
    per_file = _entries_per_file(metas, rules)
    result: list[ManifestFileMeta] = []
    group: list[ManifestFileMeta] = []
    size = 0
    for m in metas:
        group.append(m)
        size += m.file_size
        if size >= rules.target_size:
            result.extend(_merge_group(store, group, schema_id, per_file, written))
            group, size = [], 0
    if len(group) >= rules.min_count:
        result.extend(_merge_group(store, group, schema_id, per_file, written))
    else:
        result.extend(group)
    return result


def _merge_group(store: ManifestStore, group: list[ManifestFileMeta], schema_id: int, per_file: int,
                 written: list[str]) -> list[ManifestFileMeta]:
    if len(group) == 1:
        return list(group)  # nothing to merge it with
    return _write_rolling(store, _replay(store.entries(group)), schema_id, per_file, written)


def _replay(entries: Sequence[ManifestEntry]) -> list[ManifestEntry]:
    """The entries, in order, less each ADD that a later DELETE of the group cancels (with that DELETE); a DELETE
    of a file added before the group stays, ahead of any later ADD of the same file. A file added twice in the
    group (a resent commit) replays as one file: a DELETE cancels every ADD before it, and stays, as the file may
    have been added before the group as well."""
    out: list[ManifestEntry | None] = []
    added_at: dict[tuple[Any, ...], list[int]] = {}
    for e in entries:
        ident = e.identifier
        if e.kind == ADD:
            added_at.setdefault(ident, []).append(len(out))
            out.append(e)
        else:
            at = added_at.pop(ident, [])
            for i in at:
                out[i] = None
            if len(at) != 1:
                out.append(e)
    return [e for e in out if e is not None]


def _entries_per_file(metas: Sequence[ManifestFileMeta], rules: MergeRules) -> int:
    """How many entries make a manifest of about the target size, from the sizes of these manifests."""
    entries = sum(m.num_added_files + m.num_deleted_files for m in metas)
    size = sum(m.file_size for m in metas)
    per_entry = size / entries if entries else 256.0
    return max(1, int(rules.target_size / max(per_entry, 1.0)))


def _write_rolling(store: ManifestStore, entries: list[ManifestEntry], schema_id: int, per_file: int,
                   written: list[str]) -> list[ManifestFileMeta]:
    """Write the entries, ordered by partition and bucket (stable), in manifests of at most `per_file` entries."""
    types = store.partition_types
    order: dict[bytes, tuple[Any, ...]] = {}
    for e in entries:
        if e.partition not in order:
            try:
                values = deserialize_row(e.partition, types)
            except Exception:
                values = []
            # nulls first; each value beside a flag so that values of one field always compare with each other
            order[e.partition] = tuple((v is not None, v if v is not None else 0) for v in values)

    def key(e: ManifestEntry) -> tuple[Any, ...]:
        return order[e.partition], e.partition, e.bucket

    try:
        ordered = sorted(entries, key=key)
    except TypeError:  # values that do not compare: keep the order they came in
        ordered = list(entries)
    metas = []
    for i in range(0, len(ordered), per_file):
        meta = store.write_manifest(ordered[i:i + per_file], schema_id, decoded=True)
        written.append(meta.file_name)
        metas.append(meta)
    return metas
