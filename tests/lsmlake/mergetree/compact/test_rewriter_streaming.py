"""A rewrite writes its merged sections out in whole target-size files as it goes (bounded memory)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lsmlake.catalog.filesystem import FileSystemCatalog
from lsmlake.table.compact import compact_table


def test_full_compaction_streams_sections_into_target_size_files(tmp_path: Path) -> None:
    cat = FileSystemCatalog(str(tmp_path))
    cat.create_database("db")
    t = cat.create_table("db.t", "id BIGINT NOT NULL, s STRING", primary_keys=["id"],
                         options={"bucket": "1", "target-file-size": "64 kb", "write-only": "true"})
    rng = np.random.default_rng(1)
    model: dict[int, str] = {}
    for b in range(6):  # disjoint key ranges, then overlapping updates: several sections
        ids = np.arange(b * 20_000, b * 20_000 + 20_000) if b < 4 else rng.integers(0, 20_000, 20_000)
        s = [f"b{b}-{i:08d}" for i in ids]
        t.write_arrow(pa.table({"id": pa.array(ids, pa.int64()), "s": s}))
        model.update(zip(ids.tolist(), s, strict=True))
    result = compact_table(t, full=True)
    assert result.snapshot_id is not None
    files = [f for sp in t.new_scan(None, None, all_levels=True).plan() for f in sp.files]
    assert len(files) > 4 and {f.level for f in files} == {5}
    sizes = sorted(f.file_size for f in files)
    assert sizes[-1] < 4 * 64 * 1024  # no file grew with the whole bucket
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    ranges = []
    for f in files:
        ids = pq.read_table(f"{t.path}/bucket-0/{f.file_name}", columns=["id"])["id"]
        ranges.append((pc.min(ids).as_py(), pc.max(ids).as_py()))
    ranges.sort()
    assert all(a[1] < b[0] for a, b in zip(ranges, ranges[1:], strict=False))  # one sorted run
    got = t.to_arrow()
    assert dict(zip(got["id"].to_pylist(), got["s"].to_pylist(), strict=True)) == model


def _key_table(tmp_path: Path, name: str, engine: dict[str, str], target: str = "1 kb"):  # type: ignore[no-untyped-def]
    cat = FileSystemCatalog(str(tmp_path))
    cat.create_database("db", True)
    return cat.create_table(f"db.{name}", "g STRING NOT NULL, id BIGINT NOT NULL, n BIGINT", primary_keys=["g", "id"],
                            options={"bucket": "1", "target-file-size": target, "write-only": "true", **engine})


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(writes=st.lists(st.lists(st.tuples(st.sampled_from(["", "a", "b", "é", "zz"]), st.integers(-300, 300),
                                          st.integers(0, 9), st.booleans()), min_size=1, max_size=400),
                       min_size=2, max_size=6),
       compact_after=st.integers(0, 5), engine=st.sampled_from(["deduplicate", "aggregation", "changelog"]))
def test_chunked_merge_of_multi_file_runs_equals_the_model(tmp_path_factory, writes, compact_after,  # type: ignore[no-untyped-def]
                                                          engine) -> None:
    """Runs of many small files (1 kb target) under newer overlapping level-0 files, merged by the chunked
    section reader: the table equals a plain-Python model (deduplicate with deletes, or a sum); with
    changelog-producer full-compaction, the last compaction's changelog is the change between the two
    compacted states of the model."""
    import uuid

    from lsmlake.table.changelog import read_changelog

    aggregate = engine == "aggregation"
    options = {"aggregation": {"merge-engine": "aggregation", "fields.n.aggregate-function": "sum"},
               "changelog": {"changelog-producer": "full-compaction"}}.get(engine, {})
    t = _key_table(tmp_path_factory.mktemp("w"), f"t{uuid.uuid4().hex[:8]}", options)
    model: dict[tuple[str, int], int] = {}
    compacted: dict[tuple[str, int], int] = {}
    for i, batch in enumerate(writes):
        last: dict[tuple[str, int], tuple[int, bool]] = {}
        for g, k, n, delete in batch:
            last[(g, k)] = (n, delete and not aggregate)
        keys = sorted(last)
        kinds = ["-D" if last[key][1] else "+I" for key in keys]
        t.write_arrow(pa.table({"g": [key[0] for key in keys], "id": pa.array([key[1] for key in keys], pa.int64()),
                                "n": pa.array([last[key][0] for key in keys], pa.int64()), "_row_kind": kinds}))
        for key in keys:
            n, deleted = last[key]
            if deleted:
                model.pop(key, None)
            elif aggregate:
                model[key] = model.get(key, 0) + n
            else:
                model[key] = n
        if i == compact_after:
            compact_table(t, full=True)  # a top-level run of many small files under what follows
            compacted = dict(model)
    before = t.latest_snapshot().id
    compact_table(t, full=True)
    got = {(r["g"], r["id"]): r["n"] for r in t.to_arrow().to_pylist()}
    assert got == model
    if engine == "changelog":
        changes = read_changelog(t, before + 1).to_pylist()
        want = sorted([("-D", k, v) for k, v in compacted.items() if k not in model]
                      + [("+I", k, v) for k, v in model.items() if k not in compacted]
                      + [x for k, v in model.items() if k in compacted and compacted[k] != v
                         for x in (("-U", k, compacted[k]), ("+U", k, v))])
        assert sorted((c["row_kind"], (c["g"], c["id"]), c["n"]) for c in changes) == want


def test_a_section_is_read_in_key_chunks_of_about_a_file(tmp_path: Path) -> None:
    from lsmlake.mergetree.compact.rewriter import MergeTreeCompactRewriter
    from lsmlake.mergetree.file_keys import FileKeys
    from lsmlake.mergetree.interval_partition import interval_partition

    t = _key_table(tmp_path, "c", {}, "16 kb")
    t.write_arrow(pa.table({"g": ["x"] * 20_000, "id": pa.array(range(20_000), pa.int64()),
                            "n": pa.array(range(20_000), pa.int64())}))
    compact_table(t, full=True)
    t.write_arrow(pa.table({"g": ["x"] * 200, "id": pa.array(range(0, 20_000, 100), pa.int64()),
                            "n": pa.array([-1] * 200, pa.int64())}))
    (split,) = t.new_scan(None, None, all_levels=True).plan()
    keys = FileKeys(t.schema.types_of(t.schema.trimmed_primary_keys))
    (section,) = interval_partition(list(split.files), keys)
    top = max(section, key=lambda r: len(r.files))
    assert len(top.files) > 4  # the top run is many small files
    rewriter = MergeTreeCompactRewriter(t.io, t.schema, f"{t.path}/bucket-0")
    chunks = list(rewriter.section_chunks(section))
    assert len(chunks) >= len(top.files)
    assert max(c.num_rows for c in chunks) < 20_200 // 2
    assert sum(c.num_rows for c in chunks) == 20_200
    ids = [c.column("id").to_pylist() for c in chunks]
    assert all(max(a) < min(b) for a, b in zip(ids, ids[1:], strict=False))  # ascending, disjoint


def test_chunk_cuts_compare_keys_as_arrow_does(tmp_path: Path) -> None:
    """Nanosecond timestamp keys that differ below a microsecond: chunks cut between them, never through
    one key (as Python datetimes, which `as_py` gives without pandas, they would tie)."""
    cat = FileSystemCatalog(str(tmp_path))
    cat.create_database("db")
    t = cat.create_table("db.ns", "ts TIMESTAMP(9) NOT NULL, n BIGINT", primary_keys=["ts"],
                         options={"bucket": "1", "target-file-size": "1 kb", "write-only": "true"})
    base = 1_700_000_000_000_000_000
    ts = pa.array(np.arange(base, base + 6_000, dtype=np.int64)).cast(pa.timestamp("ns"))
    t.write_arrow(pa.table({"ts": ts, "n": pa.array(np.zeros(6_000, np.int64))}))
    compact_table(t, full=True)
    (split,) = t.plan()
    assert len(split.files) > 4
    upd = np.arange(base + 3, base + 6_000, 7, dtype=np.int64)
    t.write_arrow(pa.table({"ts": pa.array(upd).cast(pa.timestamp("ns")), "n": pa.array(np.ones(len(upd), np.int64))}))
    compact_table(t, full=True)
    got = t.to_arrow()
    assert got.num_rows == 6_000
    values = dict(zip(got.column("ts").cast(pa.int64()).to_pylist(), got.column("n").to_pylist(), strict=True))
    assert values == {base + i: int((i - 3) % 7 == 0 and i >= 3) for i in range(6_000)}
