"""The order in which a planning round takes tables (`compactor_svc.fair_queue`): stalled first, then priority,
then the least served for its share; a busy table cannot starve the others."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from compactor_svc.fair_queue import Demand, FairQueue


@pytest.mark.parametrize(("demands", "served", "expected"), [
    ([Demand("a"), Demand("b")], {}, ["a", "b"]),  # nothing served: by name
    ([Demand("a"), Demand("b")], {"a": 100, "b": 50}, ["b", "a"]),  # the least served first
    ([Demand("a"), Demand("b")], {"a": 100}, ["a", "b"]),  # a newcomer starts level with the least served
    ([Demand("a"), Demand("b", stalled=True)], {"b": 10**9}, ["b", "a"]),  # a stalled table jumps the queue
    ([Demand("a", priority=1), Demand("b")], {"a": 10**9}, ["a", "b"]),  # priority before service
    ([Demand("a", priority=1), Demand("b", stalled=True)], {}, ["b", "a"]),  # stalled before priority
    ([Demand("a", share=4), Demand("b")], {"a": 300, "b": 100}, ["b", "a"]),
])
def test_order(demands: list[Demand], served: dict[str, int], expected: list[str]) -> None:
    q = FairQueue()
    for table, n in served.items():
        q.charge(Demand(table), n)
    assert [d.table for d in q.order(demands)] == expected


def test_an_idle_table_banks_no_credit() -> None:
    q = FairQueue()
    q.charge(Demand("busy"), 1000)
    q.order([Demand("busy")])
    # "new" arrives after "busy" was served a lot: it starts level with the least served waiting table
    order = q.order([Demand("busy"), Demand("new")])
    assert q.served("new") == q.served("busy") and [d.table for d in order] == ["busy", "new"]


@settings(max_examples=50, deadline=None)
@given(shares=st.lists(st.integers(1, 5), min_size=2, max_size=8), seed=st.integers(0, 1000))
def test_service_follows_the_shares_when_every_table_always_waits(shares: list[int], seed: int) -> None:
    """Rounds of capacity one plan: every table always has work; plans cost random sizes. Each table's service is
    proportional to its share, to within one plan's size."""
    rng = random.Random(seed)
    q = FairQueue()
    demands = [Demand(f"t{i}", share=s) for i, s in enumerate(shares)]
    got = dict.fromkeys((d.table for d in demands), 0)
    biggest = 100
    for _ in range(400):
        first = q.order(demands)[0]
        cost = rng.randint(1, biggest)
        q.charge(first, cost)
        got[first.table] += cost
    per_share = [got[d.table] / d.share for d in demands]
    assert max(per_share) - min(per_share) <= biggest


def test_a_busy_table_does_not_starve_the_others() -> None:
    """One table always has huge plans, nineteen have small ones now and then: each of them is served within a
    bounded number of rounds of capacity one (the busy one gets its share of bytes, not of rounds)."""
    q = FairQueue()
    last_served = {f"t{i}": 0 for i in range(20)}
    worst_wait = 0
    for r in range(1, 2001):
        waiting = [Demand("t0")] + [Demand(f"t{i}") for i in range(1, 20) if r % i == 0 or r % 7 == 0]
        first = q.order(waiting)[0]
        q.charge(first, 10_000 if first.table == "t0" else 10)
        for d in waiting:
            if d.table == first.table:
                last_served[d.table] = r
        worst_wait = max(worst_wait, max(r - last_served[d.table] for d in waiting if d.table != "t0"))
    assert worst_wait <= 100  # a deterministic simulation: 67 rounds at most, with up to 20 tables waiting
    assert last_served["t0"] > 0  # and the busy table got its share of the bytes
