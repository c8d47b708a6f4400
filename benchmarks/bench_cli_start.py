"""How long `lake` takes, as a whole process, for a trivial command: `lake --warehouse DIR table list db` on a
local warehouse holding one database and one table (made in setup).

Anchor: `python -c pass`, the interpreter's own start (site and the editable install's finder included), which
no command can beat. Also printed: `lake --help`, and the import of `lsmlake.catalog.filesystem` alone (the
catalog a listing opens, which sets the listing's floor). The commands, the anchor and the floor are run in
turn, RUNS times each after a warm-up, so that the noise of this shared machine falls on all of them alike;
medians are reported. Target: the listing in at most 0.3 s.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
import common  # noqa: E402

RUNS = int(os.environ.get("RUNS", "15"))
TARGET_S = 0.3


def lake_command() -> list[str]:
    """The console script beside this interpreter, as a user runs it (else its entry point through -c)."""
    script = Path(sys.executable).parent / "lake"
    if script.exists():
        return [str(script)]
    return [sys.executable, "-c", "import sys; from lsmlake.cli.main import main; sys.exit(main())"]


#: no cluster of the caller's (`LAKE_CATALOG`...) and no other warehouse: the listing reads the folder made here
ENV = {k: v for k, v in os.environ.items() if not k.startswith("LAKE_")}


def run(argv: list[str]) -> float:
    secs, done = common.timed(lambda: subprocess.run(argv, capture_output=True, env=ENV))
    if done.returncode != 0:
        raise RuntimeError(f"{argv} exited {done.returncode}: {done.stderr.decode()[-2000:]}")
    return float(secs)


def main() -> None:
    lake = lake_command()
    with tempfile.TemporaryDirectory() as wh:
        create = ["table", "create", "db.orders", "--schema", "id BIGINT NOT NULL, dt STRING, amount DECIMAL(10,2)",
                  "--primary-key", "id,dt", "--partition-key", "dt", "--option", "bucket=2"]
        subprocess.run([*lake, "--warehouse", wh, *create], check=True, stdout=subprocess.DEVNULL, env=ENV)
        listed = subprocess.run([*lake, "--warehouse", wh, "table", "list", "db"], check=True, capture_output=True,
                                text=True, env=ENV).stdout
        assert listed == "orders\n", listed
        cases = {
            "lake --warehouse DIR table list db": [*lake, "--warehouse", wh, "table", "list", "db"],
            "lake --help": [*lake, "--help"],
            "python -c pass (anchor)": [sys.executable, "-c", "pass"],
            "import lsmlake.catalog.filesystem (floor)": [sys.executable, "-c", "import lsmlake.catalog.filesystem"],
        }
        times: dict[str, list[float]] = {name: [] for name in cases}
        for argv in cases.values():  # warm-up: bytecode caches, page cache
            run(argv)
        for _ in range(RUNS):
            for name, argv in cases.items():
                times[name].append(run(argv))
    medians = {name: statistics.median(t) for name, t in times.items()}
    value = medians["lake --warehouse DIR table list db"]
    anchor = medians["python -c pass (anchor)"]
    print(f"{RUNS} runs each, interleaved; whole process")
    for name, t in times.items():
        print(f"{name:45s} median {medians[name]:6.3f} s  ({medians[name] / anchor:5.1f}x the anchor)  "
              f"min {min(t):6.3f}  max {max(t):6.3f}")
    print(json.dumps({"bench": "cli_start", "value": round(value, 3), "unit": "s", "anchor": "python -c pass",
                      "anchor_value": round(anchor, 3), "ratio": round(value / anchor, 2),
                      "target": f"<= {TARGET_S} s"}))


if __name__ == "__main__":
    main()
