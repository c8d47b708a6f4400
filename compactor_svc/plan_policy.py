"""Which of a table's due buckets go into its next plan: a pure function of the candidates and the IO budget.

Postponed rows come first (no reader sees them until they are placed in their buckets), then the buckets with
the most sorted runs. A plan takes buckets until the next would pass the budget's bytes or bucket count; it
always takes the first, so that a bucket larger than the budget is compacted all the same. The plan is a full
compaction when every bucket in it is planned full and every unit writes to the top level.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from compactor_svc.waits import BucketKey
from lsmlake.format.bucket import POSTPONE_BUCKET
from lsmlake.mergetree.compact.force_up_level0 import TriggerCount
from lsmlake.mergetree.compact.unit import CompactUnit
from lsmlake.table.scan import Split


@dataclass(frozen=True)
class Candidate:
    """A bucket with a unit due."""

    runs: int
    key: BucketKey
    split: Split
    unit: CompactUnit
    full: bool  # planned as a full compaction
    triggers: TriggerCount  # the bucket's gentle count after this look: kept only if the plan is sent

    @property
    def input_bytes(self) -> int:
        return sum(f.file_size for f in self.unit.files)


@dataclass(frozen=True)
class PlanChoice:
    chosen: list[Candidate]  # in the order of the plan's units
    deferred: list[Candidate]  # left for the next plan: the budget is spent
    input_bytes: int  # of the chosen
    full: bool


def choose_plan(candidates: Sequence[Candidate], max_plan_bytes: int, max_plan_buckets: int,
                max_level: int) -> PlanChoice:
    """The buckets of the next plan among `candidates`, within `max_plan_bytes` and `max_plan_buckets`."""
    ordered = sorted(candidates, key=lambda c: (c.key[2] != POSTPONE_BUCKET, -c.runs))
    chosen: list[Candidate] = []
    deferred: list[Candidate] = []
    spent = 0
    for c in ordered:
        size = c.input_bytes
        if chosen and (spent + size > max_plan_bytes or len(chosen) >= max_plan_buckets):
            deferred.append(c)
            continue
        chosen.append(c)
        spent += size
    full = bool(chosen) and all(c.full and c.unit.output_level == max_level for c in chosen)
    return PlanChoice(chosen, deferred, spent, full)
