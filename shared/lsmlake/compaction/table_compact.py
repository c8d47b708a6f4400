"""Compacting a table: restore each bucket's levels from a snapshot, compact, commit one COMPACT snapshot.

Merge and commit are separate steps: `compact_buckets` returns file changes, `commit_compaction`
turns them into a snapshot whose conflict check fails cleanly if an input file is gone.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from .. import features
from .. import options as opts
from ..commit import CommitResult
from ..data_file_writer import bucket_dir
from ..errors import CommitStateUnknownError, InvalidInputError, NotFoundError
from ..index_manifest import dv_index_change
from ..merge.factory import dv_enabled, skips_level0
from ..predicate import Predicate
from ..scan import Split
from ..snapshot import COMPACT
from ..table import FileStoreTable
from ..table_read import load_vectors
from ..table_write import CommitMessage
from .append_compaction import AppendCompactManager
from .compact_manager import MergeTreeCompactManager
from .file_keys import FileKeys
from .full import EarlyFullCompaction
from .levels import Levels
from .lookup_compaction import DvCompactResult
from .rewriter import MergeTreeCompactRewriter
from .strategy import strategy_from_options


@dataclass
class TableCompactResult:
    """What a table compaction did: the snapshot (None when nothing was due) and per-bucket changes."""

    snapshot_id: int | None = None
    messages: list[CommitMessage] = field(default_factory=list)

    @property
    def files_before(self) -> int:
        return sum(len(m.deleted_files) for m in self.messages)

    @property
    def files_after(self) -> int:
        return sum(len(m.new_files) for m in self.messages)


def split_dir(table: FileStoreTable, split: Split) -> str:
    """The directory of a split's bucket."""
    return bucket_dir(table.path, table.schema.partition_dir(split.partition_values), split.bucket)


def restore_levels(table: FileStoreTable, split: Split) -> Levels:
    """The levels of a bucket as a snapshot left them."""
    keys = FileKeys(table.schema.types_of(table.schema.trimmed_primary_keys))
    return Levels(keys, split.files, table.options.num_levels())


FULL_COMPACTION_PROPERTY = "lsmlake.full-compaction"


@dataclass(frozen=True)
class CompactionHistory:
    """What the snapshots tell about full compactions: commits since the last one, and when it was."""

    commits_since_full: int
    last_full_ms: float | None


def compaction_history(table: FileStoreTable, lookback: int = 1000) -> CompactionHistory:
    """Walk back from the latest snapshot to the last full compaction (at most `lookback` snapshots).

    The early-full-compaction counter and the optimisation-interval clock live in the table's history,
    so a compactor restarted on another machine keeps the same schedule.
    """
    sm = table.snapshots
    latest, earliest = sm.latest_id(), sm.earliest_id()
    commits = 0
    if latest is None or earliest is None:
        return CompactionHistory(0, None)
    for sid in range(latest, max(earliest, latest - lookback) - 1, -1):
        try:
            s = sm.snapshot(sid)
        except NotFoundError:
            break
        if s.commit_kind == COMPACT and (s.properties or {}).get(FULL_COMPACTION_PROPERTY) == "true":
            return CompactionHistory(commits, s.time_millis)
        if s.commit_kind != COMPACT:
            commits += 1
    return CompactionHistory(commits, None)


def merge_tree_manager(table: FileStoreTable, split: Split, clock: Callable[[], float] = time.time,
                       history: CompactionHistory | None = None) -> MergeTreeCompactManager:
    """The compaction manager of a primary-key bucket, restored from a split and the table's history."""
    o = table.options
    history = history or compaction_history(table)
    strategy = strategy_from_options(o, clock)
    universal = getattr(strategy, "universal", strategy)
    # without a full compaction on record, the interval counts from the table's first snapshot
    first = table.snapshots.earliest_id()
    start_ms = history.last_full_ms
    if start_ms is None and first is not None:
        start_ms = table.snapshots.snapshot(first).time_millis
    universal.last_optimized_ms = start_ms
    early = EarlyFullCompaction(o.get(opts.FULL_COMPACTION_DELTA_COMMITS))
    early.commits_since_full = history.commits_since_full
    return MergeTreeCompactManager(
        restore_levels(table, split), strategy,
        MergeTreeCompactRewriter(table.io, table.schema, split_dir(table, split)),
        min_file_size=o.compaction_file_size(True), stop_trigger=o.stop_trigger(), early_full=early,
        changelog_producer=o.get(opts.CHANGELOG_PRODUCER) or "none",
        vectors=load_vectors(table.io, table.path, split.dv_index) if dv_enabled(table.schema) else None)


def compact_split(table: FileStoreTable, split: Split, full: bool = False,
                  history: CompactionHistory | None = None) -> CommitMessage | None:
    """Compact one bucket (one unit); None when nothing is due."""
    if table.schema.is_primary_key_table:
        result = merge_tree_manager(table, split, history=history).compact(full)
    else:
        result = AppendCompactManager(table, split, split_dir(table, split)).compact(full)
    if result is None or result.is_empty():
        return None
    msg = CommitMessage(split.partition, split.bucket, split.total_buckets,
                        new_files=list(result.after), deleted_files=list(result.before),
                        changelog_files=list(result.changelog))
    if isinstance(result, DvCompactResult):
        msg.new_index_files, msg.deleted_index_files = dv_index_change(table.indexes, split, result.vectors)
    return msg


def compact_buckets(table: FileStoreTable, full: bool = False,
                    partition: Predicate | Mapping[str, Any] | Sequence[Any] | None = None,
                    snapshot_id: int | None = None) -> tuple[int | None, list[CommitMessage]]:
    """Run the due compaction of every bucket (of the matching partitions); nothing is committed."""
    features.check(table.schema, table.identifier, for_write=True)
    pred = Predicate.of(partition)
    outside = sorted(pred.columns() - set(table.schema.partition_keys))
    if outside:
        # a key filter would restore a bucket's levels from only some of its files
        raise InvalidInputError(f"compaction can be restricted by partition columns only "
                                f"{list(table.schema.partition_keys)}, not {outside}")
    snapshot = table.snapshot(snapshot_id)
    if snapshot is None:
        return None, []
    messages = []
    history = compaction_history(table)
    # first-row keeps the oldest row of a key and reads raw from levels >= 1; without deletion vectors
    # (whose lookup marks the older rows), only a full compaction can guarantee one row per key.
    full = full or (skips_level0(table.schema) and not dv_enabled(table.schema))
    for split in table.new_scan(pred, snapshot, all_levels=True).plan():
        msg = compact_split(table, split, full, history)
        if msg is not None:
            messages.append(msg)
    return snapshot.id, messages


def written_files(table: FileStoreTable, messages: Sequence[CommitMessage]) -> list[str]:
    """Paths of the files compaction wrote (not the upgraded ones, which existed before)."""
    paths = []
    for m in messages:
        old = {f.file_name for f in m.deleted_files}
        split = Split(m.partition, tuple(table.partition_values(m.partition)), m.bucket, m.total_buckets, (), 0)
        directory = split_dir(table, split)
        paths.extend(f"{directory}/{f.file_name}" for f in m.new_files if f.file_name not in old)
        paths.extend(f"{directory}/{f.file_name}" for f in m.changelog_files)
        paths.extend(table.indexes.index_path(e.file_name) for e in m.new_index_files)
    return paths


def commit_compaction(table: FileStoreTable, messages: Sequence[CommitMessage],
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


def compact_table(table: FileStoreTable, full: bool = False,
                  partition: Predicate | Mapping[str, Any] | Sequence[Any] | None = None) -> TableCompactResult:
    """Compact every bucket that is due (or all, with `full`) and commit the result."""
    full = full or full_compaction_due(table, compaction_history(table))
    _, messages = compact_buckets(table, full, partition)
    if not messages:
        return TableCompactResult()
    # A full compaction of the whole table resets the early-full and optimisation schedules.
    whole = full and partition is None
    result = commit_compaction(table, messages, properties={FULL_COMPACTION_PROPERTY: "true"} if whole else None)
    return TableCompactResult(result.snapshot_id, messages)



def full_compaction_due(table: FileStoreTable, history: CompactionHistory, now_ms: float | None = None) -> bool:
    """Whether `full-compaction.delta-commits` or `compaction.optimization-interval` asks for a full compaction."""
    o = table.options
    delta = o.get(opts.FULL_COMPACTION_DELTA_COMMITS)
    if delta is not None and history.commits_since_full >= delta:
        return True
    interval = o.get(opts.COMPACTION_OPTIMIZATION_INTERVAL)
    if interval is None:
        return False
    start = history.last_full_ms
    first = table.snapshots.earliest_id()
    if start is None and first is not None:
        start = table.snapshots.snapshot(first).time_millis
    now = now_ms if now_ms is not None else time.time() * 1000
    return start is not None and now - start > interval
