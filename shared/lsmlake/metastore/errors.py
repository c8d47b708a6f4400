"""Errors of the metadata store, in the lsmlake hierarchy (see `lsmlake.errors`)."""

from __future__ import annotations

from collections.abc import Mapping

from lsmlake.errors import LakeError, ServiceUnavailableError


class MetaStoreUnavailableError(ServiceUnavailableError):
    """The metadata store cannot be reached, or a lock was not granted in time: retry later; nothing was applied.
    The catalog cannot take the request without its store, so callers see it as the service unavailable.

    Raised from the end of `commit_lock`, the transaction's outcome may be unknown (PostgreSQL lost the
    connection during COMMIT): reconcile with `last_recorded_snapshot` before retrying.
    """


class SchemaVersionError(LakeError):
    """The metadata store was created by a newer lsmlake whose schema this version does not know."""


class PlanConflictError(LakeError):
    """A compaction plan names input files that are already in a pending (REQUESTED or INFLIGHT) plan."""

    def __init__(self, message: str, conflicts: Mapping[str, int] | None = None) -> None:
        super().__init__(message)
        self.conflicts: dict[str, int] = dict(conflicts or {})  # file name -> pending plan id


class PlanStateError(LakeError):
    """A compaction plan transition that its current state does not allow (for example COMPLETED -> INFLIGHT)."""

    def __init__(self, message: str, plan_id: int, state: str) -> None:
        super().__init__(message)
        self.plan_id = plan_id
        self.state = state
