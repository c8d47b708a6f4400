"""Fault injection over the whole cluster on loopback; prints the fault table and a JSON line.

    .venv/bin/python scripts/fault_harness.py --rounds 30 --seed 1

Every round kills one process (one of two writer replicas, the compactor, the catalog, the broker) with
SIGKILL at a random moment (seeded), restarts it and checks that no acknowledged row is lost or duplicated,
that every key of db.g_order (changed through gRPC to either replica and Kafka) holds its last acknowledged
change, and that the tables are sound; see docs/reliability.md.
Exit code 0 only when every round's checks pass with zero lost, duplicated and out-of-order rows.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the `tests` package holds the harness

from tests.support.faults.harness import KINDS, Harness  # noqa: E402


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rounds", type=int, default=30)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--kinds", default=",".join(KINDS), help=f"comma-separated subset of {', '.join(KINDS)}")
    p.add_argument("--keep", type=Path, default=None, help="run in this (new) folder and keep it")
    a = p.parse_args()
    kinds = [k for k in a.kinds.split(",") if k]
    unknown = [k for k in kinds if k not in KINDS]
    if unknown or a.rounds < 1:
        p.error(f"unknown fault kinds {unknown}" if unknown else "--rounds must be at least 1")
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(name)s %(message)s")
    logging.getLogger("kafka").setLevel(logging.CRITICAL)  # a killed broker makes the clients very talkative
    with Harness(a.seed, a.keep) as h:
        report = h.run(a.rounds, kinds)
    print(report.table())
    print()
    print(report.rounds_table())
    print(json.dumps(report.summary()))
    ok = (not report.problems and report.lost == 0 and report.duplicates == 0 and report.order_ok()
          and len(report.rounds) == a.rounds)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
