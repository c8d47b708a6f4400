"""Several processes committing one-row appends to one table at once: none may lose or overwrite another's commit.

Used on every object store the publication tests run against (S3 on moto, Azure on Azurite).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from lsmlake.catalog.filesystem import FileSystemCatalog

# One committer: n one-row appends, each printed as a JSON line (the snapshot id it got, its commit user).
_COMMITTER = """
import json, sys
import pyarrow as pa
from lsmlake.catalog.filesystem import FileSystemCatalog

warehouse, w, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
t = FileSystemCatalog(warehouse).get_table("db.t")
for i in range(n):
    r = t.write_arrow(pa.table({"k": [w * 100 + i], "w": pa.array([w], pa.int32())}), commit_user=f"writer-{w}")
    print(json.dumps({"w": w, "i": i, "snapshot": r.snapshot_id, "already": r.already_committed}), flush=True)
"""


def assert_processes_lose_no_commit(warehouse: str, tmp_path: Path, processes: int, commits: int) -> None:
    """`processes` committers x `commits` appends to db.t of `warehouse` (created here): every commit lands once,
    under the snapshot id its committer was told, and no snapshot was claimed twice."""
    cat = FileSystemCatalog(warehouse)
    cat.create_database("db")
    cat.create_table("db.t", "k BIGINT NOT NULL, w INT", options={"commit.max-retries": "500"})
    script = tmp_path / "committer.py"
    script.write_text(_COMMITTER)
    procs = [subprocess.Popen([sys.executable, str(script), warehouse, str(w), str(commits)],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for w in range(processes)]
    claimed: dict[int, list[int]] = {}  # snapshot id -> the writers that were told they published it
    for p in procs:
        out, err = p.communicate(timeout=300)
        assert p.returncode == 0, err[-3000:]
        for line in out.splitlines():
            r = json.loads(line)
            claimed.setdefault(r["snapshot"], []).append(r["w"])

    expected = list(range(1, processes * commits + 1))
    t = cat.get_table("db.t")
    keys = sorted(r["k"] for r in t.to_arrow().to_pylist())
    doubly = {sid: ws for sid, ws in claimed.items() if len(ws) > 1}
    assert not doubly, (f"{len(keys)} of {processes * commits} rows in the table; snapshots that more than one "
                        f"commit was told it published (one overwrote another): {doubly}")
    assert sorted(claimed) == expected
    assert t.snapshots.ids() == expected
    for sid in expected:  # what each commit was told is what the snapshot file holds
        assert t.snapshots.snapshot(sid).commit_user == f"writer-{claimed[sid][0]}", sid
    assert keys == sorted(w * 100 + i for w in range(processes) for i in range(commits)), \
        f"{len(keys)} of {processes * commits} rows in the table"
