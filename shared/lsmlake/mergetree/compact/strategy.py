"""Builds a bucket's compaction strategy from the table options (options are read here, once)."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Protocol

from lsmlake.format import options as opts
from lsmlake.format.options import TableOptions
from lsmlake.mergetree.compact.force_up_level0 import ForceUpLevel0Compaction, TriggerCount
from lsmlake.mergetree.compact.unit import CompactUnit
from lsmlake.mergetree.compact.universal import OffPeakHours, UniversalCompaction, local_hour
from lsmlake.mergetree.sorted_run import LevelSortedRun


class CompactStrategy(Protocol):
    """Picks a compaction unit from a bucket's sorted runs (newest first), or None."""

    def pick(self, num_levels: int, runs: Sequence[LevelSortedRun]) -> CompactUnit | None: ...


def universal_from_options(o: TableOptions, clock: Callable[[], float] = time.time,
                           hour: Callable[[], int] = local_hour) -> UniversalCompaction:
    return UniversalCompaction(
        max_size_amp=o.require(opts.COMPACTION_MAX_SIZE_AMPLIFICATION_PERCENT),
        size_ratio=o.require(opts.COMPACTION_SIZE_RATIO),
        num_run_trigger=o.require(opts.NUM_SORTED_RUN_COMPACTION_TRIGGER),
        optimization_interval_ms=o.get(opts.COMPACTION_OPTIMIZATION_INTERVAL),
        clock=clock,
        total_size_threshold=o.get(opts.COMPACTION_TOTAL_SIZE_THRESHOLD),
        incremental_size_threshold=o.get(opts.COMPACTION_INCREMENTAL_SIZE_THRESHOLD),
        offpeak=OffPeakHours.of(o.require(opts.COMPACTION_OFFPEAK_START_HOUR),
                                o.require(opts.COMPACTION_OFFPEAK_END_HOUR), o.require(opts.COMPACTION_OFFPEAK_RATIO)),
        hour=hour)


def needs_lookup(o: TableOptions) -> bool:
    """Paimon's tables that look up: readers skip level 0 (deletion vectors, first-row) or changelogs are made when
    level 0 moves up (lookup), or the table asks for it (force-lookup)."""
    return (bool(o.get(opts.DELETION_VECTORS_ENABLED)) or o.get(opts.CHANGELOG_PRODUCER) == "lookup"
            or o.get(opts.MERGE_ENGINE) == opts.MergeEngine.FIRST_ROW or bool(o.get(opts.FORCE_LOOKUP)))


def needs_force_up_level0(o: TableOptions) -> bool:
    return needs_lookup(o) or bool(o.get(opts.COMPACTION_FORCE_UP_LEVEL_0))


def strategy_from_options(o: TableOptions, clock: Callable[[], float] = time.time,
                          triggers: TriggerCount | None = None,
                          hour: Callable[[], int] = local_hour) -> CompactStrategy:
    """The bucket's strategy; `triggers` carries a gentle lookup table's count from one planning to the next (without
    it, level 0 moves up whenever nothing else is due, as in radical mode: an explicit compaction)."""
    universal = universal_from_options(o, clock, hour)
    if not needs_force_up_level0(o):
        return universal
    gentle = needs_lookup(o) and o.get(opts.LOOKUP_COMPACT) == opts.LookupCompactMode.GENTLE and triggers is not None
    return ForceUpLevel0Compaction(universal, o.lookup_compact_max_interval() if gentle else None, triggers)
