"""The compaction manager of one bucket: its levels, when to compact, running a unit, stall signals."""

from __future__ import annotations

import pyarrow as pa
from pyroaring import BitMap

from lsmlake.format import options as opts
from lsmlake.format.data_file_meta import DataFileMeta
from lsmlake.mergetree import changelog
from lsmlake.mergetree.compact.full import EarlyFullCompaction, pick_full_compaction
from lsmlake.mergetree.compact.lookup import LookupCompaction, semi_join
from lsmlake.mergetree.compact.rewriter import MergeTreeCompactRewriter
from lsmlake.mergetree.compact.strategy import CompactStrategy
from lsmlake.mergetree.compact.task import MergeTreeCompactTask
from lsmlake.mergetree.compact.unit import CompactResult, CompactUnit
from lsmlake.mergetree.levels import Levels, writers_stall
from lsmlake.mergetree.lookup_cache import process_cache
from lsmlake.mergetree.sorted_run import SortedRun


class MergeTreeCompactManager:
    """Keeps one bucket's LSM tree in shape."""

    def __init__(self, levels: Levels, strategy: CompactStrategy, rewriter: MergeTreeCompactRewriter,
                 min_file_size: int, stop_trigger: int, early_full: EarlyFullCompaction | None = None,
                 changelog_producer: str = "none", vectors: dict[str, BitMap] | None = None) -> None:
        """`vectors`: the bucket's deletion vectors, for tables with deletion vectors (None otherwise)."""
        self.changelog_producer = changelog_producer
        self.vectors = vectors
        self.levels = levels
        self.strategy = strategy
        self.rewriter = rewriter
        self.min_file_size = min_file_size
        self.stop_trigger = stop_trigger
        self.early_full = early_full or EarlyFullCompaction(None)

    def add_new_file(self, f: DataFileMeta) -> None:
        self.levels.add_level0_file(f)
        self.early_full.on_commit()

    def should_wait_for_latest_compaction(self) -> bool:
        """A writer of this bucket must wait for compaction: too many sorted runs pile up."""
        return writers_stall(self.levels.number_of_sorted_runs(), self.stop_trigger)

    def should_wait_for_preparing_checkpoint(self) -> bool:
        """Before a commit, wait once the runs exceed the stop trigger by one more."""
        return writers_stall(self.levels.number_of_sorted_runs(), self.stop_trigger + 1)

    def pick(self, full: bool = False) -> CompactUnit | None:
        """The unit to compact now (None when nothing is due)."""
        runs = self.levels.level_sorted_runs()
        n = self.levels.num_levels
        if full:
            unit = pick_full_compaction(n, runs)
            self.early_full.on_full_compaction()
        else:
            unit = self.early_full.pick(n, runs) or self.strategy.pick(n, runs)
        if unit is None or unit.is_noop():
            return None
        return unit

    def drop_delete(self, unit: CompactUnit) -> bool:
        """Deletes may go only when nothing older can exist below the output (see the module docs)."""
        return unit.output_level != 0 and unit.output_level >= self.levels.non_empty_highest_level()

    def plan(self, full: bool = False) -> CompactUnit | None:
        """The unit `compact` would run now: the pick, widened to a full compaction where retractions need it."""
        unit = self.pick(full)
        if unit is None:
            return None
        if (not self.drop_delete(unit) and self.rewriter.merge_function.retractions_need_history
                and any((f.delete_row_count or 0) > 0 for f in unit.files)):
            # retractions of partial-update/aggregation merge exactly only with the whole history
            unit = pick_full_compaction(self.levels.num_levels, self.levels.level_sorted_runs()) or unit
        return unit

    def compact(self, full: bool = False) -> CompactResult | None:
        """Pick, run and apply one compaction; the result still has to be committed."""
        unit = self.plan(full)
        return None if unit is None else self.run(unit)

    def run(self, unit: CompactUnit) -> CompactResult:
        """Run a planned unit of this bucket's files and apply it to the levels; nothing is committed."""
        if self.vectors is not None:
            cache = process_cache(self.rewriter.schema.table_options.require(opts.LOOKUP_CACHE_MAX_MEMORY_SIZE))
            dv_result = LookupCompaction(self.rewriter, self.vectors, self.levels.all_files(),
                                         self.changelog_producer, cache).run(unit)
            self.levels.update(dv_result.before, dv_result.after)
            self.vectors = dv_result.vectors
            return dv_result
        lookup_changelog = self._lookup_changelog(unit) if self.changelog_producer == "lookup" else []
        task = MergeTreeCompactTask(self.levels.keys, self.rewriter, unit, self.levels.max_level,
                                    self.min_file_size, self.drop_delete(unit),
                                    full_changelog=self.changelog_producer == "full-compaction")
        result = task.run()
        result.changelog.extend(lookup_changelog)
        self.levels.update(result.before, result.after)
        return result

    def _lookup_changelog(self, unit: CompactUnit) -> list[DataFileMeta]:
        """Changelog of the keys in the unit's level-0 files: their value on levels >= 1 before, and after.

        Levels >= 1 are what readers of lookup tables see; moving level-0 files up changes exactly these keys.
        """
        level0 = [f for f in unit.files if f.level == 0]
        if not level0:
            return []
        upper = [f for f in self.levels.all_files() if f.level > 0]
        keys = list(self.rewriter.schema.primary_keys)
        new_rows = self.rewriter.read_section([SortedRun((f,)) for f in level0])
        touched = pa.table([new_rows.column(k) for k in keys], names=keys)
        if upper:
            old_rows = self.rewriter.read_section([SortedRun((f,)) for f in upper])
            old_rows = old_rows.filter(pa.array(semi_join(old_rows, touched, keys)))
            before = self.rewriter.merge_function.merge(old_rows)
            after = self.rewriter.merge_function.merge(pa.concat_tables([old_rows, new_rows]))
        else:
            before = new_rows.schema.empty_table()
            after = self.rewriter.merge_function.merge(new_rows)
        values = [f for f in self.rewriter.schema.field_names if f not in keys]
        return self.rewriter.write_changelog([changelog.diff(before, after, keys, values)])

