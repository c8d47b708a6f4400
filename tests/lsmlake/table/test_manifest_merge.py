"""Manifest merging at commit time by Paimon's rules: what is rewritten, what is kept, and that nothing is lost."""

from __future__ import annotations

import random
from dataclasses import replace
from typing import Any

import pyarrow as pa
import pytest

from lsmlake.catalog.filesystem import FileSystemCatalog
from lsmlake.format.binary_row import serialize_row
from lsmlake.format.manifest import ADD, DELETE, ManifestEntry, ManifestFileMeta, merge_entries
from lsmlake.format.types import parse_type
from lsmlake.table.file_store_table import FileStoreTable
from lsmlake.table.manifest_merge import MergeRules, merge_manifests
from lsmlake.table.write import CommitMessage

SCHEMA = pa.schema([pa.field("id", pa.int64(), nullable=False), pa.field("p", pa.string(), nullable=False),
                    pa.field("v", pa.int64())])


def _table(tmp_path: Any, **options: str) -> FileStoreTable:
    cat = FileSystemCatalog(str(tmp_path / "wh"))
    cat.create_database("db")
    o = {"bucket": "2", "write-only": "true"}
    o.update(options)
    return cat.create_table("db.t", "id BIGINT NOT NULL, p STRING NOT NULL, v BIGINT", partition_keys=["p"],
                            primary_keys=["id", "p"], options=o)


def _write(t: FileStoreTable, partition: str, ids: list[int]) -> None:
    t.write_arrow(pa.table({"id": ids, "p": [partition] * len(ids), "v": [0] * len(ids)}, schema=SCHEMA))


def _manifests(t: FileStoreTable) -> list[ManifestFileMeta]:
    snap = t.latest_snapshot()
    assert snap is not None
    return t.manifests.snapshot_manifests(snap.base_manifest_list, snap.delta_manifest_list)


def _base(t: FileStoreTable) -> list[ManifestFileMeta]:
    snap = t.latest_snapshot()
    assert snap is not None
    return t.manifests.read_list(snap.base_manifest_list)


def _drop_partition_files(t: FileStoreTable, partition: str) -> None:
    """A COMPACT commit deleting every file of a partition (metadata only: what a merge must apply)."""
    messages = [CommitMessage(s.partition, s.bucket, s.total_buckets, deleted_files=list(s.files))
                for s in t.plan() if s.partition_values == (partition,)]
    assert messages
    t.new_commit().commit(messages)


def test_manifests_of_the_target_size_are_never_rewritten(tmp_path: Any) -> None:
    """Every manifest at least `manifest.target-file-size` without DELETE stays as it is: a commit carries the previous
    ones by name (the whole base was rewritten every `merge-min-count` commits: fails before)."""
    t = _table(tmp_path, **{"manifest.target-file-size": "1b", "manifest.merge-min-count": "3"})
    deltas = []
    for i in range(8):
        _write(t, f"p{i}", [1, 2])
        snap = t.latest_snapshot()
        assert snap is not None
        deltas += [m.file_name for m in t.manifests.read_list(snap.delta_manifest_list)]
    assert [m.file_name for m in _manifests(t)] == deltas


def test_small_manifests_merge_once_there_are_merge_min_count_of_them(tmp_path: Any) -> None:
    t = _table(tmp_path, **{"manifest.merge-min-count": "4"})
    counts = []
    for i in range(10):
        _write(t, f"p{i}", [1, 2])
        counts.append(len(_manifests(t)))
    # the base list of commit n holds the manifests of commit n-1 (merged into one at 4), then its own delta
    assert counts == [1, 2, 3, 4, 2, 3, 4, 2, 3, 4]
    assert {s.partition_values for s in t.plan()} == {(f"p{i}",) for i in range(10)}


def test_a_full_merge_applies_deletes_and_keeps_manifests_no_delete_touches(tmp_path: Any) -> None:
    """Past `manifest.full-compaction-threshold-size` of manifests that must change, the next base holds no DELETE
    entry; a large manifest of other partitions is kept by name (DELETEs stayed in the base: fails before)."""
    t = _table(tmp_path, **{"manifest.target-file-size": "1b", "manifest.full-compaction-threshold-size": "1b"})
    _write(t, "a", [1, 2, 3])
    _write(t, "b", [1, 2, 3])
    kept, touched = (m.file_name for m in _manifests(t))
    _drop_partition_files(t, "b")
    _write(t, "c", [1])
    names = [m.file_name for m in _base(t)]
    assert kept in names and touched not in names
    assert all(m.num_deleted_files == 0 for m in _base(t))
    assert {s.partition_values for s in t.plan()} == {("a",), ("c",)}


def test_below_the_threshold_deletes_stay_until_the_minor_merge(tmp_path: Any) -> None:
    t = _table(tmp_path, **{"manifest.merge-min-count": "100"})
    _write(t, "a", [1, 2, 3])
    _drop_partition_files(t, "a")
    _write(t, "b", [1])
    assert any(m.num_deleted_files for m in _base(t))
    assert {s.partition_values for s in t.plan()} == {("b",)}


def _random_manifests(t: FileStoreTable, rng: random.Random, duplicates: bool = False) -> list[ManifestFileMeta]:
    """Manifests of random ADDs and DELETEs (some deleting files of earlier manifests, some re-adding a file they
    delete, as a level upgrade does), over a few partitions and buckets; with `duplicates`, a manifest adds some
    of its files twice (a resent commit), which a replay keeps once."""
    _write(t, "x", [1])
    template = next(iter(merge_entries(t.manifests.entries(_manifests(t))).values()))
    types = [parse_type("STRING")]
    live: list[ManifestEntry] = []
    metas = []
    n = 0
    for _ in range(rng.randint(1, 14)):
        entries = []
        for _ in range(rng.randint(1, 6)):
            n += 1
            part = serialize_row([f"p{rng.randint(0, 5)}"], types)
            e = ManifestEntry(ADD, part, rng.randint(0, 3), 4, replace(template.file, file_name=f"f{n}"))
            entries.append(e)
            if duplicates and rng.random() < 0.3:
                entries.append(e)
        for victim in rng.sample(live, min(len(live), rng.randint(0, 3))):
            entries.append(victim.as_delete())
            if rng.random() < 0.3:
                entries.append(replace(victim, file=replace(victim.file, level=victim.file.level + 1)))
        live = list(merge_entries(live + entries).values())
        metas.append(t.manifests.write_manifest(entries, 0))
    return metas


@pytest.mark.parametrize("duplicates", [False, True])
@pytest.mark.parametrize("seed", range(40))
def test_a_merge_keeps_the_live_files(tmp_path: Any, seed: int, duplicates: bool) -> None:
    """Whatever the rules, the manifests a merge gives replay to the live files of those it was given."""
    rng = random.Random(seed)
    t = _table(tmp_path)
    metas = _random_manifests(t, rng, duplicates)
    sizes = sorted(m.file_size for m in metas)
    rules = MergeRules(target_size=rng.choice([1, sizes[len(sizes) // 2], 1 << 30]),
                       min_count=rng.choice([1, 2, 3, 30]),
                       full_threshold=rng.choice([1, sum(sizes) // 2, 1 << 30]))
    written: list[str] = []
    merged = merge_manifests(t.manifests, metas, 0, rules, written)
    assert merge_entries(t.manifests.entries(merged)) == merge_entries(t.manifests.entries(metas))
    assert set(written) == {m.file_name for m in merged} - {m.file_name for m in metas}
    for name in written:  # what a merge keeps in the cache of decoded manifests is what reading the file gives
        assert t.manifests.read_manifest(name) == t.manifests.uncached().read_manifest(name)
    if sum(m.file_size for m in metas if m.num_deleted_files or m.file_size < rules.target_size) >= \
            rules.full_threshold:
        assert all(e.kind != DELETE for e in t.manifests.entries(merged))
