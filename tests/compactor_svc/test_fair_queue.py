"""The order in which a planning round takes tables (`compactor_svc.fair_queue`): stalled first, then priority,
then the least served for its share; a busy table cannot starve the others."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from compactor_svc.fair_queue import DatabaseWeights, Demand, FairQueue
from compactor_svc.server import Settings
from lsmlake.format.options import TableOptions


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
    """One table always has huge plans, nineteen get small ones now and then, and wait until served (their buckets
    stay dirty until planned): each of them is served within a bounded number of rounds of capacity one (the busy
    one gets its share of bytes, not of rounds)."""
    q = FairQueue()
    since: dict[str, int] = {}  # table -> the round its work arrived
    worst_wait = 0
    busy_served = 0
    for r in range(1, 2001):
        for i in range(1, 20):
            if r % i == 0 or r % 7 == 0:
                since.setdefault(f"t{i}", r)
        first = q.order([Demand("t0")] + [Demand(t) for t in sorted(since)])[0]
        q.charge(first, 10_000 if first.table == "t0" else 10)
        if first.table == "t0":
            busy_served += 1
        else:
            del since[first.table]
        worst_wait = max([worst_wait, *(r - s for s in since.values())])
    assert worst_wait < 2 * 20  # a deterministic simulation: 27 rounds at most, with up to 20 tables waiting
    assert busy_served > 0  # and the busy table got its share of the bytes


def test_a_table_back_from_idleness_banks_no_credit() -> None:
    """a and b start level; b is idle while a is served a lot; back, b takes turns with a instead of going first
    for as long as a was served alone."""
    q = FairQueue()
    q.order([Demand("a"), Demand("b")])
    for _ in range(100):
        q.order([Demand("a")])
        q.charge(Demand("a"), 10_000)
    firsts = []
    for _ in range(10):
        first = q.order([Demand("a"), Demand("b")])[0]
        q.charge(first, 10_000)
        firsts.append(first.table)
    assert firsts.count("a") == firsts.count("b") == 5


def test_a_dropped_table_is_forgotten() -> None:
    q = FairQueue()
    q.order([Demand("a"), Demand("b")])
    q.charge(Demand("a"), 10**6)
    q.retain({"b"})  # a was dropped: a table created again under its name starts afresh
    assert q.served("a") == 0 and q.served("b") == 0


@pytest.mark.parametrize(("table", "options", "expected"), [
    ("gold.t", {}, (5, 3)),  # the database's
    ("gold.t", {"lsmlake.compaction.priority": "-1"}, (-1, 3)),  # the table's own wins, each option alone
    ("gold.t", {"lsmlake.compaction.share": "7"}, (5, 7)),
    ("gold.t", {"lsmlake.compaction.priority": "0", "lsmlake.compaction.share": "1"}, (0, 1)),  # even the default
    ("bronze.t", {}, (0, 1)),  # a database not named: the defaults
    ("bronze.t", {"lsmlake.compaction.share": "2"}, (0, 2)),
])
def test_a_table_without_its_own_weights_takes_its_databases(
        table: str, options: dict[str, str], expected: tuple[int, int]) -> None:
    weights = DatabaseWeights(priority={"gold": 5}, share={"gold": 3})
    d = weights.demand(table, TableOptions(options), stalled=False)
    assert (d.priority, d.share) == expected and d.table == table and not d.stalled


def test_a_prioritised_database_goes_first_and_a_stalled_table_before_it() -> None:
    weights = DatabaseWeights(priority={"gold": 1})
    q = FairQueue()
    q.charge(Demand("gold.a"), 10**9)  # served a lot already: priority still comes before service
    demands = [weights.demand("bronze.b", TableOptions({}), False), weights.demand("gold.a", TableOptions({}), False),
               weights.demand("bronze.c", TableOptions({}), True)]
    assert [d.table for d in q.order(demands)] == ["bronze.c", "gold.a", "bronze.b"]


@pytest.mark.parametrize(("args", "env", "expected"), [
    (["--database-priority", "gold=2", "--database-share", "gold=4", "--database-share", "silver=2"], {},
     ({"gold": 2}, {"gold": 4, "silver": 2})),
    ([], {"LSMLAKE_DATABASE_PRIORITY": "gold=1, bronze=-1", "LSMLAKE_DATABASE_SHARE": "gold=3"},
     ({"gold": 1, "bronze": -1}, {"gold": 3})),
    ([], {}, ({}, {})),
])
def test_the_compactor_takes_database_weights_from_flags_or_the_environment(
        args: list[str], env: dict[str, str], expected: tuple[dict[str, int], dict[str, int]]) -> None:
    s = Settings.from_args(["--warehouse", "wh", "--catalog", "c:1", "--kafka", "k:1", *args], env=env)
    assert (dict(s.weights.priority), dict(s.weights.share)) == expected


@pytest.mark.parametrize(("flag", "value", "problem"), [
    ("--database-share", "gold=0", "N >= 1"),
    ("--database-share", "gold", "DATABASE=N"),
    ("--database-priority", "gold=high", "integer"),
    ("--database-priority", "../x=1", "DATABASE=N"),
])
def test_bad_database_weights_are_refused_by_name(flag: str, value: str, problem: str,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        Settings.from_args(["--warehouse", "wh", "--catalog", "c:1", "--kafka", "k:1", flag, value], env={})
    err = capsys.readouterr().err
    assert flag in err and value in err and problem in err
