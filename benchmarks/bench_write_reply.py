"""How long a one-row `Client.write(..., commit_now=True)` waits for its reply, against the commit it waits for.

A catalog_svc and a writer_svc at the default `--commit-interval 1.0`, no other load; 40 one-row writes one
after another, each asking for a commit now. The anchor is the writer's own commit time of the same writes,
measured in the same run (its Prometheus histogram `lsmlake_writer_commit_seconds`: the catalog round trip
of each group commit). Target: the reply comes within the commit time + 50 ms, not when the interval ends.
"""

from __future__ import annotations

import json
import re
import shutil
import statistics
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import pyarrow as pa

sys.path.insert(0, str(Path(__file__).parent))
import common  # noqa: E402

WRITES = 40
INTERVAL_S = 1.0


def _metric(text: str, name: str) -> float:
    return sum(float(v) for v in re.findall(rf"^{name}{{[^}}]*}} (\S+)$", text, re.M))


def main() -> None:
    from lsmlake.catalog.filesystem import FileSystemCatalog
    from lsmlake.client.client import Client
    from lsmlake.kafka.broker import free_port

    root = tempfile.mkdtemp(prefix="bench-reply-")
    procs = []
    try:
        wh = f"{root}/wh"
        cat = FileSystemCatalog(wh)
        cat.create_database("db", True)
        cat.create_table("db.t", "id BIGINT NOT NULL, v STRING", primary_keys=["id"],
                         options={"bucket": "1", "num-sorted-run.stop-trigger": "1000"})  # no compactor runs
        catalog, cport = common.start_service("catalog_svc", ["--warehouse", wh], Path(root) / "catalog.log")
        procs.append(catalog)
        mport = free_port()
        writer, wport = common.start_service("writer_svc", ["--warehouse", wh, "--catalog", f"127.0.0.1:{cport}",
                                                            "--commit-interval", str(INTERVAL_S),
                                                            "--metrics-port", str(mport)],
                                             Path(root) / "writer.log")
        procs.append(writer)
        replies = []
        with Client(f"127.0.0.1:{cport}", writer=f"127.0.0.1:{wport}") as lake:
            lake.write("db.t", pa.table({"id": [-1], "v": ["warm-up"]}), commit_now=True)
            before = urllib.request.urlopen(f"http://127.0.0.1:{mport}/metrics", timeout=10).read().decode()
            for i in range(WRITES):
                t = time.perf_counter()
                lake.write("db.t", pa.table({"id": [i], "v": [f"v{i}"]}), commit_now=True)
                replies.append(time.perf_counter() - t)
        after = urllib.request.urlopen(f"http://127.0.0.1:{mport}/metrics", timeout=10).read().decode()
        commits = _metric(after, "lsmlake_writer_commit_seconds_count") - \
            _metric(before, "lsmlake_writer_commit_seconds_count")
        commit_s = (_metric(after, "lsmlake_writer_commit_seconds_sum")
                    - _metric(before, "lsmlake_writer_commit_seconds_sum")) / commits
        rows = cat.get_table("db.t").to_arrow().num_rows
        if rows != WRITES + 1 or commits != WRITES:
            raise SystemExit(f"{rows} rows and {commits} commits for {WRITES + 1} one-row writes")
        reply = statistics.median(replies)
        print(f"one-row write with commit_now, reply p50  {reply * 1e3:7.1f} ms  (max {max(replies) * 1e3:.1f} ms)")
        print(f"the writer's commit of it, mean           {commit_s * 1e3:7.1f} ms  "
              f"(commit interval {INTERVAL_S:g} s; {commits:.0f} commits)")
        print(f"reply - commit: {(reply - commit_s) * 1e3:.1f} ms (target <= 50 ms)")
        print(json.dumps({"bench": "write_reply_commit_now", "value": round(reply * 1e3, 1), "unit": "ms",
                          "anchor": "the writer's commit time of the same writes (mean)",
                          "anchor_value": round(commit_s * 1e3, 1), "ratio": round(reply / commit_s, 2),
                          "target": "reply <= commit + 50 ms"}))
    finally:
        common.stop_services(procs)
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
