"""The merge task of one compaction unit: upgrade what can move unchanged, rewrite the rest."""

from __future__ import annotations

from lsmlake.format.data_file_meta import DataFileMeta
from lsmlake.mergetree.compact.rewriter import MergeTreeCompactRewriter
from lsmlake.mergetree.compact.unit import CompactResult, CompactUnit
from lsmlake.mergetree.file_keys import FileKeys
from lsmlake.mergetree.interval_partition import interval_partition
from lsmlake.mergetree.sorted_run import SortedRun


class MergeTreeCompactTask:
    """Runs a unit: sections of overlapping files are merged; lone big files are upgraded.

    1. split the unit's files into sections of overlapping key ranges;
    2. a section of several runs, or a file smaller than `min_file_size`, joins the rewrite candidates;
    3. a big file alone in its section flushes the candidates (rewritten together) and is upgraded;
    4. the remaining candidates are rewritten.
    """

    def __init__(self, keys: FileKeys, rewriter: MergeTreeCompactRewriter, unit: CompactUnit, max_level: int,
                 min_file_size: int, drop_delete: bool, full_changelog: bool = False) -> None:
        """`full_changelog`: changelog-producer full-compaction; a compaction into the max level then
        writes the change it makes to that level, so nothing may reach it without a rewrite."""
        self.keys = keys
        self.rewriter = rewriter
        self.unit = unit
        self.output_level = unit.output_level
        self.max_level = max_level
        self.min_file_size = min_file_size
        self.drop_delete = drop_delete
        self.changelog_level = max_level if full_changelog and unit.output_level == max_level else None
        self.upgraded = 0
        self.rewritten = 0

    def run(self) -> CompactResult:
        result = CompactResult()
        if self.unit.file_rewrite:
            self._rewrite([[SortedRun.single(f)] for f in self.unit.files], result, force=True)
            return result
        candidate: list[list[SortedRun]] = []
        for section in interval_partition(self.unit.files, self.keys):
            if len(section) > 1:
                candidate.append(section)
                continue
            for f in section[0].files:
                if f.file_size < self.min_file_size:
                    candidate.append([SortedRun.single(f)])
                else:
                    self._rewrite(candidate, result)
                    candidate = []
                    self._upgrade(f, result)
        self._rewrite(candidate, result)
        return result

    def _upgrade(self, f: DataFileMeta, result: CompactResult) -> None:
        if f.level == self.output_level:
            return
        # Retractions must not reach the max level unmerged. pypaimon records `_DELETE_ROW_COUNT` = 0
        # even for level-0 files holding -D rows, so only a compacted file's count is trusted.
        trusted_clean = f.level > 0 and (f.delete_row_count or 0) == 0 and self.changelog_level is None
        if self.output_level != self.max_level or trusted_clean:
            result.merge(self.rewriter.upgrade(self.output_level, f))
            self.upgraded += 1
        else:
            self._rewrite([[SortedRun.single(f)]], result, force=True)

    def _rewrite(self, candidate: list[list[SortedRun]], result: CompactResult, force: bool = False) -> None:
        if not candidate:
            return
        if not force and len(candidate) == 1 and len(candidate[0]) == 1:
            # one run alone needs no merge: its files move up unchanged
            for f in candidate[0][0].files:
                self._upgrade(f, result)
            return
        result.merge(self.rewriter.rewrite(self.output_level, self.drop_delete, candidate, self.changelog_level))
        self.rewritten += sum(len(r.files) for s in candidate for r in s)
