"""One bucket's compaction figures for the table health: whether a compaction is due, since when, small files.

"Due" is what `lake compact` would do now (`lsmlake.table.compact.plan_bucket`'s rules, with the clock injected):
- a primary-key bucket is due when universal compaction (or the table's full-compaction schedule, or
  force-up-level-0 for tables whose readers skip level 0) picks a unit. It became due when the oldest level-0
  files first made a pick: the bucket is replayed with its upper levels and its level-0 files added oldest first,
  and the creation time of the file that made the pick is the moment (never before the bucket's newest
  upper-level file: a compaction since then started the clock again). A pick that no level-0 file makes counts
  from the bucket's newest file; a full compaction on schedule (`compaction.optimization-interval`,
  `full-compaction.delta-commits`) never from before it was due. A gentle lookup table (`lookup-compact` =
  gentle) is asked as the compactor service would with a fresh trigger count (its level 0 moves up only at every
  `lookup-compact.max-interval`-th trigger, a count only the compactor holds), not as `lake compact`, which moves
  level 0 up at once.
- creation times are on the clock of `now`: the stored value is local wall-clock time written as if UTC.
- an append bucket is due when its compaction rule picks a window of files (Paimon's bucketed rule:
  `compaction.min.file-num` small files that fill `target-file-size`, or `compaction.max.file-num` of any size;
  or a file with too many deleted rows): the window became complete when its newest file was written (with files
  taken for their deleted rows, at the snapshot's time: when the deletes came is not recorded, only that it was
  no later).
- a postpone table's bucket -2 always waits for placement, since its oldest file.

Small files are relative to what compaction writes: a sorted run written by compaction holds at most one file
below the compaction file size (its last), so only the others in a run count in a primary-key bucket (level-0
files are runs of their own, counted as runs); an append bucket's files below the compaction file size count once
the bucket has more than one file (a bucket whose whole data is one small file is as compacted as it gets).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from lsmlake.format import options as opts
from lsmlake.format.bucket import POSTPONE_BUCKET
from lsmlake.format.data_file_meta import DataFileMeta
from lsmlake.mergetree.compact.force_up_level0 import TriggerCount
from lsmlake.table.append_compaction import AppendCompactManager
from lsmlake.table.compact import (
    CompactionHistory,
    compaction_history,
    full_compaction_due,
    full_compaction_required,
    merge_tree_manager,
    split_dir,
)
from lsmlake.table.file_store_table import FileStoreTable
from lsmlake.table.scan import Split


@dataclass(frozen=True)
class BucketHealth:
    """One bucket at the latest snapshot."""

    partition: bytes
    partition_values: tuple[object, ...]
    bucket: int
    sorted_runs: int  # primary-key buckets: each level-0 file and each non-empty higher level; append: 0
    level0_files: int
    files: int
    small_files: int  # see the module: files compaction would not have left
    size_bytes: int
    rows: int
    deleted_rows: int
    due_since_ms: int | None  # when the compaction now due became due (see the module); None: nothing is due

    @property
    def due(self) -> bool:
        return self.due_since_ms is not None

    def lag_ms(self, now_ms: int) -> int:
        """How long the due compaction has waited; 0 when none is due."""
        return 0 if self.due_since_ms is None else max(0, now_ms - self.due_since_ms)


@dataclass(frozen=True)
class DueRules:
    """What decides, for every bucket of one table at one moment, whether a compaction is due (read once)."""

    history: CompactionHistory
    full: bool  # every compaction of the table is full now (first-row without vectors, or a full one is due)
    now_ms: int
    fallback_ms: int  # the snapshot's time, for files that carry no creation time
    planned: bool = True  # False: the table is not compacted by lsmlake, nothing is ever due
    # when the full compaction now due on schedule became due: nothing it adds was due before (None: not on
    # schedule, or every compaction of the table is full)
    full_since_ms: int | None = None

    @staticmethod
    def of(table: FileStoreTable, snapshot_ms: int | None, now_ms: int, planned: bool = True) -> DueRules:
        o = table.options
        schedules = (o.get(opts.FULL_COMPACTION_DELTA_COMMITS), o.get(opts.COMPACTION_OPTIMIZATION_INTERVAL))
        if any(v is not None for v in schedules):
            history = compaction_history(table)
        else:  # the walk back through the snapshots answers nothing these options do not ask
            history = CompactionHistory(0, None, float(snapshot_ms or 0))
        fallback = snapshot_ms or now_ms
        required = planned and full_compaction_required(table)
        scheduled = planned and not required and full_compaction_due(table, history, now_ms)
        return DueRules(history, required or scheduled, now_ms, fallback, planned,
                        _schedule_since(table, history, fallback, now_ms) if scheduled else None)


def _schedule_since(table: FileStoreTable, history: CompactionHistory, fallback_ms: int, now_ms: int) -> int:
    """When a full compaction on schedule became due: the optimisation interval's end; for
    `full-compaction.delta-commits`, the snapshot's time (the commit that reached the count is not looked for,
    so the lag is never overstated)."""
    interval = table.options.get(opts.COMPACTION_OPTIMIZATION_INTERVAL)
    start = history.last_full_ms if history.last_full_ms is not None else history.first_snapshot_ms
    if interval is not None and start is not None and now_ms - start > interval:
        return int(start + interval)
    return fallback_ms


def bucket_health(table: FileStoreTable, split: Split, rules: DueRules) -> BucketHealth:
    """A bucket's figures from its files (all levels) and its deletion vectors' cardinalities."""
    files = split.files
    postponed = split.bucket == POSTPONE_BUCKET
    pk = table.schema.is_primary_key_table
    level0 = [f for f in files if f.level == 0 or postponed]
    runs = len(level0) + len({f.level for f in files if f.level > 0}) if pk else 0
    dv = getattr(split, "dv_index", None)
    deleted = sum(r.cardinality or 0 for r in (dv.dv_ranges or ())) if dv is not None else 0
    if postponed:
        due = _oldest(level0, rules.fallback_ms) if level0 else None
    elif not rules.planned or not files:
        due = None
    else:
        due = _pk_due_since(table, split, rules) if pk else _append_due_since(table, split, rules)
        if due is not None and rules.full_since_ms is not None:
            due = max(due, rules.full_since_ms)
    return BucketHealth(split.partition, tuple(split.partition_values), split.bucket, runs, len(level0), len(files),
                        small_files(table, files), sum(f.file_size for f in files),
                        sum(f.row_count for f in files), deleted, due)


def small_files(table: FileStoreTable, files: Sequence[DataFileMeta]) -> int:
    """The files of a bucket that compaction would not have left (see the module)."""
    pk = table.schema.is_primary_key_table
    limit = table.options.compaction_file_size(pk)
    if not pk:
        return sum(f.file_size < limit for f in files) if len(files) > 1 else 0
    by_level: dict[int, int] = {}
    for f in files:
        if f.level > 0 and f.file_size < limit:
            by_level[f.level] = by_level.get(f.level, 0) + 1
    return sum(n - 1 for n in by_level.values())


def _created(f: DataFileMeta, fallback_ms: int) -> int:
    # on the clock of `now` and of snapshot times: the stored creation time is local wall-clock time
    created = f.creation_epoch_ms
    return created if created is not None else fallback_ms


def _oldest(files: Sequence[DataFileMeta], fallback_ms: int) -> int:
    return min(_created(f, fallback_ms) for f in files)


def _pk_due_since(table: FileStoreTable, split: Split, rules: DueRules) -> int | None:
    def due(files: Sequence[DataFileMeta]) -> bool:
        # a gentle lookup table's level 0 moves up only at every max-interval-th trigger the compactor counts; the
        # catalog cannot see that count, so it asks as a compactor with a fresh count would (not as `lake compact`,
        # which moves level 0 up at once): otherwise a quiet gentle table would show lag growing for good
        manager = merge_tree_manager(table, replace(split, files=tuple(files)), lambda: rules.now_ms / 1000,
                                     rules.history, with_vectors=False, triggers=TriggerCount())
        return manager.plan(rules.full) is not None

    if not due(split.files):
        return None
    upper = [f for f in split.files if f.level > 0]
    level0 = sorted((f for f in split.files if f.level == 0), key=lambda f: (_created(f, rules.fallback_ms),
                                                                            f.max_sequence_number))
    newest_upper = max((_created(f, rules.fallback_ms) for f in upper), default=None)
    # more runs than the trigger always make a pick, so the replay ends within trigger + 1 level-0 files
    for k in range(1, len(level0) + 1):
        if due(upper + level0[:k]):
            since = _created(level0[k - 1], rules.fallback_ms)
            return since if newest_upper is None else max(since, newest_upper)
    return max(_created(f, rules.fallback_ms) for f in split.files)


def _append_due_since(table: FileStoreTable, split: Split, rules: DueRules) -> int | None:
    manager = AppendCompactManager(table, split, split_dir(table, split))
    unit = manager.plan(rules.full)
    if unit is None:
        return None
    # the window is found scanning the files oldest first: it was complete once its newest file was there
    since = max(_created(f, rules.fallback_ms) for f in unit.files)
    if not rules.full and manager.too_deleted():
        # the deletes came after the files, in a commit no later than the snapshot's
        since = max(since, rules.fallback_ms)
    return since
