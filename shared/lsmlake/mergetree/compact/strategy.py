"""Builds a bucket's compaction strategy from the table options (options are read here, once)."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Protocol

from lsmlake.format import options as opts
from lsmlake.format.options import TableOptions
from lsmlake.mergetree.compact.force_up_level0 import ForceUpLevel0Compaction
from lsmlake.mergetree.compact.unit import CompactUnit
from lsmlake.mergetree.compact.universal import UniversalCompaction
from lsmlake.mergetree.sorted_run import LevelSortedRun


class CompactStrategy(Protocol):
    """Picks a compaction unit from a bucket's sorted runs (newest first), or None."""

    def pick(self, num_levels: int, runs: Sequence[LevelSortedRun]) -> CompactUnit | None: ...


def universal_from_options(o: TableOptions, clock: Callable[[], float] = time.time) -> UniversalCompaction:
    return UniversalCompaction(
        max_size_amp=o.require(opts.COMPACTION_MAX_SIZE_AMPLIFICATION_PERCENT),
        size_ratio=o.require(opts.COMPACTION_SIZE_RATIO),
        num_run_trigger=o.require(opts.NUM_SORTED_RUN_COMPACTION_TRIGGER),
        optimization_interval_ms=o.get(opts.COMPACTION_OPTIMIZATION_INTERVAL),
        clock=clock)


def needs_force_up_level0(o: TableOptions) -> bool:
    """Readers skip level 0 with deletion vectors, and lookup changelogs are made when level 0 moves up."""
    return bool(o.get(opts.DELETION_VECTORS_ENABLED)) or o.get(opts.CHANGELOG_PRODUCER) == "lookup"


def strategy_from_options(o: TableOptions, clock: Callable[[], float] = time.time) -> CompactStrategy:
    universal = universal_from_options(o, clock)
    return ForceUpLevel0Compaction(universal) if needs_force_up_level0(o) else universal
