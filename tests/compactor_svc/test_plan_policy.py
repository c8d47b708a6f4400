"""The choice of a plan's buckets (`compactor_svc.plan_policy.choose_plan`), without a table or a catalog."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, cast

from compactor_svc.plan_policy import Candidate, choose_plan
from lsmlake.format.bucket import POSTPONE_BUCKET
from lsmlake.mergetree.compact.force_up_level0 import TriggerCount
from lsmlake.mergetree.compact.unit import CompactUnit

MAX_LEVEL = 5
MB = 1 << 20


@dataclass(frozen=True)
class _File:
    """What the policy reads of a data file."""

    file_size: int


def _candidate(bucket: int, runs: int, size: int, *, full: bool = False, level: int = MAX_LEVEL) -> Candidate:
    unit = CompactUnit(level, cast(Any, (_File(size),)))
    return Candidate(runs, ("db.t", b"", bucket), cast(Any, None), unit, full, TriggerCount(0))


def _buckets(cs: list[Candidate]) -> list[int]:
    return [c.key[2] for c in cs]


def test_the_most_sorted_runs_go_first_and_postponed_rows_before_them() -> None:
    choice = choose_plan([_candidate(1, 3, MB), _candidate(2, 9, MB), _candidate(POSTPONE_BUCKET, 1, MB),
                          _candidate(3, 5, MB)], 100 * MB, 64, MAX_LEVEL)
    assert _buckets(choice.chosen) == [POSTPONE_BUCKET, 2, 3, 1] and choice.deferred == []
    assert choice.input_bytes == 4 * MB


def test_the_bytes_budget_defers_the_rest_but_never_the_first() -> None:
    choice = choose_plan([_candidate(1, 9, 70 * MB), _candidate(2, 8, 40 * MB), _candidate(3, 7, 30 * MB)],
                         100 * MB, 64, MAX_LEVEL)
    assert _buckets(choice.chosen) == [1, 3] and _buckets(choice.deferred) == [2]
    assert choice.input_bytes == 100 * MB
    alone = choose_plan([_candidate(1, 9, 500 * MB), _candidate(2, 2, MB)], 100 * MB, 64, MAX_LEVEL)
    assert _buckets(alone.chosen) == [1] and _buckets(alone.deferred) == [2]  # larger than the budget: still runs


def test_the_bucket_budget_defers_the_rest() -> None:
    choice = choose_plan([_candidate(b, 10 - b, MB) for b in range(5)], 100 * MB, 2, MAX_LEVEL)
    assert _buckets(choice.chosen) == [0, 1] and _buckets(choice.deferred) == [2, 3, 4]


def test_a_plan_is_full_only_when_every_unit_is_full_and_reaches_the_top_level() -> None:
    assert choose_plan([_candidate(1, 2, MB, full=True), _candidate(2, 1, MB, full=True)], MB * 10, 64,
                       MAX_LEVEL).full
    assert not choose_plan([_candidate(1, 2, MB, full=True), _candidate(2, 1, MB)], MB * 10, 64, MAX_LEVEL).full
    assert not choose_plan([_candidate(1, 2, MB, full=True, level=MAX_LEVEL - 1)], MB * 10, 64, MAX_LEVEL).full
    deferred_part = choose_plan([_candidate(1, 2, MB, full=True), _candidate(2, 1, MB)], MB, 64, MAX_LEVEL)
    assert deferred_part.full and _buckets(deferred_part.deferred) == [2]  # only what the plan holds counts


def test_nothing_to_choose_is_an_empty_plan() -> None:
    choice = choose_plan([], 100 * MB, 64, MAX_LEVEL)
    assert choice.chosen == [] and choice.deferred == [] and choice.input_bytes == 0 and not choice.full
