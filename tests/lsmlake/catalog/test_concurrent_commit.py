"""Two processes commit to one table at once: every commit lands exactly once, snapshots are consecutive."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from lsmlake.catalog.filesystem import FileSystemCatalog

COMMITS = 50
ROWS = 20

_WRITER = textwrap.dedent("""
    import sys
    import pyarrow as pa
    from lsmlake.catalog.filesystem import FileSystemCatalog
    wh, proc, commits, rows = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
    t = FileSystemCatalog(wh).get_table("db.t")
    for i in range(commits):
        base = (proc * commits + i) * rows
        t.write_arrow(pa.table({"k": pa.array(range(base, base + rows), pa.int64()),
                                "writer": pa.array([proc] * rows, pa.int32()),
                                "commit": pa.array([i] * rows, pa.int32())}),
                      commit_user=f"writer-{proc}")
        t = FileSystemCatalog(wh).get_table("db.t")
""")


@pytest.mark.integration
@pytest.mark.parametrize("primary_key", [True, False])
def test_two_processes_commit_concurrently(tmp_path, primary_key) -> None:
    wh = str(tmp_path / "wh")
    cat = FileSystemCatalog(wh)
    cat.create_database("db")
    if primary_key:
        cat.create_table("db.t", "k BIGINT NOT NULL, writer INT, commit INT", primary_keys=["k"],
                         options={"bucket": "2", "commit.max-retries": "1000"})
    else:
        cat.create_table("db.t", "k BIGINT NOT NULL, writer INT, commit INT", options={"commit.max-retries": "1000"})
    procs = [subprocess.Popen([sys.executable, "-c", _WRITER, wh, str(p), str(COMMITS), str(ROWS)],
                              stderr=subprocess.PIPE, text=True) for p in (0, 1)]
    for p in procs:
        _, err = p.communicate(timeout=600)
        assert p.returncode == 0, err
    t = cat.get_table("db.t")
    ids = t.snapshots.ids()
    assert ids == list(range(1, 2 * COMMITS + 1)), "snapshots must be consecutive, none overwritten"
    snaps = t.snapshots.snapshots()
    per_writer = {"writer-0": 0, "writer-1": 0}
    for s in snaps:
        per_writer[s.commit_user] += 1
        assert s.delta_record_count == ROWS
    assert per_writer == {"writer-0": COMMITS, "writer-1": COMMITS}
    switches = sum(1 for a, b in zip(snaps, snaps[1:], strict=False) if a.commit_user != b.commit_user)
    print(f"commit users switched {switches} times in snapshot order")
    rows = t.to_arrow().to_pylist()
    assert len(rows) == 2 * COMMITS * ROWS
    assert sorted(r["k"] for r in rows) == list(range(2 * COMMITS * ROWS))
    # every commit's rows, exactly once
    seen = {(r["writer"], r["commit"]) for r in rows}
    assert seen == {(w, c) for w in (0, 1) for c in range(COMMITS)}
    assert snaps[-1].total_record_count == 2 * COMMITS * ROWS
