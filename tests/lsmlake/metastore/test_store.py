"""The metadata store on both backends: commit records, outbox, compaction timeline, and cross-process commit locks."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import threading

import pytest

from lsmlake.errors import InvalidInputError, InvariantError, NotFoundError
from lsmlake.format.snapshot import BATCH_COMMIT_IDENTIFIER
from lsmlake.metastore import (
    ABANDONED,
    COMPLETED,
    INFLIGHT,
    PENDING_STATES,
    REQUESTED,
    ROLLED_BACK,
    MetaStore,
    MetaStoreUnavailableError,
    PlanConflictError,
    PlanStateError,
    SchemaVersionError,
    open_store,
)
from lsmlake.metastore.request_ids import MAX_STORED_REQUEST_ID

T = "db.t"


# -- schema ------------------------------------------------------------------------------------------


def test_open_is_idempotent_and_versioned(store_url: str) -> None:
    with open_store(store_url) as a, open_store(store_url) as b:
        assert a.schema_version() == b.schema_version() == 1
        with a.commit_lock(T):
            a.commits.record_commit(T, "u", 1, "APPEND", 1)
    with open_store(store_url) as c:  # reopening keeps the data
        assert c.commits.find_commit(T, "u", 1, "APPEND") == 1
        with c.commit_lock(T) as tx:
            tx.execute("UPDATE lsmlake_schema_version SET version = 99 WHERE id = 1")
    with pytest.raises(SchemaVersionError, match="newer"):
        open_store(store_url)


def test_bad_urls() -> None:
    with pytest.raises(InvalidInputError, match="unsupported"):
        open_store("mysql://x/y")
    with pytest.raises(InvalidInputError, match="database file"):
        open_store("sqlite://:memory:")
    with pytest.raises(InvalidInputError, match="schema"):
        open_store("postgresql://127.0.0.1/test?schema=a;drop")


# -- commit records ----------------------------------------------------------------------------------


def test_commit_records_make_retries_idempotent(store: MetaStore) -> None:
    assert store.commits.find_commit(T, "writer-1", 7, "APPEND") is None
    assert store.commits.last_recorded_snapshot(T) is None
    with store.commit_lock(T):
        assert store.commits.find_commit(T, "writer-1", 7, "APPEND") is None
        store.commits.record_commit(T, "writer-1", 7, "APPEND", 1)
    with store.commit_lock(T):
        store.commits.record_commit(T, "writer-1", 8, "APPEND", 2)
        store.commits.record_commit(T, "writer-1", 8, "COMPACT", 3)  # kind is part of the key
    assert store.commits.find_commit(T, "writer-1", 7, "APPEND") == 1
    assert store.commits.find_commit(T, "writer-1", 8, "COMPACT") == 3
    assert store.commits.find_commit(T, "writer-2", 7, "APPEND") is None
    assert store.commits.find_commit("db.other", "writer-1", 7, "APPEND") is None
    assert store.commits.last_recorded_snapshot(T) == 3
    # a retry after a lost reply records the same thing again: nothing changes
    with store.commit_lock(T):
        store.commits.record_commit(T, "writer-1", 7, "APPEND", 1)
    # the same commit as another snapshot, or another commit as the same snapshot: refused
    with pytest.raises(InvariantError, match="already recorded as snapshot 1"), store.commit_lock(T):
        store.commits.record_commit(T, "writer-1", 7, "APPEND", 4)
    with pytest.raises(InvariantError, match="snapshot 2 .* already recorded"), store.commit_lock(T):
        store.commits.record_commit(T, "writer-2", 1, "APPEND", 2)
    assert store.commits.last_recorded_snapshot(T) == 3


def test_batch_commits_are_never_matched(store: MetaStore) -> None:
    with store.commit_lock(T):
        store.commits.record_commit(T, "batch", BATCH_COMMIT_IDENTIFIER, "APPEND", 1)
    with store.commit_lock(T):
        store.commits.record_commit(T, "batch", BATCH_COMMIT_IDENTIFIER, "APPEND", 2)
    assert store.commits.find_commit(T, "batch", BATCH_COMMIT_IDENTIFIER, "APPEND") is None
    assert store.commits.last_recorded_snapshot(T) == 2


def test_bad_commit_records(store: MetaStore) -> None:
    with pytest.raises(InvalidInputError, match="kind"):
        store.commits.record_commit(T, "u", 1, "MERGE", 1)
    with pytest.raises(InvalidInputError, match="snapshot id"):
        store.commits.record_commit(T, "u", 1, "APPEND", 0)
    with pytest.raises(InvalidInputError, match="table id"):
        store.commits.record_commit("", "u", 1, "APPEND", 1)


# -- one transaction ---------------------------------------------------------------------------------


def test_commit_lock_is_one_transaction(store_url: str, store: MetaStore) -> None:
    with open_store(store_url) as other:
        with store.commit_lock(T):
            store.commits.record_commit(T, "u", 1, "APPEND", 1)
            store.outbox.add_event(T, 1, "data-files", b"k", b"p")
            assert store.commits.find_commit(T, "u", 1, "APPEND") == 1  # this transaction sees its writes
            assert other.commits.find_commit(T, "u", 1, "APPEND") is None  # others see them only after commit
            assert other.outbox.pending_events(10) == []
        assert other.commits.find_commit(T, "u", 1, "APPEND") == 1
        assert len(other.outbox.pending_events(10)) == 1


def test_failed_commit_leaves_nothing(store: MetaStore) -> None:
    plan = store.plans.request_plan(T, b"p", 0, ["a"], 1)
    store.plans.start_plan(plan, "compactor-1")
    with pytest.raises(RuntimeError, match="publish failed"), store.commit_lock(T):
        store.commits.record_commit(T, "u", 1, "COMPACT", 1)
        store.outbox.add_event(T, 1, "compaction-results", b"k", b"p")
        store.plans.complete_plan(plan, 1)
        raise RuntimeError("publish failed")
    assert store.commits.find_commit(T, "u", 1, "COMPACT") is None
    assert store.outbox.pending_events(10) == []
    assert store.plans.get_plan(plan).state == INFLIGHT
    # the store still works after the rollback
    with store.commit_lock(T):
        store.commits.record_commit(T, "u", 1, "COMPACT", 1)
        store.plans.complete_plan(plan, 1)
    assert store.plans.get_plan(plan).state == COMPLETED


def test_commit_lock_times_out(store_url: str, store: MetaStore) -> None:
    with open_store(store_url, busy_timeout=0.3) as other:
        with store.commit_lock(T):
            with pytest.raises(MetaStoreUnavailableError), other.commit_lock(T):
                pass
            if store_url.startswith("postgresql"):
                with other.commit_lock("db.other"):  # PostgreSQL locks one table, not the store
                    other.commits.record_commit("db.other", "u", 1, "APPEND", 1)
                assert other.commits.find_commit("db.other", "u", 1, "APPEND") == 1
        with other.commit_lock(T):  # released at the end of the block
            other.commits.record_commit(T, "u", 1, "APPEND", 1)
    assert store.commits.find_commit(T, "u", 1, "APPEND") == 1


def test_threads_share_one_store(store: MetaStore) -> None:
    with store.commit_lock(T) as tx:
        tx.execute("CREATE TABLE test_counter (id INTEGER PRIMARY KEY, n INTEGER NOT NULL)")
        tx.execute("INSERT INTO test_counter (id, n) VALUES (1, 0)")
    errors: list[BaseException] = []

    def work() -> None:
        try:
            for _ in range(25):
                with store.commit_lock(T) as tx:
                    ((n,),) = tx.execute("SELECT n FROM test_counter WHERE id = 1")
                    tx.execute("UPDATE test_counter SET n = ? WHERE id = 1", (n + 1,))
        except BaseException as e:
            errors.append(e)

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert not errors
    with store.commit_lock(T) as tx:
        assert tx.execute("SELECT n FROM test_counter WHERE id = 1") == [(100,)]


# -- outbox ------------------------------------------------------------------------------------------


# -- client writes -----------------------------------------------------------------------------------


def test_client_writes_are_recorded_found_and_forgotten(store: MetaStore) -> None:
    assert store.commits.find_writes(T, ["a", "b"]) == {}
    with store.commit_lock(T):
        store.commits.record_commit(T, "w", 1, "APPEND", 1)
        store.commits.record_writes(T, ["a", "b"], 1)
    with store.commit_lock(T):
        store.commits.record_commit(T, "w", 2, "APPEND", 2)
        store.commits.record_writes(T, ["c"], 2)
        store.commits.record_writes(T, [], 2)  # a commit of writes without ids records nothing
    assert store.commits.find_writes(T, ["a", "c", "x"]) == {"a": 1, "c": 2}
    assert store.commits.find_writes("db.other", ["a"]) == {}  # ids are per table
    many = [f"id-{i}" for i in range(1200)]  # more than one IN (...) chunk
    with store.commit_lock(T):
        store.commits.record_commit(T, "w", 3, "APPEND", 3)
        store.commits.record_writes(T, many, 3)
    assert store.commits.find_writes(T, many[::-1] + ["zz"]) == dict.fromkeys(many, 3)
    with pytest.raises(InvariantError, match="committed before"), store.commit_lock(T):
        store.commits.record_writes(T, ["d", "b"], 4)
    assert store.commits.find_writes(T, ["d"]) == {}  # the failed transaction left nothing
    for bad in ([""], ["x" * (MAX_STORED_REQUEST_ID + 1)], ["e", "e"], [7]):
        with pytest.raises(InvalidInputError, match="request id"):
            store.commits.find_writes(T, bad)  # type: ignore[arg-type]
    assert store.commits.forget_writes(0) == 0
    assert store.commits.forget_writes(2**62) == 1203
    assert store.commits.find_writes(T, ["a"]) == {}
    with store.commit_lock(T):
        store.commits.record_writes(T, ["f"], 3)
        store.forget_table(T)
    assert store.commits.find_writes(T, ["f"]) == {}


def test_outbox_add_pending_mark(store: MetaStore) -> None:
    assert store.outbox.pending_events() == []
    ids = []
    for sid in (1, 2, 3):
        with store.commit_lock(T):
            store.commits.record_commit(T, "u", sid, "APPEND", sid)
            ids.append(store.outbox.add_event(T, sid, "data-files", f"{T}/p/0".encode(), bytes([sid, 0, 255])))
    with store.commit_lock("db.u"):
        ids.append(store.outbox.add_event("db.u", 1, "compaction-results", b"", b""))
    assert ids == sorted(ids) and len(set(ids)) == 4
    pending = store.outbox.pending_events(10)
    assert [e.event_id for e in pending] == ids
    first = pending[0]
    assert (first.table_id, first.snapshot_id, first.topic, first.key, first.payload) == (
        T, 1, "data-files", b"db.t/p/0", b"\x01\x00\xff")
    assert first.delivered_ms is None and first.created_ms > 0
    assert [e.event_id for e in store.outbox.pending_events(2)] == ids[:2]
    # at least once: until marked, a relay that crashed sees the same events again
    assert [e.event_id for e in store.outbox.pending_events(2)] == ids[:2]
    assert store.outbox.mark_delivered(ids[:2]) == 2
    assert store.outbox.mark_delivered(ids[:2] + [10_000]) == 0  # again, or unknown: ignored
    assert [e.event_id for e in store.outbox.pending_events(10)] == ids[2:]
    assert store.outbox.mark_delivered([]) == 0
    assert store.outbox.mark_delivered(ids) == 2
    assert store.outbox.pending_events(10) == []
    assert store.outbox.purge_delivered(0) == 0
    assert store.outbox.purge_delivered(2**62) == 4


def test_outbox_bad_input(store: MetaStore) -> None:
    with pytest.raises(InvalidInputError, match="bytes"):
        store.outbox.add_event(T, 1, "t", "text", b"")  # type: ignore[arg-type]
    with pytest.raises(InvalidInputError, match="limit"):
        store.outbox.pending_events(0)


# -- compaction timeline -----------------------------------------------------------------------------


def test_timeline_lifecycle(store: MetaStore) -> None:
    p = store.plans.request_plan(T, b"\x00part", 3, ["f1", "f2"], 5)
    plan = store.plans.get_plan(p)
    assert (plan.state, plan.partition, plan.bucket, plan.input_files, plan.output_level) == (
        REQUESTED, b"\x00part", 3, ("f1", "f2"), 5)
    assert plan.attempts == 0 and plan.owner is None and plan.created_ms == plan.updated_ms
    started = store.plans.start_plan(p, "compactor-1")
    assert (started.state, started.owner, started.attempts) == (INFLIGHT, "compactor-1", 1)
    assert started.updated_ms >= started.created_ms
    # the compactor died: the next owner rolls the plan back and runs it again
    back = store.plans.rollback_plan(p, "compactor-1 died")
    assert (back.state, back.owner, back.attempts, back.reason) == (REQUESTED, "compactor-1", 1, "compactor-1 died")
    assert back.started_ms is not None and back.started_ms >= plan.created_ms
    assert store.plans.start_plan(p, "compactor-2").attempts == 2
    done = store.plans.complete_plan(p, 9)
    assert (done.state, done.snapshot_id, done.owner) == (COMPLETED, 9, "compactor-2")
    assert store.plans.complete_plan(p, 9) == done  # a retried completion is a no-op
    # completed plans release their files
    p2 = store.plans.request_plan(T, b"\x00part", 3, ["f1", "f3"], 5)
    assert [x.plan_id for x in store.plans.list_plans(T)] == [p, p2]
    assert [x.plan_id for x in store.plans.list_plans(T, PENDING_STATES)] == [p2]
    assert [x.plan_id for x in store.plans.list_plans(T, [COMPLETED])] == [p]
    assert store.plans.list_plans(T, []) == []
    assert store.plans.list_plans("db.none") == []
    # the plans changed since a moment, and every pending one however old (the console's last hour)
    after_done = store.plans.get_plan(p).updated_ms + 1
    assert [x.plan_id for x in store.plans.list_plans(T, changed_since_ms=after_done)] == [p2]
    assert [x.plan_id for x in store.plans.list_plans(T, changed_since_ms=done.updated_ms)] == [p, p2]
    assert store.plans.list_plans(T, [COMPLETED], changed_since_ms=after_done) == []


def test_plans_of_every_table_by_state(store: MetaStore) -> None:
    a = store.plans.request_plan(T, b"", 0, ["f1"], 1)
    b = store.plans.request_plan("db.u", b"", 0, ["f1"], 1)
    c = store.plans.request_plan("db.u", b"", 1, ["f2"], 1)
    store.plans.start_plan(c, "c1")
    listed = store.plans.plans_in_states([REQUESTED])
    assert [(x.plan_id, x.table_id) for x in listed] == [(a, T), (b, "db.u")]
    assert [x.plan_id for x in store.plans.plans_in_states([REQUESTED, INFLIGHT])] == [a, b, c]
    assert store.plans.plans_in_states([COMPLETED]) == []
    assert store.plans.plans_in_states([]) == []
    with pytest.raises(InvalidInputError, match="RUNNING"):
        store.plans.plans_in_states(["RUNNING"])


def test_an_existing_store_gets_the_state_index_when_opened(store_url: str) -> None:
    # listing every table's plans by state must not scan every plan ever made: a store made before the index
    # existed gets it on its next open
    with open_store(store_url) as s, s.commit_lock(T) as tx:
        tx.execute("DROP INDEX lsmlake_plans_by_state")
    found = ("SELECT name FROM sqlite_master WHERE type = 'index' AND name = 'lsmlake_plans_by_state'"
             if store_url.startswith("sqlite") else "SELECT to_regclass('lsmlake_plans_by_state')::text")
    with open_store(store_url) as s, s.commit_lock(T) as tx:
        assert tx.execute(found) == [("lsmlake_plans_by_state",)]


def test_pending_files_cannot_be_planned_again(store: MetaStore) -> None:
    p1 = store.plans.request_plan(T, b"", 0, ["a", "b"], 1)
    with pytest.raises(PlanConflictError, match=r"b \(plan \d+\)") as err:
        store.plans.request_plan(T, b"", 0, ["c", "b"], 1)
    assert err.value.conflicts == {"b": p1}
    store.plans.start_plan(p1, "c1")
    with pytest.raises(PlanConflictError):  # INFLIGHT holds them too
        store.plans.request_plan(T, b"", 0, ["a"], 1)
    assert [x.plan_id for x in store.plans.list_plans(T)] == [p1]  # the refused plans left nothing
    p_other_table = store.plans.request_plan("db.u", b"", 0, ["a", "b"], 1)  # file names are per table
    p3 = store.plans.request_plan(T, b"", 0, ["c"], 1)  # "c" was not taken by the refused plan
    store.plans.rollback_plan(p1)  # back to REQUESTED: still holds its files
    with pytest.raises(PlanConflictError):
        store.plans.request_plan(T, b"", 0, ["a"], 1)
    store.plans.abandon_plan(p1, "input files expired")
    p4 = store.plans.request_plan(T, b"", 0, ["a", "b"], 1)
    assert {p_other_table, p3, p4}.isdisjoint({p1})


def test_abandon(store: MetaStore) -> None:
    p = store.plans.request_plan(T, b"", 0, ["a"], 1)
    gone = store.plans.abandon_plan(p, "inputs are gone")
    assert (gone.state, gone.reason) == (ABANDONED, "inputs are gone")
    assert store.plans.abandon_plan(p, "again") == gone  # repeating is a no-op
    q = store.plans.request_plan(T, b"", 0, ["a"], 1)
    store.plans.start_plan(q, "c1")
    assert store.plans.abandon_plan(q, "inputs compacted by another writer").state == ABANDONED
    with pytest.raises(InvalidInputError, match="reason"):
        store.plans.abandon_plan(q, "")


@pytest.mark.parametrize("setup, action, state", [
    ([], lambda s, p: s.plans.complete_plan(p, 1), REQUESTED),
    ([], lambda s, p: s.plans.rollback_plan(p), REQUESTED),
    (["start"], lambda s, p: s.plans.start_plan(p, "c2"), INFLIGHT),
    (["start", "complete"], lambda s, p: s.plans.start_plan(p, "c2"), COMPLETED),
    (["start", "complete"], lambda s, p: s.plans.rollback_plan(p), COMPLETED),
    (["start", "complete"], lambda s, p: s.plans.abandon_plan(p, "x"), COMPLETED),
    (["start", "complete"], lambda s, p: s.plans.complete_plan(p, 2), COMPLETED),  # another snapshot
    (["abandon"], lambda s, p: s.plans.start_plan(p, "c2"), ABANDONED),
    (["abandon"], lambda s, p: s.plans.complete_plan(p, 1), ABANDONED),
])
def test_illegal_transitions(store: MetaStore, setup: list[str], action, state: str) -> None:
    p = store.plans.request_plan(T, b"", 0, ["a"], 1)
    steps = {"start": lambda: store.plans.start_plan(p, "c1"), "complete": lambda: store.plans.complete_plan(p, 1),
             "abandon": lambda: store.plans.abandon_plan(p, "gone")}
    for step in setup:
        steps[step]()
    before = store.plans.get_plan(p)
    with pytest.raises(PlanStateError, match=f"it is {state}") as err:
        action(store, p)
    assert (err.value.plan_id, err.value.state) == (p, state)
    assert store.plans.get_plan(p) == before  # nothing changed


def test_unknown_plan_and_bad_plans(store: MetaStore) -> None:
    with pytest.raises(NotFoundError, match="plan 404"):
        store.plans.start_plan(404, "c1")
    with pytest.raises(NotFoundError):
        store.plans.get_plan(404)
    with pytest.raises(InvalidInputError, match="non-empty list"):
        store.plans.request_plan(T, b"", 0, [], 1)
    with pytest.raises(InvalidInputError, match="more than once"):
        store.plans.request_plan(T, b"", 0, ["a", "a"], 1)
    with pytest.raises(InvalidInputError, match="output level"):
        store.plans.request_plan(T, b"", 0, ["a"], -1)
    with pytest.raises(InvalidInputError, match="unknown plan state"):
        store.plans.list_plans(T, ["RUNNING"])
    assert store.plans.list_plans(T) == []


# -- across processes --------------------------------------------------------------------------------

_WORKER = textwrap.dedent("""
    import sys
    from lsmlake.metastore import open_store
    url, table, worker, n = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
    store = open_store(url)
    print("ready", flush=True)
    sys.stdin.readline()  # start together
    for i in range(1, n + 1):
        with store.commit_lock(table) as tx:
            ((count,),) = tx.execute("SELECT n FROM test_counter WHERE id = 1")
            tx.execute("UPDATE test_counter SET n = ? WHERE id = 1", (count + 1,))
            # what the catalog does under the lock: the next snapshot id, recorded once
            store.commits.record_commit(table, worker, i, "APPEND", count + 1)
    store.close()
""")


@pytest.mark.integration
def test_commit_lock_serialises_processes(store_url: str, store: MetaStore) -> None:
    n = 50
    with store.commit_lock(T) as tx:
        tx.execute("CREATE TABLE test_counter (id INTEGER PRIMARY KEY, n INTEGER NOT NULL)")
        tx.execute("INSERT INTO test_counter (id, n) VALUES (1, 0)")
    procs = [subprocess.Popen([sys.executable, "-c", _WORKER, store_url, T, f"w{i}", str(n)],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for i in range(2)]
    try:
        for p in procs:
            assert p.stdout is not None and p.stdout.readline().strip() == "ready"
        for p in procs:
            assert p.stdin is not None
            p.stdin.write("go\n")
            p.stdin.flush()
        for p in procs:
            _, err = p.communicate(timeout=45)
            assert p.returncode == 0, err
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    with store.commit_lock(T) as tx:
        assert tx.execute("SELECT n FROM test_counter WHERE id = 1") == [(2 * n,)]
    assert store.commits.last_recorded_snapshot(T) == 2 * n
    for w in ("w0", "w1"):
        got = [store.commits.find_commit(T, w, i, "APPEND") for i in range(1, n + 1)]
        assert all(s is not None for s in got)
        assert got == sorted(got)  # each worker's commits in its own order
    everyone = {store.commits.find_commit(T, w, i, "APPEND") for w in ("w0", "w1") for i in range(1, n + 1)}
    assert everyone == set(range(1, 2 * n + 1))  # consecutive, each exactly once


def test_plan_detail_and_end(store: MetaStore) -> None:
    p = store.plans.request_plan(T, b"", 0, ["a", "b"], 2, detail=b"\x00units\xff")
    assert store.plans.get_plan(p).detail == b"\x00units\xff" and store.plans.get_plan(p).started_ms is None
    with pytest.raises(PlanStateError, match="only a INFLIGHT plan can become ROLLED_BACK"):
        store.plans.end_plan(p, "not running")
    store.plans.start_plan(p, "c1")
    ended = store.plans.end_plan(p, "operator cancelled")
    assert (ended.state, ended.reason) == (ROLLED_BACK, "operator cancelled")
    assert store.plans.end_plan(p, "again") == ended
    assert store.plans.request_plan(T, b"", 0, ["a", "b"], 2)  # its files were released


def test_forget_table_and_outbox_lag(store: MetaStore) -> None:
    assert store.outbox.outbox_lag() == (0, None)
    with store.commit_lock(T):
        store.commits.record_commit(T, "u", 1, "APPEND", 1)
        store.outbox.add_event(T, 1, "data-files", b"k", b"v")
    store.plans.request_plan(T, b"", 0, ["a"], 1)
    pending, oldest = store.outbox.outbox_lag()
    assert pending == 1 and oldest is not None
    with store.commit_lock(T):
        store.forget_table(T)
    assert store.commits.last_recorded_snapshot(T) is None and store.plans.list_plans(T) == []
    assert store.commits.find_commit(T, "u", 1, "APPEND") is None
    assert store.plans.request_plan(T, b"", 0, ["a"], 1)  # the file is free again
    assert store.outbox.outbox_lag()[0] == 1  # events of a dropped table are still delivered


# -- sequence numbers ----------------------------------------------------------------------------


def test_sequence_ranges_are_monotone_never_overlap_and_respect_floors(store: MetaStore) -> None:
    a, b = (b"\x01", 0), (b"\x01", 1)
    with store.commit_lock(T):
        assert store.commits.sequences_synced_to(T) is None
        assert store.commits.allocate_sequences(T, {a: 10, b: 1}, {}, None) == {a: 0, b: 0}
    with store.commit_lock(T):
        assert store.commits.allocate_sequences(T, {a: 5}, {b: 100}, 3) == {a: 10}  # b raised, not handed out
        assert store.commits.sequences_synced_to(T) == 3
    with store.commit_lock(T):
        # a floor below the counter changes nothing; one above it moves the next range up
        assert store.commits.allocate_sequences(T, {a: 1, b: 2}, {a: 7}, 4) == {a: 15, b: 100}
        assert store.commits.allocate_sequences(T, {a: 1, b: 1}, {a: 50}, 5) == {a: 50, b: 102}
    with store.commit_lock("db.other"):  # tables count apart
        assert store.commits.allocate_sequences("db.other", {a: 1}, {}, None) == {a: 0}


def test_sequence_counters_survive_reopening_and_are_forgotten_with_the_table(store_url: str) -> None:
    key = (b"", 3)
    with open_store(store_url) as s, s.commit_lock(T):
        s.commits.allocate_sequences(T, {key: 1000}, {}, 9)
    with open_store(store_url) as s:
        with s.commit_lock(T):
            assert s.commits.allocate_sequences(T, {key: 1}, {}, 9) == {key: 1000}
            s.forget_table(T)
        assert s.commits.sequences_synced_to(T) is None
        with s.commit_lock(T):
            assert s.commits.allocate_sequences(T, {key: 1}, {}, None) == {key: 0}


def test_sequence_requests_are_validated(store: MetaStore) -> None:
    with pytest.raises(InvalidInputError, match="sequence count"):
        store.commits.allocate_sequences(T, {(b"", 0): -1}, {}, None)
    with pytest.raises(InvalidInputError, match="bucket"):
        store.commits.allocate_sequences(T, {(b"", "0"): 1}, {}, None)  # type: ignore[dict-item]
