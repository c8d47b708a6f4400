"""The compaction timeline: plans move REQUESTED -> INFLIGHT -> COMPLETED, as Hudi's compaction plans do.

The metadata store keeps each plan's state, owner, times and the names of its input files (a unique key
keeps a file out of two pending plans, across replicas); the plan's units (input file metadata, output
level) travel with it as an opaque `detail`, written and read by the caller's `PlanCodec` (the service
keeps its protobuf form there). Every transition that looks at the table's files runs under the table's
commit lock, so it sees the same live files a commit would.

Rollback is Hudi's: the output files a failed run left in the bucket folders (found by the plan's file
name prefix, plus any the caller names) are deleted, never a file a snapshot references; the plan then
runs again (REQUESTED), or ends ABANDONED when its inputs are gone, or ROLLED_BACK when not requeued.
"""

from __future__ import annotations

import logging
import posixpath
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

from lsmlake.auth.principal import SEPARATOR, current_principal, owned
from lsmlake.auth.roles import Role
from lsmlake.catalog.commit.catalog_commits import CommitOutcome
from lsmlake.catalog.commit.checks import check_file_name
from lsmlake.catalog.commit.request import CommitRequest
from lsmlake.catalog.filesystem import FileSystemCatalog
from lsmlake.catalog.reachability import files_reached_since
from lsmlake.errors import InvalidInputError, NotFoundError, PermissionDeniedError
from lsmlake.format.data_file_meta import DataFileMeta
from lsmlake.format.data_file_writer import bucket_dir
from lsmlake.format.manifest import ManifestEntry
from lsmlake.metastore import ABANDONED, PENDING_STATES, PLAN_STATES, CompactionPlan, MetaStore
from lsmlake.metastore.errors import PlanStateError
from lsmlake.table.file_store_table import FileStoreTable
from lsmlake.table.write import CommitMessage

_log = logging.getLogger(__name__)

MAX_UNITS = 10_000


@dataclass(frozen=True)
class PlanUnit:
    """One bucket of a plan: the files to merge, exactly as the manifest holds them, and where the result goes.

    `drop_delete` says retraction rows may be dropped (the output goes to the highest level).
    """

    partition: bytes
    bucket: int
    total_buckets: int
    input_files: Sequence[DataFileMeta]
    output_level: int
    drop_delete: bool = False


@dataclass(frozen=True)
class PlanDetail:
    """What a plan compacts, kept with it: its units, the newest snapshot when it was made, and the name
    prefix of the files its runs write (a rollback finds a dead run's outputs by it)."""

    units: Sequence[PlanUnit]
    full: bool
    base_snapshot_id: int
    output_file_prefix: str


#: runs a commit with a plan check (see `CatalogCommits.commit`)
CommitRunner = Callable[[CommitRequest, Callable[[], CompactionPlan]], CommitOutcome]


class PlanCodec(Protocol):
    """The stored form of a `PlanDetail` (the metadata store keeps it as bytes)."""

    def encode(self, detail: PlanDetail) -> bytes: ...

    def decode(self, data: bytes) -> PlanDetail: ...


def check_plan_state(state: str) -> str:
    """InvalidInputError unless `state` is a plan state."""
    if state not in PLAN_STATES:
        raise InvalidInputError(f"plan state {state or '?'} is not one of {', '.join(PLAN_STATES)}")
    return state


def parse_plan_id(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = -1
    if not 1 <= value < 2**63 or str(value) != text:  # the store keeps plan ids as 64-bit integers
        raise InvalidInputError(f"plan_id {text!r} is not a plan id (a positive 64-bit number as text)")
    return value


def _live_by_bucket(table: FileStoreTable) -> dict[tuple[bytes, int], dict[str, ManifestEntry]]:
    """The live data files of the latest snapshot, by (partition, bucket) and file name."""
    snap = table.snapshots.latest()
    out: dict[tuple[bytes, int], dict[str, ManifestEntry]] = {}
    if snap is None:
        return out
    for e in table.manifests.live(snap.base_manifest_list, snap.delta_manifest_list).values():
        out.setdefault((e.partition, e.bucket), {})[e.file.file_name] = e
    return out


def _missing_inputs(units: Sequence[PlanUnit],
                    live: dict[tuple[bytes, int], dict[str, ManifestEntry]]) -> list[str]:
    return [f.file_name for u in units for f in u.input_files
            if f.file_name not in live.get((u.partition, u.bucket), {})]


def _check_owner(plan: CompactionPlan, tid: str) -> None:
    """PermissionDeniedError unless the caller's principal runs the plan (any instance of it) or is an admin.

    A compactor recovering from a crash rolls back the plans its dead instances left INFLIGHT: the same
    principal, another owner. Another principal's plan is not the caller's to undo.
    """
    principal = current_principal()
    if principal is None or principal.role >= Role.ADMIN or (plan.owner or "").startswith(principal.name + SEPARATOR):
        return
    raise PermissionDeniedError(f"compaction plan {plan.plan_id} of {tid} is run by {plan.owner!r}, not by "
                                f"{principal.name}: only its principal or an admin may roll it back; nothing changed")


class Timeline:
    """The compaction timeline of one catalog: plans move under the table's commit lock; `complete` commits."""

    def __init__(self, catalog: FileSystemCatalog, store: MetaStore, codec: PlanCodec) -> None:
        self.catalog = catalog
        self.store = store
        self.codec = codec

    def _plan_of(self, tid: str, plan_id: int) -> CompactionPlan:
        plan = self.store.plans.get_plan(plan_id)
        if plan.table_id != tid:
            raise NotFoundError(f"compaction plan {plan_id} does not exist for table {tid}")
        return plan

    def request(self, tid: str, units: Sequence[PlanUnit], full: bool) -> CompactionPlan:
        """Record a REQUESTED plan of live input files (each in one pending plan at most)."""
        if not units:
            raise InvalidInputError("units must not be empty: a plan compacts at least one bucket")
        if len(units) > MAX_UNITS:
            raise InvalidInputError(f"units has {len(units)} entries; at most {MAX_UNITS}")
        with self.store.commit_lock(tid):
            table = self.catalog.get_table(tid)
            max_level = table.options.num_levels() - 1
            names: list[str] = []
            for i, u in enumerate(units):
                if not u.input_files:
                    raise InvalidInputError(f"units[{i}] has no input_files")
                if not 0 <= u.output_level <= max_level:
                    raise InvalidInputError(f"units[{i}].output_level {u.output_level} is outside 0..{max_level} "
                                            f"(num-levels is {max_level + 1})")
                if full and u.output_level != max_level:
                    raise InvalidInputError(f"units[{i}]: a full compaction writes to level {max_level}, "
                                            f"not {u.output_level}")
                names += [f.file_name for f in u.input_files]
            if len(set(names)) != len(names):
                raise InvalidInputError("the plan names an input file more than once")
            missing = _missing_inputs(units, _live_by_bucket(table))
            if missing:
                raise InvalidInputError(f"{len(missing)} input file(s) are not live in the latest snapshot of "
                                        f"{tid} in the bucket the unit names: {', '.join(missing[:5])}")
            detail = PlanDetail(units, full, table.snapshots.latest_id() or 0,
                                f"data-compact-{uuid.uuid4().hex[:16]}-")
            first = units[0]
            plan_id = self.store.plans.request_plan(tid, first.partition, first.bucket, names, first.output_level,
                                                    detail=self.codec.encode(detail))
            plan = self.store.plans.get_plan(plan_id)
        _log.info("table %s: compaction plan %d REQUESTED (%d unit(s), %d file(s))", tid, plan_id, len(units),
                  len(names))
        return plan

    def start(self, tid: str, plan_id: int, owner: str) -> CompactionPlan:
        """The plan INFLIGHT, run by `owner` (in the caller's namespace); ABANDONED when its inputs are gone."""
        if not owner:
            raise InvalidInputError("owner must name the compactor instance taking the plan")
        missing: list[str] = []
        with self.store.commit_lock(tid):
            plan = self._plan_of(tid, plan_id)
            units = self.codec.decode(plan.detail).units
            if plan.pending:
                missing = _missing_inputs(units, _live_by_bucket(self.catalog.get_table(tid)))
            if missing:  # the abandonment commits; the caller learns of it below
                self.store.plans.abandon_plan(plan_id, f"input files are gone: {', '.join(missing[:5])}")
            else:
                started = self.store.plans.start_plan(plan_id, owned(owner, current_principal()))
        if missing:
            raise PlanStateError(f"compaction plan {plan_id} of {tid} was abandoned: {len(missing)} of its "
                                 f"input files are no longer live ({', '.join(missing[:5])})", plan_id, ABANDONED)
        return started

    def check_completion(self, tid: str, plan_id: int, owner: str,
                         changes: Sequence[CommitMessage]) -> CompactionPlan:
        """The INFLIGHT plan a completion refers to, after checking its owner and that it only removes inputs."""
        plan = self._plan_of(tid, plan_id)
        if plan.state != "INFLIGHT":  # checked before anything is published
            raise PlanStateError(f"compaction plan {plan.plan_id} of {tid} is {plan.state}: only an INFLIGHT plan "
                                 "can be completed (it was rolled back or has ended)", plan.plan_id, plan.state)
        runner = owned(owner, current_principal())
        if plan.owner != runner:
            raise PlanStateError(f"compaction plan {plan.plan_id} of {tid} is run by {plan.owner!r}, "
                                 f"not {runner!r}", plan.plan_id, plan.state)
        inputs = set(plan.input_files)
        strays = [f.file_name for c in changes for f in c.deleted_files if f.file_name not in inputs]
        if strays:
            raise InvalidInputError(f"the result deletes file(s) that are not inputs of plan {plan.plan_id}: "
                                    f"{', '.join(strays[:5])}")
        return plan

    def complete(self, commit: CommitRunner, request: CommitRequest, plan_id: int,
                 owner: str) -> tuple[CommitOutcome, CompactionPlan]:
        """Commit a plan's result as a COMPACT snapshot and mark the plan COMPLETED in the same transaction.

        `commit` is `CatalogCommits.commit` (or a wrapper of it). A resend of a completion is answered with
        its snapshot, unless that snapshot did not complete the plan.
        """
        tid = request.table_id
        outcome = commit(request, self._completion_check(tid, plan_id, owner, request.changes))
        plan = self.store.plans.get_plan(plan_id)
        if outcome.already_committed and plan.snapshot_id != outcome.snapshot_id:
            raise PlanStateError(f"commit ({request.commit_user!r}, {request.identifier}) was already "
                                 f"committed as snapshot {outcome.snapshot_id}, which did not complete plan "
                                 f"{plan_id}", plan_id, plan.state)
        if plan.attempts > 1 and not outcome.already_committed:
            self._sweep_dead_runs(tid, plan)
        return outcome, plan

    def _sweep_dead_runs(self, tid: str, plan: CompactionPlan) -> None:
        """Delete what earlier runs of a completed plan wrote and this run did not commit.

        A killed compactor's Spark tasks can outlive it and finish writing after the next owner's rollback listed
        the buckets' folders; only this plan writes files of its prefix, and it has ended, so every such file no
        snapshot names is a dead run's. The commit stands whatever happens here: a file left is an orphan.
        """
        try:
            table = self.catalog.get_table(tid)
            detail = self.codec.decode(plan.detail)
            deleted = self._delete_outputs(table, detail, _live_by_bucket(table), set())
        except Exception as e:  # noqa: BLE001 - the plan is committed; what is left is orphan cleanup's
            _log.warning("table %s: the files earlier runs of plan %d left could not be swept: %s",
                         tid, plan.plan_id, e)
            return
        if deleted:
            _log.info("table %s: plan %d's earlier runs left %d file(s), deleted", tid, plan.plan_id, len(deleted))

    def _completion_check(self, tid: str, plan_id: int, owner: str,
                          changes: Sequence[CommitMessage]) -> Callable[[], CompactionPlan]:
        return lambda: self.check_completion(tid, plan_id, owner, changes)

    def rollback(self, tid: str, plan_id: int, reason: str, requeue: bool,
                 output_files: Sequence[str]) -> tuple[CompactionPlan, list[str]]:
        """Delete a dead run's outputs, then requeue the plan (ABANDONED when its inputs are gone) or end it."""
        for i, n in enumerate(output_files):  # plain file names ("data-....parquet"), never paths
            check_file_name(n, f"output_files[{i}]")
        reason = reason or "rolled back"
        with self.store.commit_lock(tid):
            plan = self._plan_of(tid, plan_id)
            if plan.state != "INFLIGHT":
                raise PlanStateError(f"cannot roll back compaction plan {plan_id} of {tid}: it is {plan.state}, "
                                     "and only an INFLIGHT plan can be rolled back", plan_id, plan.state)
            _check_owner(plan, tid)
            table = self.catalog.get_table(tid)
            detail = self.codec.decode(plan.detail)
            live = _live_by_bucket(table)
            deleted = self._delete_outputs(table, detail, live, set(output_files))
            if not requeue:
                after = self.store.plans.end_plan(plan_id, reason)
            else:
                missing = _missing_inputs(detail.units, live)
                if missing:
                    after = self.store.plans.abandon_plan(plan_id, f"{reason}; input files are gone: "
                                                             f"{', '.join(missing[:5])}")
                else:
                    after = self.store.plans.rollback_plan(plan_id, reason)
        _log.info("table %s: compaction plan %d rolled back to %s, %d output file(s) deleted (%s)", tid, plan_id,
                  after.state, len(deleted), reason)
        return after, deleted

    def _delete_outputs(self, table: FileStoreTable, detail: PlanDetail,
                        live: dict[tuple[bytes, int], dict[str, ManifestEntry]], extra: set[str]) -> list[str]:
        """Delete the plan's uncommitted outputs in its buckets' folders; never a file a snapshot still uses."""
        # the run's data files, and its changelog files (`changelog-` + the run's own part of the prefix)
        prefixes = (detail.output_file_prefix, "changelog-" + detail.output_file_prefix.removeprefix("data-"))
        candidates = []
        for u in detail.units:
            folder = bucket_dir(table.path, table.schema.partition_dir(table.partition_values(u.partition)), u.bucket)
            if not table.io.is_dir(folder):
                continue
            for info in table.io.list(folder):
                name = posixpath.basename(info.path)
                if (name.startswith(prefixes) or name in extra) and name not in live.get((u.partition, u.bucket), {}):
                    candidates.append(info.path)
        if not candidates:  # the usual sweep after a completion: no snapshot need be read
            return []
        referenced = files_reached_since(table, detail.base_snapshot_id)  # the run's files are all newer
        deleted = [p for p in candidates if posixpath.basename(p) not in referenced]
        for path in deleted:
            table.io.delete_quietly(path)
        return deleted

    def list(self, tid: str | None, states: Sequence[str] | None) -> list[CompactionPlan]:
        """The table's plans, oldest request first; only those in `states` when given. `tid` None: every table's
        plans in `states`, which must then be given (every plan of every table is the whole history)."""
        if tid is None:
            if not states:
                raise InvalidInputError("listing the compaction plans of every table needs the states to list "
                                        "(or name a table)")
            return self.store.plans.plans_in_states([check_plan_state(s) for s in states])
        self.catalog.get_table(tid)  # NotFoundError for an unknown table
        return self.store.plans.list_plans(tid, [check_plan_state(s) for s in states] if states else None)


__all__ = ["PENDING_STATES", "CommitRunner", "PlanCodec", "PlanDetail", "PlanUnit", "Timeline", "check_plan_state",
           "parse_plan_id"]
