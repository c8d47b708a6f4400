"""A short run of `scripts/soak.py`: the whole cluster under 8 gRPC writers and Kafka ingestion.

Asserts what must hold however slow the machine is: every acknowledged gRPC row is applied exactly once
(per id, the count of acknowledged writes; no refused write applied), every Kafka message acknowledged
by the broker is counted exactly once, no bucket ever has more sorted runs than
`num-sorted-run.stop-trigger` + 1, and no service's memory grows grossly in the later part of the run.
The rate and latency figures are printed, not asserted.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "soak.py"
MINUTES = "0.75" if os.environ.get("CI") else "1.0"
# a short run still warms up (the compactor's JVM grows with its first Spark jobs): these bounds catch a
# gross leak (say, rows kept after their commit), not the slow drift the 10-minute soak measures
GROWTH_BOUND_MB = {"catalog": 256.0, "writer": 256.0, "compactor": 512.0}


def test_short_soak_keeps_every_row_exactly_once_and_bounds_runs_and_memory(tmp_path: Path) -> None:
    report_path = tmp_path / "report.json"
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), "--minutes", MINUTES, "--writers", "8", "--rows", "1000",
         "--kafka-rate", "1000", "--sample-s", "3", "--warehouse", str(tmp_path / "soak"),
         "--report", str(report_path)],
        capture_output=True, text=True, timeout=900)
    print(proc.stdout[-4000:])
    assert proc.returncode == 0, proc.stderr[-4000:]
    bench = json.loads(proc.stdout.strip().splitlines()[-1])
    assert set(bench) == {"bench", "value", "unit", "anchor", "anchor_value", "ratio", "target"}
    r = json.loads(report_path.read_text())
    assert r["exit_codes"] == {"compactor": 0, "writer": 0, "catalog": 0}
    assert r["writes_acked"] > 0 and r["kafka_acked_messages"] > 0
    assert r["grpc_missing"] == 0, "an acknowledged row is missing"
    assert r["grpc_duplicated"] == 0, "a row was applied twice"
    assert r["grpc_refused_present"] == 0 and r["grpc_unexpected"] == 0
    assert r["kafka_drain_complete"], "the Kafka messages were not all ingested"
    assert r["kafka_mismatched_keys"] == 0, "a Kafka message was lost or applied twice"
    for table, runs in r["sorted_runs_max"].items():
        assert runs <= r["stop_trigger"] + 1, f"{table}: {runs} sorted runs, stop-trigger {r['stop_trigger']}"
    for name, bound in GROWTH_BOUND_MB.items():
        m = r["memory"][name]
        assert m["growth_mb"] <= max(bound, 0.5 * m["mid_median_mb"]), f"{name} memory grew: {m}"
