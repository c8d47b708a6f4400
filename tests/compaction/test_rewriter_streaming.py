"""A rewrite writes its merged sections out in whole target-size files as it goes (bounded memory)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
from lsmlake.catalog import FileSystemCatalog
from lsmlake.compaction.table_compact import compact_table


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
