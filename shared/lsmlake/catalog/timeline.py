"""The compaction timeline RPCs: plans move REQUESTED -> INFLIGHT -> COMPLETED, as Hudi's compaction plans do.

The metadata store keeps each plan's state, owner, times and the names of its input files (a unique key
keeps a file out of two pending plans, across replicas); the plan's protobuf units (input file metadata,
output level) travel with it as an opaque `detail`. Every transition that looks at the table's files
runs under the table's commit lock, so it sees the same live files a commit would.

Rollback is Hudi's: the output files a failed run left in the bucket folders (found by the plan's file
name prefix, plus any the caller names) are deleted, never a file a snapshot references; the plan then
runs again (REQUESTED), or ends ABANDONED when its inputs are gone, or ROLLED_BACK when not requeued.
"""

from __future__ import annotations

import logging
import posixpath
import uuid
from collections.abc import Sequence

from lsmlake.auth.principal import SEPARATOR, current_principal, owned
from lsmlake.auth.roles import Role
from lsmlake.catalog.commit_checks import check_file_name
from lsmlake.catalog.expire import referenced_files
from lsmlake.catalog.filesystem import FileSystemCatalog
from lsmlake.errors import InvalidInputError, NotFoundError, PermissionDeniedError
from lsmlake.format.data_file_writer import bucket_dir
from lsmlake.format.manifest import ManifestEntry
from lsmlake.metastore import ABANDONED, COMPLETED, PENDING_STATES, PLAN_STATES, ROLLED_BACK, CompactionPlan, MetaStore
from lsmlake.metastore.errors import PlanStateError
from lsmlake.proto_gen.lsmlake.v1 import catalog_pb2, common_pb2
from lsmlake.rpc.convert import table_id
from lsmlake.table.file_store_table import FileStoreTable

_log = logging.getLogger(__name__)

MAX_UNITS = 10_000
_FINAL = (COMPLETED, ROLLED_BACK, ABANDONED)


def state_to_proto(state: str) -> catalog_pb2.CompactionPlanState.ValueType:
    return catalog_pb2.CompactionPlanState.Value(f"COMPACTION_PLAN_STATE_{state}")


def state_from_proto(value: int) -> str:
    name = catalog_pb2.CompactionPlanState.Name(value) if value in catalog_pb2.CompactionPlanState.values() else ""
    state = name.removeprefix("COMPACTION_PLAN_STATE_")
    if state not in PLAN_STATES:
        raise InvalidInputError(f"plan state {value} is not one of {', '.join(PLAN_STATES)}")
    return state


def plan_to_proto(plan: CompactionPlan, ident: common_pb2.TableIdentifier) -> catalog_pb2.CompactionPlan:
    """The protobuf plan: its units from the stored detail, its life from the store's columns."""
    out = catalog_pb2.CompactionPlan.FromString(plan.detail)
    out.plan_id = str(plan.plan_id)
    out.table.CopyFrom(ident)
    out.state = state_to_proto(plan.state)
    out.owner = plan.owner or ""
    out.attempts = plan.attempts
    out.reason = plan.reason or ""
    if plan.snapshot_id is not None:
        out.committed_snapshot_id = plan.snapshot_id
    out.requested_at_ms = plan.created_ms
    out.started_at_ms = plan.started_ms or 0
    out.finished_at_ms = plan.updated_ms if plan.state in _FINAL else 0
    return out


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


def _missing_inputs(units: Sequence[catalog_pb2.CompactionUnit],
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
    """The timeline RPCs of one catalog service; `commit` is the service's own COMPACT commit under the lock."""

    def __init__(self, catalog: FileSystemCatalog, store: MetaStore) -> None:
        self.catalog = catalog
        self.store = store

    def _plan_of(self, tid: str, plan_id: int) -> CompactionPlan:
        plan = self.store.get_plan(plan_id)
        if plan.table_id != tid:
            raise NotFoundError(f"compaction plan {plan_id} does not exist for table {tid}")
        return plan

    def request(self, request: catalog_pb2.RequestCompactionRequest) -> catalog_pb2.CompactionPlan:
        tid = table_id(request.table)
        units = list(request.units)
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
                if request.full and u.output_level != max_level:
                    raise InvalidInputError(f"units[{i}]: a full compaction writes to level {max_level}, "
                                            f"not {u.output_level}")
                names += [f.file_name for f in u.input_files]
            if len(set(names)) != len(names):
                raise InvalidInputError("the plan names an input file more than once")
            missing = _missing_inputs(units, _live_by_bucket(table))
            if missing:
                raise InvalidInputError(f"{len(missing)} input file(s) are not live in the latest snapshot of "
                                        f"{tid} in the bucket the unit names: {', '.join(missing[:5])}")
            latest = table.snapshots.latest_id() or 0
            detail = catalog_pb2.CompactionPlan(
                units=units, full=request.full, base_snapshot_id=latest,
                output_file_prefix=f"data-compact-{uuid.uuid4().hex[:16]}-")
            first = units[0]
            plan_id = self.store.request_plan(tid, first.partition, first.bucket, names, first.output_level,
                                              detail=detail.SerializeToString())
            plan = self.store.get_plan(plan_id)
        _log.info("table %s: compaction plan %d REQUESTED (%d unit(s), %d file(s))", tid, plan_id, len(units),
                  len(names))
        return plan_to_proto(plan, request.table)

    def start(self, request: catalog_pb2.StartCompactionRequest) -> catalog_pb2.CompactionPlan:
        tid = table_id(request.table)
        plan_id = parse_plan_id(request.plan_id)
        if not request.owner:
            raise InvalidInputError("owner must name the compactor instance taking the plan")
        missing: list[str] = []
        with self.store.commit_lock(tid):
            plan = self._plan_of(tid, plan_id)
            units = catalog_pb2.CompactionPlan.FromString(plan.detail).units
            if plan.pending:
                missing = _missing_inputs(units, _live_by_bucket(self.catalog.get_table(tid)))
            if missing:  # the abandonment commits; the caller learns of it below
                self.store.abandon_plan(plan_id, f"input files are gone: {', '.join(missing[:5])}")
            else:
                started = self.store.start_plan(plan_id, owned(request.owner, current_principal()))
        if missing:
            raise PlanStateError(f"compaction plan {plan_id} of {tid} was abandoned: {len(missing)} of its "
                                 f"input files are no longer live ({', '.join(missing[:5])})", plan_id, ABANDONED)
        return plan_to_proto(started, request.table)

    def check_completion(self, tid: str, request: catalog_pb2.CompleteCompactionRequest) -> CompactionPlan:
        """The INFLIGHT plan a completion refers to, after checking its owner and that it only removes inputs."""
        plan = self._plan_of(tid, parse_plan_id(request.plan_id))
        if plan.state != "INFLIGHT":  # checked before anything is published
            raise PlanStateError(f"compaction plan {plan.plan_id} of {tid} is {plan.state}: only an INFLIGHT plan "
                                 "can be completed (it was rolled back or has ended)", plan.plan_id, plan.state)
        owner = owned(request.owner, current_principal())
        if plan.owner != owner:
            raise PlanStateError(f"compaction plan {plan.plan_id} of {tid} is run by {plan.owner!r}, "
                                 f"not {owner!r}", plan.plan_id, plan.state)
        inputs = set(plan.input_files)
        strays = [f.file_name for c in request.changes for f in c.deleted_files if f.file_name not in inputs]
        if strays:
            raise InvalidInputError(f"the result deletes file(s) that are not inputs of plan {plan.plan_id}: "
                                    f"{', '.join(strays[:5])}")
        return plan

    def rollback(self, request: catalog_pb2.RollbackCompactionRequest) -> tuple[catalog_pb2.CompactionPlan, list[str]]:
        tid = table_id(request.table)
        plan_id = parse_plan_id(request.plan_id)
        for i, n in enumerate(request.output_files):  # plain file names ("data-....parquet"), never paths
            check_file_name(n, f"output_files[{i}]")
        extra = list(request.output_files)
        reason = request.reason or "rolled back"
        with self.store.commit_lock(tid):
            plan = self._plan_of(tid, plan_id)
            if plan.state != "INFLIGHT":
                raise PlanStateError(f"cannot roll back compaction plan {plan_id} of {tid}: it is {plan.state}, "
                                     "and only an INFLIGHT plan can be rolled back", plan_id, plan.state)
            _check_owner(plan, tid)
            table = self.catalog.get_table(tid)
            detail = catalog_pb2.CompactionPlan.FromString(plan.detail)
            live = _live_by_bucket(table)
            deleted = self._delete_outputs(table, detail, live, set(extra))
            if not request.requeue:
                after = self.store.end_plan(plan_id, reason)
            else:
                missing = _missing_inputs(detail.units, live)
                if missing:
                    after = self.store.abandon_plan(plan_id, f"{reason}; input files are gone: "
                                                             f"{', '.join(missing[:5])}")
                else:
                    after = self.store.rollback_plan(plan_id, reason)
        _log.info("table %s: compaction plan %d rolled back to %s, %d output file(s) deleted (%s)", tid, plan_id,
                  after.state, len(deleted), reason)
        return plan_to_proto(after, request.table), deleted

    def _delete_outputs(self, table: FileStoreTable, detail: catalog_pb2.CompactionPlan,
                        live: dict[tuple[bytes, int], dict[str, ManifestEntry]], extra: set[str]) -> list[str]:
        """Delete the plan's uncommitted outputs in its buckets' folders; never a file a snapshot still uses."""
        referenced = self._referenced_names(table)
        # the run's data files, and its changelog files (`changelog-` + the run's own part of the prefix)
        prefixes = (detail.output_file_prefix, "changelog-" + detail.output_file_prefix.removeprefix("data-"))
        deleted = []
        for u in detail.units:
            folder = bucket_dir(table.path, table.schema.partition_dir(table.partition_values(u.partition)), u.bucket)
            if not table.io.is_dir(folder):
                continue
            for info in table.io.list(folder):
                name = posixpath.basename(info.path)
                ours = name.startswith(prefixes) or name in extra
                if ours and name not in live.get((u.partition, u.bucket), {}) and name not in referenced:
                    table.io.delete_quietly(info.path)
                    deleted.append(info.path)
        return deleted

    @staticmethod
    def _referenced_names(table: FileStoreTable) -> set[str]:
        return {posixpath.basename(p) for p in referenced_files(table, table.snapshots.snapshots())}

    def list(self, request: catalog_pb2.ListCompactionPlansRequest) -> list[catalog_pb2.CompactionPlan]:
        tid = table_id(request.table)
        self.catalog.get_table(tid)  # NotFoundError for an unknown table
        states = [state_from_proto(s) for s in request.states] or None
        return [plan_to_proto(p, request.table) for p in self.store.list_plans(tid, states)]


__all__ = ["PENDING_STATES", "Timeline", "parse_plan_id", "plan_to_proto", "state_from_proto", "state_to_proto"]
