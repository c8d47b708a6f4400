"""The records the metadata store hands out: outbox events and compaction plans."""

from __future__ import annotations

from dataclasses import dataclass

# Compaction plan states, as in Hudi's compaction timeline.
REQUESTED = "REQUESTED"
INFLIGHT = "INFLIGHT"
COMPLETED = "COMPLETED"
ROLLED_BACK = "ROLLED_BACK"  # a run was undone and the plan will not run again
ABANDONED = "ABANDONED"
PLAN_STATES = (REQUESTED, INFLIGHT, COMPLETED, ROLLED_BACK, ABANDONED)
PENDING_STATES = (REQUESTED, INFLIGHT)  # plans whose input files cannot be planned again


@dataclass(frozen=True)
class OutboxEvent:
    """One event recorded with a commit, waiting for (or past) delivery."""

    event_id: int
    table_id: str
    snapshot_id: int
    topic: str
    key: bytes
    payload: bytes
    created_ms: int
    delivered_ms: int | None = None


@dataclass(frozen=True)
class CompactionPlan:
    """One compaction plan of a table's timeline, with its state and times (epoch milliseconds)."""

    plan_id: int
    table_id: str
    partition: bytes
    bucket: int
    input_files: tuple[str, ...]
    output_level: int
    state: str
    owner: str | None
    attempts: int  # how many times the plan was started
    snapshot_id: int | None  # the COMPACT snapshot that completed it
    reason: str | None  # why it was abandoned or rolled back
    created_ms: int
    updated_ms: int
    started_ms: int | None = None  # when the current or last run started
    detail: bytes = b""  # the caller's own description of the plan (the catalog keeps its protobuf units there)

    @property
    def pending(self) -> bool:
        """Whether the plan still holds its input files (REQUESTED or INFLIGHT)."""
        return self.state in PENDING_STATES
