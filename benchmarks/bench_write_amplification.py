"""Write amplification of universal compaction: a pure simulation of COMMITS equal-size commits.

No file is read or written. One bucket receives COMMITS commits of the same size; each adds one
level-0 sorted run of size 1 (the flush). After each commit the real `UniversalCompaction.pick`
(shared/lsmlake/mergetree/compact/universal.py) is asked once for a unit, as in the chain test of
tests/lsmlake/mergetree/compact/test_universal.py, and the unit is applied as "replace the picked runs by one run
of their summed size on the output level". `num_levels` is trigger + 1, as the table options default.

Accounting
    written   = COMMITS (every flush writes its run once) + the input size of every compaction;
    WA        = written / ingested, ingested = COMMITS.
    This counts a rewrite of every picked run, which is exact when all runs overlap in key range
    (uniformly spread keys) and an UPPER BOUND otherwise: lsmlake's merge task
    (compaction/compact_task.py) splits a unit into sections of overlapping files and moves a big
    file that is alone in its section to the output level without rewriting it. The column
    "WA upgr" also models the one upgrade that does not depend on keys: a unit of a single run moves
    up unchanged, unless it goes from level 0 to the max level (rewritten, because pypaimon records
    `_DELETE_ROW_COUNT` = 0 even for level-0 files holding deletes). Plain universal compaction
    never picks one run alone, so both columns agree except with force-up-level-0.
    Read amplification is the number of sorted runs after each commit's compaction (max and mean).
    A "full" compaction is a unit that takes every run to the max level.

Theory (the "anchor" printed beside each measured figure), with K = trigger, A = max-amp / 100:

    WA_theory = 1 + log_{K-1}(N * A / (1 + A)) + (1 + A) / A

    * 1: the flush writes every byte once.
    * log_{K-1}(...): size-tiered compaction rewrites a byte once per tier it moves through. The
      file-number trigger lets about K - 1 runs of one tier pile up above the oldest run before
      they are merged, so tiers grow by T = K - 1 and a byte passes log_T(tier span) tiers. The
      tiers span only the data newer than the oldest run, which the size-amplification bound keeps
      below A / (1 + A) of the N bytes. The size ratio option (1 %, 10 %) only decides which
      near-equal runs count as one tier and is not in the formula.
    * (1 + A) / A: a full compaction fires when the newer runs exceed A times the oldest run, so
      the oldest run grows by a factor of about 1 + A from one full compaction to the next; the full
      compactions rewrite N, N / (1 + A), N / (1 + A)^2, ... bytes, a geometric sum of
      N (1 + A) / A (it saw-tooths between about (1 + A) / A and 1 / A depending on where N falls).
    Read amplification: the trigger bounds the sorted runs (K after a commit with one pick per
    commit); writers stall above the stop trigger K + 3.

Where the estimate holds and where it does not: the tiers of size-tiered compaction need slots, and
universal compaction has only K - 1 of them above the oldest run. While the newer data fits, the
measured WA stays near the estimate (trigger 10: 0.7 to 1.0 of it up to 10,000 commits). When it no
longer fits, the file-number trigger forces the newest run into the next, much bigger run (a
leveled-style merge that rewrites the big run to absorb one flush) and WA grows much faster than
log N: with trigger 5 this is visible at 1,000 commits and dominant at 10,000 (see the scaling
table). Many equal, tiny commits into one bucket are the worst case; fewer, bigger commits or a
higher trigger push it further out.

Options (argv, or the environment variables in brackets):
    --commits N (COMMITS, 1000)            --max-size-amp P (MAX_SIZE_AMP, 200)
    --size-ratio P (SIZE_RATIO, 1)         --trigger K (TRIGGER, 5)
    --num-levels L (NUM_LEVELS, trigger + 1)
Run: .venv/bin/python benchmarks/bench_write_amplification.py
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import os
from dataclasses import dataclass

from lsmlake.format.binary_row import serialize_row
from lsmlake.format.data_file_meta import DataFileMeta
from lsmlake.format.stats import EMPTY_STATS
from lsmlake.format.types import DataType
from lsmlake.mergetree.compact.force_up_level0 import ForceUpLevel0Compaction
from lsmlake.mergetree.compact.universal import UniversalCompaction
from lsmlake.mergetree.sorted_run import LevelSortedRun, SortedRun

_KEY = serialize_row([0], [DataType("BIGINT", nullable=False)])
_names = itertools.count()


def _run(level: int, size: int) -> LevelSortedRun:
    """A sorted run of one file of `size` bytes on `level` (keys do not matter to the strategy)."""
    f = DataFileMeta(file_name=f"sim-{next(_names)}", file_size=size, row_count=size, min_key=_KEY,
                     max_key=_KEY, key_stats=EMPTY_STATS, value_stats=EMPTY_STATS, min_sequence_number=0,
                     max_sequence_number=0, schema_id=0, level=level, delete_row_count=0)
    return LevelSortedRun(level, SortedRun.single(f))


@dataclass
class Outcome:
    commits: int
    written: int = 0            # flushes + inputs of every compaction (upper bound)
    written_upgrades: int = 0   # the same, single-run units moved up without a rewrite
    compactions: int = 0
    full: int = 0
    upgrades: int = 0
    max_runs: int = 0
    sum_runs: int = 0
    first_states: tuple[str, ...] = ()
    final_state: str = ""

    @property
    def wa(self) -> float:
        return self.written / self.commits

    @property
    def wa_upgrades(self) -> float:
        return self.written_upgrades / self.commits

    @property
    def avg_runs(self) -> float:
        return self.sum_runs / self.commits


def simulate(commits: int, max_size_amp: int = 200, size_ratio: int = 1, trigger: int = 5,
             num_levels: int | None = None, force_up_level0: bool = False) -> Outcome:
    num_levels = num_levels or trigger + 1
    max_level = num_levels - 1
    universal = UniversalCompaction(max_size_amp=max_size_amp, size_ratio=size_ratio, num_run_trigger=trigger)
    strategy = ForceUpLevel0Compaction(universal) if force_up_level0 else universal
    runs: list[LevelSortedRun] = []  # newest first
    out = Outcome(commits)
    states: list[str] = []
    for _ in range(commits):
        runs.insert(0, _run(0, 1))
        out.written += 1
        out.written_upgrades += 1
        unit = strategy.pick(num_levels, runs)
        if unit is not None:
            n = len(unit.files)
            # every pick is a prefix of the runs (newest first); check it rather than assume it
            assert unit.files == tuple(r.run.files[0] for r in runs[:n]), "unit is not a prefix of the runs"
            size = sum(f.file_size for f in unit.files)
            out.compactions += 1
            out.written += size
            if n == len(runs):
                out.full += 1
            lone_run_upgrade = n == 1 and (unit.output_level != max_level or runs[0].level > 0)
            if lone_run_upgrade:
                out.upgrades += 1
            else:
                out.written_upgrades += size
            runs[:n] = [_run(unit.output_level, size)]
        out.max_runs = max(out.max_runs, len(runs))
        out.sum_runs += len(runs)
        if len(states) < 15:
            states.append(" ".join(str(r.total_size) for r in runs))
    out.first_states = tuple(states)
    out.final_state = " ".join(str(r.total_size) for r in runs)
    return out


def theory(commits: int, max_size_amp: int, trigger: int) -> float:
    """1 + log_{K-1}(N A / (1 + A)) + (1 + A) / A; see the module docstring."""
    a = max_size_amp / 100
    fan_in = max(2, trigger - 1)
    newer = max(1.0, commits * a / (1 + a))
    return 1 + math.log(newer, fan_in) + (1 + a) / a


def _int(env: str, default: int) -> int:
    return int(os.environ.get(env, default))


def main() -> None:
    p = argparse.ArgumentParser(description="Write amplification of universal compaction (simulation).")
    p.add_argument("--commits", type=int, default=_int("COMMITS", 1000))
    p.add_argument("--max-size-amp", type=int, default=_int("MAX_SIZE_AMP", 200))
    p.add_argument("--size-ratio", type=int, default=_int("SIZE_RATIO", 1))
    p.add_argument("--trigger", type=int, default=_int("TRIGGER", 5))
    p.add_argument("--num-levels", type=int, default=_int("NUM_LEVELS", 0) or None)
    args = p.parse_args()
    n, amp, ratio, trig = args.commits, args.max_size_amp, args.size_ratio, args.trigger
    stop = trig + 3

    head = simulate(n, amp, ratio, trig, args.num_levels)
    anchor = theory(n, amp, trig)
    print(f"universal compaction, max-size-amp {amp} %, size-ratio {ratio} %, trigger {trig}, "
          f"num-levels {args.num_levels or trig + 1}; commits of size 1")
    print("first commits (run sizes, newest first): " + " | ".join(head.first_states[:15]))
    print(f"commits                      {head.commits}")
    print(f"total written                {head.written}   ({head.written_upgrades} with lone-run upgrades)")
    print(f"write amplification          {head.wa:.2f} x  (upper bound: every picked run rewritten)")
    print(f"  with lone-run upgrades     {head.wa_upgrades:.2f} x")
    print(f"  size-tiered theory         {anchor:.2f} x  (1 + log_{max(2, trig - 1)}(N*A/(1+A)) + (1+A)/A)")
    print(f"sorted runs after a commit   max {head.max_runs}, mean {head.avg_runs:.2f}  "
          f"(trigger {trig}, stop trigger {stop})")
    print(f"compactions                  {head.compactions}  (full: {head.full})")
    print(f"runs at the end              {head.final_state}  (sizes, newest first)")
    print()

    print(f"option grid, {n} commits (runs: after each commit's compaction)")
    print(f"{'amp%':>5} {'ratio%':>6} {'trig':>4} | {'WA':>6} {'WA upgr':>7} {'theory':>6} {'WA/th':>5} | "
          f"{'max runs':>8} {'mean':>5} {'stop':>4} | {'compactions':>11} {'full':>4}")
    grid = [(a, r, k, False) for k in (5, 10) for a in (200, 100) for r in (1, 10)]
    grid.append((amp, ratio, trig, True))
    for a, r, k, force in grid:
        o = simulate(n, a, r, k, None, force)
        t = theory(n, a, k)
        label = " force-up-level-0" if force else ""
        print(f"{a:>5} {r:>6} {k:>4} | {o.wa:>6.2f} {o.wa_upgrades:>7.2f} {t:>6.2f} {o.wa / t:>5.2f} | "
              f"{o.max_runs:>8} {o.avg_runs:>5.2f} {k + 3:>4} | {o.compactions:>11} {o.full:>4}{label}")
    print()

    print(f"scaling with the number of commits (max-size-amp {amp} %, size-ratio {ratio} %)")
    print(f"{'trig':>4} {'commits':>7} | {'WA':>6} {'theory':>6} {'WA/th':>5} | {'max runs':>8}")
    for k in sorted({trig, 5, 10}):
        for c in (max(1, n // 10), n, n * 10):
            o = head if (k, c) == (trig, n) and args.num_levels is None else simulate(c, amp, ratio, k)
            t = theory(c, amp, k)
            print(f"{k:>4} {c:>7} | {o.wa:>6.2f} {t:>6.2f} {o.wa / t:>5.2f} | {o.max_runs:>8}")
    print()

    target = f"max sorted runs <= stop trigger ({stop})"
    print(f"target: {target}: {'met' if head.max_runs <= stop else 'NOT MET'}")
    print(json.dumps({"bench": f"universal_write_amplification_{n}_commits", "value": round(head.wa, 2),
                      "unit": "x", "anchor": "size-tiered theory estimate", "anchor_value": round(anchor, 2),
                      "ratio": round(head.wa / anchor, 2), "target": target}))


if __name__ == "__main__":
    main()
