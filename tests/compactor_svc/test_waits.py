"""What settles a bucket of a waited trigger, and how long a trigger waits (no services needed)."""

from __future__ import annotations

import pytest

from compactor_svc.servicer import DEFAULT_WAIT_S, wait_limit
from compactor_svc.waits import OWNED_ELSEWHERE, CompactionWait, NotCompacted

A = ("db.t", b"p", 0)
B = ("db.t", b"p", 1)
C = ("db.t", b"q", 0)


def test_a_full_trigger_is_settled_only_by_a_full_look_at_or_after_its_snapshot() -> None:
    w = CompactionWait([A, B], [C], since=10, full=True)
    assert w.elsewhere == 1 and w.not_compacted == {C: NotCompacted(C, OWNED_ELSEWHERE)}
    assert not w.settle(A, planned_at=9, full=True, plan_id="3", snapshot_id=11)  # planned before the request
    assert not w.settle(A, planned_at=12, full=False, plan_id="4", snapshot_id=13)  # a universal unit
    assert w.pending == {A, B}
    assert w.settle(A, planned_at=10, full=True, plan_id="5", snapshot_id=14)
    assert w.settle(B, planned_at=15, full=True, plan_id="", snapshot_id=15)  # already one sorted run
    assert not w.pending and w.plans() == [("5", 14)]
    assert not w.fail(A, "too late")  # settled buckets stay settled


def test_a_normal_trigger_is_settled_by_any_look_after_it() -> None:
    w = CompactionWait([A, B], [], since=10, full=False)
    assert w.settle(A, planned_at=10, full=False, plan_id="4", snapshot_id=12)
    assert w.fail(B, "plan failed 3 times: boom")
    assert not w.pending and w.not_compacted[B].reason == "plan failed 3 times: boom"


@pytest.mark.parametrize(("remaining", "limit"), [(None, DEFAULT_WAIT_S), (60.0, 58.0), (10.0, 9.0), (0.5, 0.45),
                                                   (0.0, 0.0)])
def test_the_wait_ends_a_margin_before_the_calls_deadline(remaining: float | None, limit: float) -> None:
    assert wait_limit(remaining) == pytest.approx(limit)
