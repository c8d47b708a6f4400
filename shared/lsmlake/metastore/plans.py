"""The compaction plan tables (`store.plans`): plans and their states, with the unique key that keeps pending plans
disjoint; the catalog's `timeline` moves plans through these states."""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from typing import Any

from lsmlake.errors import InvalidInputError, NotFoundError
from lsmlake.metastore.checks import check_bytes, check_int, check_table_id, chunks, marks
from lsmlake.metastore.errors import PlanConflictError, PlanStateError
from lsmlake.metastore.model import (
    ABANDONED,
    COMPLETED,
    INFLIGHT,
    PENDING_STATES,
    PLAN_STATES,
    REQUESTED,
    ROLLED_BACK,
    CompactionPlan,
)
from lsmlake.metastore.transactions import Session, StoreTables, now_ms

_PLAN_COLUMNS = ("plan_id, table_id, partition_bytes, bucket, input_files, output_level, state, owner, attempts, "
                 "snapshot_id, reason, created_ms, updated_ms, started_ms, detail")


class CompactionPlans(StoreTables):
    """The plan tables of the store."""

    def request_plan(self, table_id: str, partition: bytes, bucket: int, input_files: Sequence[str],
                     output_level: int, detail: bytes = b"") -> int:
        """Add a REQUESTED plan; PlanConflictError (nothing added) when an input file is in a pending plan.

        `detail` is kept as given and handed back on the plan (the store does not read it).
        """
        check_table_id(table_id)
        detail = check_bytes(detail, "plan detail")
        partition = check_bytes(partition, "partition")
        check_int(bucket, "bucket")
        check_int(output_level, "output level", 0)
        if isinstance(input_files, str) or not input_files:
            raise InvalidInputError("input files must be a non-empty list of file names")
        files = list(input_files)
        if not all(isinstance(f, str) and f for f in files):
            raise InvalidInputError("input files must be non-empty strings")
        if len(set(files)) != len(files):
            raise InvalidInputError("input files name a file more than once")
        with self._tx(write=True) as tx:
            taken = self._pending_holders(tx, table_id, files)
            if taken:
                raise self._conflict(table_id, taken)
            ts = now_ms()
            tx.run("SAVEPOINT lsmlake_plan")
            try:
                plan_id = tx.insert_returning_id(
                    "INSERT INTO lsmlake_plans (table_id, partition_bytes, bucket, input_files, output_level, state, "
                    "attempts, created_ms, updated_ms, detail) VALUES (?, ?, ?, ?, ?, ?, 0, ?, ?, ?) RETURNING plan_id",
                    (table_id, partition, bucket, json.dumps(files), output_level, REQUESTED, ts, ts, detail))
                for f in files:
                    tx.run("INSERT INTO lsmlake_plan_files (table_id, file_name, plan_id) VALUES (?, ?, ?)",
                           (table_id, f, plan_id))
            except tx.integrity_errors as e:
                tx.run("ROLLBACK TO SAVEPOINT lsmlake_plan")
                raise PlanConflictError(f"input files of the new plan for table {table_id!r} were planned by "
                                        "another plan at the same moment; nothing was added") from e
            tx.run("RELEASE SAVEPOINT lsmlake_plan")
            return plan_id

    def _pending_holders(self, tx: Session, table_id: str, files: Sequence[str]) -> dict[str, int]:
        held: dict[str, int] = {}
        for chunk in chunks(files):
            for name, plan_id in tx.run(f"SELECT file_name, plan_id FROM lsmlake_plan_files WHERE "
                                        f"table_id = ? AND file_name IN ({marks(len(chunk))})",
                                        (table_id, *chunk)).fetchall():
                held[name] = int(plan_id)
        return held

    @staticmethod
    def _conflict(table_id: str, taken: dict[str, int]) -> PlanConflictError:
        shown = ", ".join(f"{f} (plan {p})" for f, p in sorted(taken.items())[:5])
        more = f" and {len(taken) - 5} more" if len(taken) > 5 else ""
        return PlanConflictError(f"{len(taken)} input file(s) of table {table_id!r} are already in a pending "
                                 f"compaction plan: {shown}{more}; nothing was added", taken)

    def start_plan(self, plan_id: int, owner: str) -> CompactionPlan:
        """REQUESTED -> INFLIGHT, run by `owner` (a compactor id); the plan as started."""
        if not isinstance(owner, str) or not owner:
            raise InvalidInputError(f"owner {owner!r} must be a non-empty string")
        return self._transition(plan_id, (REQUESTED,), INFLIGHT, "start",
                                "owner = ?, attempts = attempts + 1, started_ms = ?", (owner, now_ms()))

    def complete_plan(self, plan_id: int, snapshot_id: int) -> CompactionPlan:
        """INFLIGHT -> COMPLETED by the COMPACT snapshot that committed its outputs (repeating it is a no-op)."""
        check_int(snapshot_id, "snapshot id", 1)
        with self._tx(write=True) as tx:
            plan = self._get_plan(tx, plan_id)
            if plan.state == COMPLETED and plan.snapshot_id == snapshot_id:
                return plan
            return self._transition(plan_id, (INFLIGHT,), COMPLETED, "complete", "snapshot_id = ?", (snapshot_id,))

    def rollback_plan(self, plan_id: int, reason: str | None = None) -> CompactionPlan:
        """INFLIGHT -> REQUESTED, to run again (the caller deletes the outputs the failed run left behind).

        The owner stays recorded as the one that last ran the plan.
        """
        return self._transition(plan_id, (INFLIGHT,), REQUESTED, "roll back", "reason = ?", (reason,))

    def end_plan(self, plan_id: int, reason: str) -> CompactionPlan:
        """INFLIGHT -> ROLLED_BACK: undone and not to run again, releasing its input files (repeating is a no-op)."""
        if not isinstance(reason, str) or not reason:
            raise InvalidInputError("a rolled-back plan needs a reason")
        with self._tx(write=True) as tx:
            plan = self._get_plan(tx, plan_id)
            if plan.state == ROLLED_BACK:
                return plan
            return self._transition(plan_id, (INFLIGHT,), ROLLED_BACK, "roll back", "reason = ?", (reason,))

    def abandon_plan(self, plan_id: int, reason: str) -> CompactionPlan:
        """REQUESTED or INFLIGHT -> ABANDONED (for example: its inputs are gone), releasing its input files."""
        if not isinstance(reason, str) or not reason:
            raise InvalidInputError("an abandoned plan needs a reason")
        with self._tx(write=True) as tx:
            plan = self._get_plan(tx, plan_id)
            if plan.state == ABANDONED:
                return plan
            return self._transition(plan_id, PENDING_STATES, ABANDONED, "abandon", "reason = ?", (reason,))

    def _transition(self, plan_id: int, sources: tuple[str, ...], target: str, verb: str, sets: str,
                    params: tuple[Any, ...]) -> CompactionPlan:
        check_int(plan_id, "plan id")
        with self._tx(write=True) as tx:
            cur = tx.run(f"UPDATE lsmlake_plans SET state = ?, updated_ms = ?, {sets} "
                         f"WHERE plan_id = ? AND state IN ({marks(len(sources))})",
                         (target, now_ms(), *params, plan_id, *sources))
            if cur.rowcount != 1:
                plan = self._get_plan(tx, plan_id)  # NotFoundError for an unknown id
                raise PlanStateError(f"cannot {verb} compaction plan {plan_id} of table {plan.table_id!r}: it is "
                                     f"{plan.state}, and only a {' or '.join(sources)} plan can become {target}",
                                     plan_id, plan.state)
            if target not in PENDING_STATES:
                tx.run("DELETE FROM lsmlake_plan_files WHERE plan_id = ?", (plan_id,))
            return self._get_plan(tx, plan_id)

    def get_plan(self, plan_id: int) -> CompactionPlan:
        """One plan by id (NotFoundError when unknown)."""
        check_int(plan_id, "plan id")
        with self._tx(write=False) as tx:
            return self._get_plan(tx, plan_id)

    def _get_plan(self, tx: Session, plan_id: int) -> CompactionPlan:
        row = tx.run(f"SELECT {_PLAN_COLUMNS} FROM lsmlake_plans WHERE plan_id = ?", (plan_id,)).fetchone()
        if row is None:
            raise NotFoundError(f"compaction plan {plan_id} does not exist")
        return self._plan(row)

    def list_plans(self, table_id: str, states: Iterable[str] | None = None,
                   changed_since_ms: int | None = None) -> list[CompactionPlan]:
        """The plans of a table in creation order, optionally only those in the given states; with
        `changed_since_ms`, only the plans still pending or changed since then (a table's plans are kept for good)."""
        check_table_id(table_id)
        wanted = None if states is None else _check_states(states)
        if wanted == []:
            return []
        sql = f"SELECT {_PLAN_COLUMNS} FROM lsmlake_plans WHERE table_id = ?"
        params: list[Any] = [table_id]
        if wanted is not None:
            sql += f" AND state IN ({marks(len(wanted))})"
            params += wanted
        if changed_since_ms is not None:
            sql += f" AND (updated_ms >= ? OR state IN ({marks(len(PENDING_STATES))}))"
            params += [changed_since_ms, *PENDING_STATES]
        with self._tx(write=False) as tx:
            rows = tx.run(sql + " ORDER BY plan_id", params).fetchall()
        return [self._plan(r) for r in rows]

    def plans_in_states(self, states: Iterable[str]) -> list[CompactionPlan]:
        """The plans of every table in the given states, in creation order. The states are required: every table's
        plans in any state would be the whole history of the warehouse."""
        wanted = _check_states(states)
        if not wanted:
            return []
        sql = f"SELECT {_PLAN_COLUMNS} FROM lsmlake_plans WHERE state IN ({marks(len(wanted))}) ORDER BY plan_id"
        with self._tx(write=False) as tx:
            rows = tx.run(sql, wanted).fetchall()
        return [self._plan(r) for r in rows]

    @staticmethod
    def _plan(r: Sequence[Any]) -> CompactionPlan:
        return CompactionPlan(plan_id=int(r[0]), table_id=r[1], partition=bytes(r[2]), bucket=int(r[3]),
                              input_files=tuple(json.loads(r[4])), output_level=int(r[5]), state=r[6], owner=r[7],
                              attempts=int(r[8]), snapshot_id=None if r[9] is None else int(r[9]), reason=r[10],
                              created_ms=int(r[11]), updated_ms=int(r[12]),
                              started_ms=None if r[13] is None else int(r[13]), detail=bytes(r[14]))


def _check_states(states: Iterable[str]) -> list[str]:
    """The distinct states, sorted; InvalidInputError naming any unknown one."""
    wanted = sorted(set(states))
    bad = [s for s in wanted if s not in PLAN_STATES]
    if bad:
        raise InvalidInputError(f"unknown plan state(s) {bad}: use {', '.join(PLAN_STATES)}")
    return wanted
