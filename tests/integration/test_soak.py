"""A short run of `scripts/soak.py`: the whole cluster under 8 gRPC writers and Kafka ingestion.

Asserts what must hold however slow the machine is: every acknowledged gRPC row is applied exactly once
(per id, the count of acknowledged writes; no refused write applied), every Kafka message acknowledged
by the broker is counted exactly once, no bucket ever has more sorted runs than
`num-sorted-run.stop-trigger` + 1, no service's memory grows grossly in the later part of the run, and
the snapshots and the outbox stay bounded: with a retention of seconds, by the end of the load each table
keeps only its recent snapshots (far fewer than it committed, none older than the retention plus two
expiration intervals and a margin), and once the catalog has purged after the load (`--settle-s`) the
outbox holds a fraction of the events it recorded. Without expiration or purge each of these fails: every
snapshot and every event would still be there. The rate, latency and flatness figures are printed, not
asserted (a run this short is mostly warm-up).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.support.paths import ROOT

SCRIPT = ROOT / "scripts" / "soak.py"
MINUTES = "0.75" if os.environ.get("CI") else "1.0"
# a short run still warms up (the compactor's JVM grows with its first Spark jobs): these bounds catch a
# gross leak (say, rows kept after their commit), not the slow drift the 10-minute soak measures
GROWTH_BOUND_MB = {"catalog": 256.0, "writer": 256.0, "compactor": 512.0}
# retention of seconds, so that expiration and the outbox purge show within the run; the purge period is the
# catalog's own (60 s), hence --settle-s: after the load, the soak waits for the next purge
RETAINED_S, RETAIN_MIN, EXPIRE_S, OUTBOX_S = 10, 3, 5, 10
RETENTION = ["--snapshot-time-retained", f"{RETAINED_S} s", "--snapshot-num-retained-min", str(RETAIN_MIN),
             "--expire-interval", str(EXPIRE_S), "--outbox-retention", str(OUTBOX_S), "--settle-s", "150"]
# the oldest snapshot left at the end of the load (unless only the RETAIN_MIN newest are left, whatever their
# age): the retention, two intervals (the pass due next, and one late on a busy machine) and a margin;
# without expiration it is the table's first snapshot, older than the load (45 s at least)
OLDEST_BOUND_S = RETAINED_S + 2 * EXPIRE_S + 15
# kept / committed at the end of the load: about (retention + interval) / load, ~0.25 in 60 s (unless only
# the RETAIN_MIN newest are left); 1 without expiration
KEPT_FRACTION = 0.6
# outbox events / recorded after a purge that followed the load: about retention / load; 1 without a purge
OUTBOX_FRACTION = 0.5


def test_short_soak_keeps_every_row_exactly_once_and_bounds_runs_memory_snapshots_and_outbox(tmp_path: Path) -> None:
    report_path = tmp_path / "report.json"
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), "--minutes", MINUTES, "--writers", "8", "--rows", "1000",
         "--kafka-rate", "1000", "--sample-s", "3", "--warehouse", str(tmp_path / "soak"),
         "--report", str(report_path), *RETENTION],
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
    for table, snap in r["snapshots"].items():
        assert snap["committed"] > 2 * RETAIN_MIN, f"{table}: too few commits to tell: {snap}"
        assert snap["last"] <= max(KEPT_FRACTION * snap["committed"], RETAIN_MIN), \
            f"{table}: too many snapshots kept: {snap}"
        assert snap["oldest_age_s"] <= OLDEST_BOUND_S or snap["last"] <= RETAIN_MIN, \
            f"{table}: a snapshot outlived its retention: {snap}"
    assert r["outbox"] is not None and r["catalog_samples_missing"] == 0, "the catalog's metrics were not read"
    settled = r["settled"]
    assert settled["purged_after_load"], f"no outbox purge within --settle-s after the load: {settled}"
    assert settled["outbox_recorded"] > 0 and settled["outbox"] <= OUTBOX_FRACTION * settled["outbox_recorded"], \
        f"the outbox keeps its delivered events: {settled}"
