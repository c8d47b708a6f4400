"""Universal (size-tiered) compaction, as Paimon picks it.

`pick` checks, in order:
0. early full compaction, for a bucket of more than one run: the optimisation interval (the last full
   compaction is older), `compaction.total-size-threshold` (all runs hold less), then
   `compaction.incremental-size-threshold` (the runs below the highest level hold more);
1. size amplification: all runs but the oldest are more than `max_size_amp` percent of the oldest;
2. size ratio: a prefix of runs, each small enough against the sum of the runs before it; inside the
   off-peak window (`OffPeakHours`) the off-peak ratio is added to the size ratio, so more is merged then.
   Once a pick is certain, a too-big run on level 0 or 1 is taken anyway and the runs above are weighed
   against the bigger sum (Paimon master since apache/paimon#9185, not in a release up to 2.0.0);
3. file number: more runs than the trigger forces a size-ratio pick of the surplus.
Runs are given newest first. Picking is pure: no I/O; the clock and the local hour are injected.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from lsmlake.mergetree.compact.unit import CompactUnit
from lsmlake.mergetree.sorted_run import LevelSortedRun


def local_hour() -> int:
    """The hour of the local clock, 0-23 (Paimon reads the JVM's local hour)."""
    return time.localtime().tm_hour


@dataclass(frozen=True)
class OffPeakHours:
    """Paimon's off-peak window: hours [start, end) of the local clock, spanning midnight when end < start."""

    start: int
    end: int
    ratio: int

    @staticmethod
    def of(start: int, end: int, ratio: int) -> OffPeakHours | None:
        """None (no window) when either hour is -1 or they are equal, as Paimon has it."""
        if start == -1 or end == -1 or start == end:
            return None
        return OffPeakHours(start, end, ratio)

    def ratio_at(self, hour: int) -> int:
        inside = self.start <= hour < self.end if self.start <= self.end else hour < self.end or hour >= self.start
        return self.ratio if inside else 0


class UniversalCompaction:
    """Size-tiered compaction over the sorted runs of a bucket."""

    def __init__(self, max_size_amp: int = 200, size_ratio: int = 1, num_run_trigger: int = 5,
                 optimization_interval_ms: int | None = None,
                 clock: Callable[[], float] = time.time, *, total_size_threshold: int | None = None,
                 incremental_size_threshold: int | None = None, offpeak: OffPeakHours | None = None,
                 hour: Callable[[], int] = local_hour) -> None:
        self.max_size_amp = max_size_amp
        self.size_ratio = size_ratio
        self.num_run_trigger = num_run_trigger
        self.optimization_interval_ms = optimization_interval_ms
        self.total_size_threshold = total_size_threshold
        self.incremental_size_threshold = incremental_size_threshold
        self.offpeak = offpeak
        self.hour = hour
        self.clock = clock
        self.last_optimized_ms: float | None = None

    def pick(self, num_levels: int, runs: Sequence[LevelSortedRun]) -> CompactUnit | None:
        max_level = num_levels - 1
        if self._early_full_due(max_level, runs):
            self._mark_optimized()
            return CompactUnit.from_level_runs(max_level, runs)
        unit = self.pick_for_size_amp(max_level, runs)
        if unit is not None:
            return unit
        unit = self.pick_for_size_ratio(max_level, runs)
        if unit is not None:
            return unit
        if len(runs) > self.num_run_trigger:
            return self.pick_for_size_ratio(max_level, runs, len(runs) - self.num_run_trigger + 1, force=True)
        return None

    def pick_for_size_amp(self, max_level: int, runs: Sequence[LevelSortedRun]) -> CompactUnit | None:
        """All runs into the max level when the newer runs outweigh the oldest by `max_size_amp` percent."""
        if len(runs) < self.num_run_trigger:
            return None
        newer = sum(r.total_size for r in runs[:-1])
        oldest = runs[-1].total_size
        if newer * 100 > self.max_size_amp * oldest:
            self._mark_optimized()
            return CompactUnit.from_level_runs(max_level, runs)
        return None

    def pick_for_size_ratio(self, max_level: int, runs: Sequence[LevelSortedRun], candidate_count: int = 1,
                            force: bool = False) -> CompactUnit | None:
        """Grow a prefix of runs while the next run is not bigger than the prefix by more than `size_ratio`%.

        A run that is too big ends the prefix, except on level 0 or 1 once the pick is certain (forced, or two
        runs already in): leaving it out would only push the output onto it (see `_unit`) without weighing the
        level-2 run against it, so level 1 would grow without bound. Taking it, the runs on level 2 and above
        are then weighed against the bigger sum.
        """
        if not force and candidate_count == 1 and len(runs) < self.num_run_trigger:
            return None
        size = sum(r.total_size for r in runs[:candidate_count])
        count = candidate_count
        picked = force or candidate_count > 1
        offpeak = self.offpeak.ratio_at(self.hour()) if self.offpeak is not None else 0
        for r in runs[candidate_count:]:
            too_big = size * (100.0 + self.size_ratio + offpeak) / 100.0 < r.total_size
            if too_big and (not picked or r.level > 1):
                break
            size += r.total_size
            count += 1
            picked = True
        return self._unit(runs, max_level, count) if picked else None

    def _unit(self, runs: Sequence[LevelSortedRun], max_level: int, count: int) -> CompactUnit:
        """Output to the level just above the next untouched run, never to level 0."""
        if count == len(runs):
            output = max_level
        else:
            output = max(0, runs[count].level - 1)
        if output == 0:
            # the next runs are on level 0 too: take them along until a run on a higher level
            for r in runs[count:]:
                count += 1
                if r.level != 0:
                    output = r.level
                    break
        if count == len(runs):
            self._mark_optimized()
            output = max_level
        return CompactUnit.from_level_runs(output, runs[:count])

    def _early_full_due(self, max_level: int, runs: Sequence[LevelSortedRun]) -> bool:
        """Step 0 (see the module); never for a single sorted run."""
        if len(runs) <= 1:
            return False
        if self._optimization_due():
            return True
        if self.total_size_threshold is not None and sum(r.total_size for r in runs) < self.total_size_threshold:
            return True
        return (self.incremental_size_threshold is not None
                and sum(r.total_size for r in runs if r.level != max_level) > self.incremental_size_threshold)

    def _optimization_due(self) -> bool:
        if self.optimization_interval_ms is None:
            return False
        now = self.clock() * 1000
        if self.last_optimized_ms is None:
            self.last_optimized_ms = now
            return False
        return now - self.last_optimized_ms > self.optimization_interval_ms

    def _mark_optimized(self) -> None:
        if self.optimization_interval_ms is not None:
            self.last_optimized_ms = self.clock() * 1000
