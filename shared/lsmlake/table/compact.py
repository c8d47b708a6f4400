"""Compacting a table: restore each bucket's levels from a snapshot, compact, commit one COMPACT snapshot.

Merge and commit are separate steps: `compact_buckets` returns file changes, `commit_compaction`
turns them into a snapshot whose conflict check fails cleanly if an input file is gone.
"""

from __future__ import annotations

import concurrent.futures
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from lsmlake.errors import CommitStateUnknownError, InvalidInputError, NotFoundError
from lsmlake.format import options as opts
from lsmlake.format.data_file_writer import bucket_dir
from lsmlake.format.index_manifest import dv_index_change
from lsmlake.format.predicate import Predicate
from lsmlake.format.snapshot import COMPACT, Snapshot
from lsmlake.mergetree.compact.force_up_level0 import TriggerCount
from lsmlake.mergetree.compact.full import EarlyFullCompaction
from lsmlake.mergetree.compact.lookup import DvCompactResult
from lsmlake.mergetree.compact.manager import MergeTreeCompactManager
from lsmlake.mergetree.compact.rewriter import DATA_PREFIX, MergeTreeCompactRewriter
from lsmlake.mergetree.compact.strategy import CompactStrategy, strategy_from_options
from lsmlake.mergetree.compact.unit import CompactUnit
from lsmlake.mergetree.file_keys import FileKeys
from lsmlake.mergetree.levels import Levels
from lsmlake.mergetree.merge.factory import dv_enabled, skips_level0
from lsmlake.table import features
from lsmlake.table.append_compaction import AppendCompactManager
from lsmlake.table.commit import CommitResult
from lsmlake.table.file_store import FileStore
from lsmlake.table.read import load_vectors
from lsmlake.table.scan import Split
from lsmlake.table.write import CommitMessage


@dataclass
class TableCompactResult:
    """What a table compaction did: the snapshot (None when nothing was due) and per-bucket changes."""

    snapshot_id: int | None = None
    messages: list[CommitMessage] = field(default_factory=list)

    def __repr__(self) -> str:  # the messages name every file: a repr of them runs to pages
        return (f"TableCompactResult(snapshot_id={self.snapshot_id}, buckets={len(self.messages)}, "
                f"files_before={self.files_before}, files_after={self.files_after})")

    @property
    def files_before(self) -> int:
        return sum(len(m.deleted_files) for m in self.messages)

    @property
    def files_after(self) -> int:
        return sum(len(m.new_files) for m in self.messages)


def split_dir(table: FileStore, split: Split) -> str:
    """The directory of a split's bucket."""
    return bucket_dir(table.path, table.schema.partition_dir(split.partition_values), split.bucket)


def restore_levels(table: FileStore, split: Split) -> Levels:
    """The levels of a bucket as a snapshot left them."""
    keys = FileKeys(table.schema.types_of(table.schema.trimmed_primary_keys))
    return Levels(keys, split.files, table.options.num_levels())


FULL_COMPACTION_PROPERTY = "lsmlake.full-compaction"


@dataclass(frozen=True)
class CompactionHistory:
    """What the snapshots tell about full compactions: commits since the last one, and when it was."""

    commits_since_full: int
    last_full_ms: float | None
    #: when the table's first snapshot was made, where no full compaction is on record (the optimisation interval
    #: counts from it); found once here, so that each bucket's manager does not look for it again
    first_snapshot_ms: float | None = None


def compaction_history(table: FileStore, lookback: int = 1000, latest: Snapshot | None = None) -> CompactionHistory:
    """Walk back from the latest snapshot (`latest`, when the caller has just read it) to the last full compaction
    (at most `lookback` snapshots).

    The early-full-compaction counter and the optimisation-interval clock live in the table's history,
    so a compactor restarted on another machine keeps the same schedule. Snapshot ids have no gaps, so the walk
    ends at the first one that is gone (expired) without looking for the earliest first.
    """
    sm = table.snapshots
    if latest is None:
        latest = sm.latest()
    if latest is None:
        return CompactionHistory(0, None)
    commits = 0
    first_ms: float | None = None
    for sid in range(latest.id, max(0, latest.id - lookback - 1), -1):
        if sid == latest.id:
            s = latest
        else:
            try:
                s = sm.snapshot(sid)
            except NotFoundError:  # expired: the one after it is the earliest
                break
        if s.commit_kind == COMPACT and (s.properties or {}).get(FULL_COMPACTION_PROPERTY) == "true":
            return CompactionHistory(commits, s.time_millis)
        if s.commit_kind != COMPACT:
            commits += 1
        first_ms = s.time_millis
    else:
        if sid > 1:  # the walk stopped at `lookback`, before the earliest snapshot: look it up
            first_ms = _first_snapshot_ms(table)
    return CompactionHistory(commits, None, first_ms)


def _first_snapshot_ms(table: FileStore) -> float | None:
    """When the table's earliest snapshot was made; None for a table without snapshots."""
    first = table.snapshots.earliest_id()
    if first is None:
        return None
    try:
        return table.snapshots.snapshot(first).time_millis
    except NotFoundError:  # expired since: the next one is as good a start
        return None


def _interval_start_ms(table: FileStore, history: CompactionHistory) -> float | None:
    """Where the optimisation interval counts from: the last full compaction, else the table's first snapshot."""
    if history.last_full_ms is not None:
        return history.last_full_ms
    if history.first_snapshot_ms is not None:
        return history.first_snapshot_ms
    return _first_snapshot_ms(table)


def merge_tree_manager(table: FileStore, split: Split, clock: Callable[[], float] = time.time,
                       history: CompactionHistory | None = None, *, with_vectors: bool = True,
                       triggers: TriggerCount | None = None) -> MergeTreeCompactManager:
    """The compaction manager of a primary-key bucket, restored from a split and the table's history.

    `with_vectors=False` skips reading the bucket's deletion vectors: enough for planning, not for running.
    `triggers` is the bucket's count of plannings for `lookup-compact = gentle` (see `strategy_from_options`).
    """
    o = table.options
    history = history or compaction_history(table)
    strategy = strategy_from_options(o, clock, triggers)
    universal: Any = getattr(strategy, "universal", strategy)  # force-up-level-0 wraps the universal strategy
    universal.last_optimized_ms = _interval_start_ms(table, history)
    early = EarlyFullCompaction(o.get(opts.FULL_COMPACTION_DELTA_COMMITS))
    early.commits_since_full = history.commits_since_full
    return bucket_manager(table, split, strategy, early, with_vectors=with_vectors)


def bucket_manager(table: FileStore, split: Split, strategy: CompactStrategy,
                   early_full: EarlyFullCompaction | None = None, file_prefix: str = DATA_PREFIX,
                   with_vectors: bool = True) -> MergeTreeCompactManager:
    """The compaction manager of a primary-key bucket with a given strategy; its new data files start with
    `file_prefix`."""
    o = table.options
    vectors = load_vectors(table.io, table.path, split.dv_index) if with_vectors and dv_enabled(table.schema) else None
    return MergeTreeCompactManager(
        restore_levels(table, split), strategy,
        MergeTreeCompactRewriter(table.io, table.schema, split_dir(table, split), file_prefix,
                                 dict(zip(table.schema.partition_keys, split.partition_values, strict=True))),
        min_file_size=o.compaction_file_size(True), stop_trigger=o.stop_trigger(), early_full=early_full,
        changelog_producer=o.get(opts.CHANGELOG_PRODUCER), vectors=vectors)


def full_compaction_required(table: FileStore) -> bool:
    """Whether every compaction of the table must be full.

    First-row keeps the oldest row of a key and reads raw from levels >= 1; without deletion vectors
    (whose lookup marks the older rows), only a full compaction can guarantee one row per key.
    """
    return skips_level0(table.schema) and not dv_enabled(table.schema)


def plan_bucket(table: FileStore, split: Split, full: bool = False,
                history: CompactionHistory | None = None, triggers: TriggerCount | None = None) -> CompactUnit | None:
    """The unit `compact_split` would run for a bucket now (None when nothing is due); reads no data file.

    The plan is what `run_planned` takes: the unit's file names in order, its output level, and
    `full or unit.file_rewrite`. `triggers`: the bucket's gentle lookup-compact count, kept by the caller.
    """
    full = full or full_compaction_required(table)
    if table.schema.is_primary_key_table:
        return merge_tree_manager(table, split, history=history, with_vectors=False, triggers=triggers).plan(full)
    return AppendCompactManager(table, split, split_dir(table, split)).plan(full)


def _unit_of(split: Split, unit_file_names: Sequence[str], output_level: int, full: bool) -> CompactUnit:
    """The unit named by a plan, with the files as the split has them."""
    names = list(unit_file_names)
    if not names:
        raise InvalidInputError("unit_file_names: a compaction unit needs at least one file")
    if len(set(names)) != len(names):
        raise InvalidInputError(f"unit_file_names: a file is named twice in {names}")
    by_name = {f.file_name: f for f in split.files}
    missing = [n for n in names if n not in by_name]
    if missing:
        raise NotFoundError(f"files {missing} are not in bucket {split.bucket} at snapshot {split.snapshot_id}")
    files = tuple(by_name[n] for n in names)
    # A full compaction's unit whose files already sit on its output level is a lone max-level run
    # whose files hold retractions: they are rewritten one by one (see pick_full_compaction).
    return CompactUnit(output_level, files, file_rewrite=full and all(f.level == output_level for f in files))


def run_planned(table: FileStore, split: Split, unit_file_names: Sequence[str], output_level: int,
                full: bool, file_prefix: str = DATA_PREFIX) -> CommitMessage | None:
    """Run one planned unit of a bucket; the changes still have to be committed. None when nothing changed.

    Args:
        split: the bucket at the snapshot the unit was planned on (all levels).
        unit_file_names: the unit's files, in the unit's order; each one of the split's files.
        output_level: the unit's output level (0 for append tables).
        full: `full or unit.file_rewrite` of the plan; a full unit whose files all sit on the output
            level rewrites them one by one.
        file_prefix: how the name of every data file it writes starts; changelog files start with
            `changelog_prefix(file_prefix)`; upgraded files keep their names; deletion-vector index
            files are named by the index store.

    Raises:
        NotFoundError: a named file is not in the split.
        InvalidInputError: no file, a file named twice, a bad prefix, or a level outside the table's.
    """
    features.check(table.schema, table.identifier, for_write=True, compaction=True)
    if not file_prefix or "/" in file_prefix:
        raise InvalidInputError(f"file_prefix must be a non-empty file-name prefix, got {file_prefix!r}")
    unit = _unit_of(split, unit_file_names, output_level, full)
    if table.schema.is_primary_key_table:
        manager = bucket_manager(table, split, strategy_from_options(table.options), file_prefix=file_prefix)
        if not 0 <= output_level <= manager.levels.max_level:
            raise InvalidInputError(f"output_level {output_level} is outside 0..{manager.levels.max_level}")
        result = None if unit.is_noop() else manager.run(unit)
    else:
        if output_level != 0:
            raise InvalidInputError(f"output_level of an append table's unit must be 0, got {output_level}")
        result = AppendCompactManager(table, split, split_dir(table, split), file_prefix).run(unit)
    if result is None or result.is_empty():
        return None
    msg = CommitMessage(split.partition, split.bucket, split.total_buckets,
                        new_files=list(result.after), deleted_files=list(result.before),
                        changelog_files=list(result.changelog))
    if isinstance(result, DvCompactResult):
        msg.new_index_files, msg.deleted_index_files = dv_index_change(table.indexes, split, result.vectors)
    return msg


def compact_split(table: FileStore, split: Split, full: bool = False,
                  history: CompactionHistory | None = None) -> CommitMessage | None:
    """Compact one bucket (one unit); None when nothing is due."""
    unit = plan_bucket(table, split, full, history)
    if unit is None:
        return None
    return run_planned(table, split, [f.file_name for f in unit.files], unit.output_level,
                       full or unit.file_rewrite)


def compact_buckets(table: FileStore, full: bool = False,
                    partition: Predicate | Mapping[str, Any] | Sequence[Any] | None = None,
                    snapshot_id: int | None = None) -> tuple[int | None, list[CommitMessage]]:
    """Run the due compaction of every bucket (of the matching partitions); nothing is committed."""
    features.check(table.schema, table.identifier, for_write=True, compaction=True)
    pred = Predicate.of(partition)
    outside = sorted(pred.columns() - set(table.schema.partition_keys))
    if outside:
        # a key filter would restore a bucket's levels from only some of its files
        raise InvalidInputError(f"compaction can be restricted by partition columns only "
                                f"{list(table.schema.partition_keys)}, not {outside}")
    snapshot = table.snapshot(snapshot_id)
    if snapshot is None:
        return None, []
    history = compaction_history(table, latest=snapshot if snapshot_id is None else None)
    splits = table.new_scan(pred, snapshot, all_levels=True).plan()
    return snapshot.id, _compact_concurrently(table, splits, full, history)


BUCKETS_AT_ONCE = 2


def _compact_concurrently(table: FileStore, splits: Sequence[Split], full: bool,
                          history: CompactionHistory) -> list[CommitMessage]:
    """The buckets compacted BUCKETS_AT_ONCE at a time, messages in split order.

    Inside a bucket decoding and taking use every core, but the sort and the Parquet encoding of the merged rows
    run on one thread: a second bucket fills the other core meanwhile; on an object store one bucket's requests
    (its inputs fetched at once, its outputs uploaded) also overlap the other's work. At most that many buckets'
    rows are held.
    """
    with concurrent.futures.ThreadPoolExecutor(BUCKETS_AT_ONCE, thread_name_prefix="lsmlake-compact") as pool:
        futures = [pool.submit(compact_split, table, split, full, history) for split in splits]
        try:
            results = [f.result() for f in futures]
        except BaseException:
            for f in futures:
                f.cancel()
            concurrent.futures.wait(futures)
            # the buckets that did compact wrote files no commit will name
            done = [m for f in futures if not f.cancelled() and f.exception() is None
                    for m in [f.result()] if m is not None]
            for path in written_files(table, done):
                table.io.delete_quietly(path)
            raise
    return [m for m in results if m is not None]


def written_files(table: FileStore, messages: Sequence[CommitMessage]) -> list[str]:
    """Paths of the files compaction wrote (not the upgraded ones, which existed before)."""
    paths: list[str] = []
    for m in messages:
        old = {f.file_name for f in m.deleted_files}
        split = Split(m.partition, tuple(table.partition_values(m.partition)), m.bucket, m.total_buckets, (), 0)
        directory = split_dir(table, split)
        paths.extend(f"{directory}/{f.file_name}" for f in m.new_files if f.file_name not in old)
        paths.extend(f"{directory}/{f.file_name}" for f in m.changelog_files)
        paths.extend(table.indexes.index_path(e.file_name) for e in m.new_index_files)
    return paths


def commit_compaction(table: FileStore, messages: Sequence[CommitMessage],
                      commit_user: str | None = None, identifier: int | None = None,
                      properties: dict[str, str] | None = None) -> CommitResult:
    """Commit compaction changes as one COMPACT snapshot; on a definite failure its new files are deleted."""
    commit = table.new_commit(commit_user)
    try:
        if identifier is None:
            return commit.commit(messages, kind=COMPACT, properties=properties)
        return commit.commit(messages, kind=COMPACT, identifier=identifier, properties=properties)
    except CommitStateUnknownError:
        raise
    except BaseException:
        for p in written_files(table, messages):
            table.io.delete_quietly(p)
        raise


def compact_table(table: FileStore, full: bool = False,
                  partition: Predicate | Mapping[str, Any] | Sequence[Any] | None = None) -> TableCompactResult:
    """Compact every bucket that is due (or all, with `full`) and commit the result.

    A postpone-bucket table first has the postponed rows of those partitions placed in buckets, in a COMPACT
    commit of its own.
    """
    from lsmlake.table.postpone import is_postpone, place

    placed: TableCompactResult | None = None
    if is_postpone(table.schema):
        moved = place(table, partitions=Predicate.of(partition))
        if moved:
            placed = TableCompactResult(commit_compaction(table, moved).snapshot_id, moved)
    full = full or full_compaction_due(table, compaction_history(table))
    _, messages = compact_buckets(table, full, partition)
    if not messages:
        return placed or TableCompactResult()
    # A full compaction of the whole table resets the early-full and optimisation schedules.
    whole = full and partition is None
    result = commit_compaction(table, messages, properties={FULL_COMPACTION_PROPERTY: "true"} if whole else None)
    return TableCompactResult(result.snapshot_id, messages)


def full_compaction_due(table: FileStore, history: CompactionHistory, now_ms: float | None = None) -> bool:
    """Whether `full-compaction.delta-commits` or `compaction.optimization-interval` asks for a full compaction."""
    o = table.options
    delta = o.get(opts.FULL_COMPACTION_DELTA_COMMITS)
    if delta is not None and history.commits_since_full >= delta:
        return True
    interval = o.get(opts.COMPACTION_OPTIMIZATION_INTERVAL)
    if interval is None:
        return False
    start = _interval_start_ms(table, history)
    now = now_ms if now_ms is not None else time.time() * 1000
    return start is not None and now - start > interval
