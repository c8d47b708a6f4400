"""What a waited `TriggerCompaction` waits for, bucket by bucket, and what became of each bucket.

A trigger names buckets as of the table's latest snapshot when it arrives (`since`). A named bucket is
*settled* by a look of the planner at a snapshot at or after `since`:

- for a full trigger, by a committed unit planned as a full compaction (every file of the bucket at the
  planning snapshot into one sorted run on the highest level), or by a full look that found nothing to
  do (the bucket already was one sorted run, or had no files left). Every file live at `since` is then
  rewritten into that run, or was rewritten into a file that was;
- for a normal trigger, by any committed unit planned at or after `since`, or a look that found nothing due.

Level-0 files committed after `since` may sit beside the run: they are not the trigger's to wait for.
A bucket that cannot be settled is *not compacted*, with a reason: owned by another compactor, its plan
failed (after the scheduler's attempts), or the wait timed out.
"""

from __future__ import annotations

from dataclasses import dataclass

BucketKey = tuple[str, bytes, int]  # table id, partition bytes, bucket

OWNED_ELSEWHERE = "owned by another compactor replica (trigger it there)"
NOT_ASSIGNED = "not owned by this compactor: it is still joining the compactor group and owns no bucket yet"
OWNERSHIP_MOVED = "owned by another compactor replica now: the bucket moved during the wait (trigger it there)"


@dataclass(frozen=True)
class Compacted:
    """A settled bucket: the plan and COMPACT snapshot that compacted it, or no plan when nothing was to do
    (then `snapshot_id` is the snapshot the planner found it compact in)."""

    key: BucketKey
    plan_id: str
    snapshot_id: int


@dataclass(frozen=True)
class NotCompacted:
    """A bucket of the trigger that was not compacted, and why."""

    key: BucketKey
    reason: str


class CompactionWait:
    """The buckets of one trigger and their outcomes; the scheduler settles or fails them under its lock."""

    def __init__(self, keys: list[BucketKey], elsewhere: list[BucketKey], since: int, full: bool,
                 elsewhere_reason: str = OWNED_ELSEWHERE) -> None:
        self.queued = list(keys)
        self.elsewhere = len(elsewhere)
        self.since = since
        self.full = full
        self.pending = set(keys)
        self.compacted: dict[BucketKey, Compacted] = {}
        self.not_compacted: dict[BucketKey, NotCompacted] = {k: NotCompacted(k, elsewhere_reason) for k in elsewhere}
        self.timed_out = False

    def settles(self, planned_at: int, full: bool) -> bool:
        """Whether a look at a bucket planned at snapshot `planned_at` (as a full compaction or not) is enough."""
        return planned_at >= self.since and (full or not self.full)

    def settle(self, key: BucketKey, planned_at: int, full: bool, plan_id: str, snapshot_id: int) -> bool:
        """Record that `key` was compacted (or found compact); whether this trigger waited for it."""
        if key not in self.pending or not self.settles(planned_at, full):
            return False
        self.pending.discard(key)
        self.compacted[key] = Compacted(key, plan_id, snapshot_id)
        return True

    def fail(self, key: BucketKey, reason: str) -> bool:
        """Record that `key` will not be compacted for this trigger; whether it was still pending."""
        if key not in self.pending:
            return False
        self.pending.discard(key)
        self.not_compacted[key] = NotCompacted(key, reason)
        return True

    def plans(self) -> list[tuple[str, int]]:
        """(plan id, COMPACT snapshot) of the plans that compacted the trigger's buckets, oldest first."""
        return sorted({(c.plan_id, c.snapshot_id) for c in self.compacted.values() if c.plan_id},
                      key=lambda p: p[1])
