"""Bounded retention of the catalog's outbox (`lsmlake_outbox`), on SQLite and PostgreSQL.

Without a purge the table grows forever: without Kafka every event stays pending, and a broker that stays
down keeps the relay from ever reaching its purge of delivered events. Time is never slept through: events
are aged in the store, or the purger's clock is moved forward, and most purge passes are run by the test.
Two tests wait, with a generous deadline, for the purge thread's first pass (it runs at start-up); where
the purge thread may also run a pass during a test, only totals are checked, which do not depend on which
pass deleted what.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import grpc
import pytest

from catalog_svc import relay as relay_mod
from catalog_svc.relay import OutboxRelay
from catalog_svc.server import CatalogServer, Settings
from lsmlake.errors import InvalidInputError
from lsmlake.kafka.broker import free_port
from lsmlake.metastore import MetaStore, now_ms, open_store
from lsmlake.proto_gen.lsmlake.v1 import catalog_pb2_grpc
from tests.support.local_server import Local

T = "db.t"
HOUR_MS = 3_600_000
DAY_MS = 24 * HOUR_MS
RELAY_LOG = "catalog_svc.relay"
DEADLINE_S = 30.0  # for the purge thread's first pass, which runs at once


def _add(store: MetaStore, n: int) -> list[int]:
    with store.commit_lock(T):
        return [store.outbox.add_event(T, 1 + i, "data-files", f"{T}/p/0".encode(), b"v%d" % i) for i in range(n)]


def _age(store: MetaStore, event_ids: list[int], created_ms: int | None = None,
         delivered_ms: int | None = None) -> None:
    """Make events look recorded (and delivered) at those times, as if that long had passed since."""
    with store.commit_lock(T) as tx:
        for i in event_ids:
            if created_ms is not None:
                tx.execute("UPDATE lsmlake_outbox SET created_ms = ? WHERE event_id = ?", (created_ms, i))
            if delivered_ms is not None:
                tx.execute("UPDATE lsmlake_outbox SET delivered_ms = ? WHERE event_id = ?", (delivered_ms, i))


def _outbox(store: MetaStore) -> tuple[list[int], list[int]]:
    """The ids of the pending and of the delivered events (plain SQL, the same on every lsmlake version)."""
    with store.commit_lock(T) as tx:
        rows = tx.execute("SELECT event_id, delivered_ms FROM lsmlake_outbox ORDER BY event_id")
    return [int(i) for i, d in rows if d is None], [int(i) for i, d in rows if d is not None]


def _wait_for(what: Callable[[], Any], want: Any) -> Any:
    deadline = time.monotonic() + DEADLINE_S
    while (got := what()) != want and time.monotonic() < deadline:
        time.sleep(0.05)
    return got


def _later(ms: int) -> Callable[[], int]:
    """A clock `ms` ahead of the real one."""
    return lambda: now_ms() + ms


def _dropped_in_log(caplog: pytest.LogCaptureFixture) -> int:
    return sum(int(r.args[0]) for r in caplog.records  # type: ignore[index]
               if r.name == RELAY_LOG and r.levelno == logging.WARNING and r.msg.startswith("dropped"))


class _Publisher:
    """Stands in for the Kafka publisher: every publish is acknowledged."""

    def __init__(self) -> None:
        self.sent: list[tuple[str, bytes, bytes]] = []

    def publish(self, topic: str, key: bytes, value: bytes, *, timeout_s: float = 30.0) -> None:
        self.sent.append((topic, key, value))


# -- the store: batched purges --------------------------------------------------------------------------


def test_store_purges_in_bounded_batches_and_each_kind_only(store: MetaStore) -> None:
    ids = _add(store, 25)
    delivered, pending = ids[:15], ids[15:]
    store.outbox.mark_delivered(delivered)
    assert store.outbox.outbox_size() == 25
    future = now_ms() + HOUR_MS
    # batches of at most `limit`: a backlog goes in several short transactions
    assert store.outbox.purge_delivered(future, limit=10) == 10
    assert store.outbox.purge_delivered(future, limit=10) == 5
    assert store.outbox.purge_delivered(future, limit=10) == 0
    assert _outbox(store) == (pending, [])
    assert store.outbox.purge_delivered(future) == 0  # pending events are never taken for delivered ones
    assert store.outbox.purge_undelivered(now_ms() - HOUR_MS) == 0  # too young
    assert store.outbox.purge_undelivered(future, limit=4) == 4  # the oldest first
    assert [e.event_id for e in store.outbox.pending_events(100)] == pending[4:]
    assert store.outbox.purge_undelivered(future) == 6
    assert store.outbox.outbox_size() == 0
    with pytest.raises(InvalidInputError):
        store.outbox.purge_delivered(future, limit=0)
    with pytest.raises(InvalidInputError):
        store.outbox.purge_undelivered(future, limit=0)


# -- the purger: retention, counts, bounded passes ------------------------------------------------------


def test_delivered_events_older_than_the_retention_are_purged_in_bounded_passes(store: MetaStore) -> None:
    ids = _add(store, 30)
    store.outbox.mark_delivered(ids[:20])
    purged: list[tuple[str, int]] = []
    purger = relay_mod.OutboxPurger(store.outbox, batch=4, batches=2,
                                    on_purged=lambda state, n: purged.append((state, n)))
    assert (purger.keep_delivered_ms, purger.keep_undelivered_ms) == (HOUR_MS, DAY_MS)  # the defaults
    # just delivered: kept for inspection
    assert purger.purge_once() == (0, 0, False)
    assert len(_outbox(store)[1]) == 20
    # an hour and a second later: gone, at most batch * batches per pass
    purger.clock = _later(HOUR_MS + 1000)
    passes = []
    while True:
        passes.append(purger.purge_once())
        assert passes[-1].delivered <= 8 and passes[-1].undelivered == 0
        if not passes[-1].more:
            break
    assert [p.delivered for p in passes] == [8, 8, 4]
    assert purged == [("delivered", 8), ("delivered", 8), ("delivered", 4)]
    # the undelivered events, not a day old, are still there and still pending
    assert _outbox(store) == (ids[20:], [])
    assert [e.event_id for e in store.outbox.pending_events(100)] == ids[20:]


def test_undelivered_events_inside_the_retention_are_kept_and_still_delivered(
        store: MetaStore, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, RELAY_LOG)
    ids = _add(store, 12)
    old, young = ids[:5], ids[5:]
    _age(store, old, created_ms=now_ms() - DAY_MS - 60_000)
    relay = OutboxRelay(store, None, batch=100)  # no Kafka here
    assert relay.purger.purge_once() == (0, 5, False)
    # the warning says how many were dropped and why
    assert _dropped_in_log(caplog) == 5
    assert "no Kafka is configured" in caplog.text
    assert _outbox(store) == (young, [])
    # a relay (another replica with Kafka, or this catalog restarted with it) still delivers the rest, in order
    publisher = _Publisher()
    assert relay.relay_once(publisher) == 7  # type: ignore[arg-type]
    assert [v for _, _, v in publisher.sent] == [b"v%d" % i for i in range(5, 12)]
    assert _outbox(store) == ([], young)
    # delivered: kept an hour, then purged, without a warning
    assert relay.purger.purge_once() == (0, 0, False)
    relay.purger.clock = _later(HOUR_MS + 1000)
    assert relay.purger.purge_once() == (7, 0, False)
    assert _outbox(store) == ([], [])
    assert _dropped_in_log(caplog) == 5


def test_the_purge_runs_while_kafka_stays_down(store: MetaStore, caplog: pytest.LogCaptureFixture) -> None:
    """A broker that never answers keeps the relay retrying its topics; the outbox is purged regardless."""
    caplog.set_level(logging.WARNING, RELAY_LOG)
    ids = _add(store, 4)
    store.outbox.mark_delivered(ids[:2])
    _age(store, ids[:1], delivered_ms=now_ms() - HOUR_MS - 60_000)  # delivered an hour ago
    _age(store, ids[2:3], created_ms=now_ms() - DAY_MS - 60_000)  # waiting for Kafka for a day
    relay = OutboxRelay(store, f"127.0.0.1:{free_port()}", publish_timeout_s=1.0, backoff_s=0.2).start()
    try:
        # the first purge pass runs at start: the young events stay, the old ones go
        assert _wait_for(lambda: _outbox(store), ([ids[3]], [ids[1]])) == ([ids[3]], [ids[1]])
    finally:
        relay.stop(timeout_s=15)
    assert _dropped_in_log(caplog) == 1
    assert "Kafka at 127.0.0.1:" in caplog.text


def test_a_failing_batch_still_counts_what_went_before(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, RELAY_LOG)

    class FailsAtTheThirdBatch:
        calls = 0

        def purge_undelivered(self, before_ms: int, limit: int) -> int:
            self.calls += 1
            if self.calls == 3:
                raise OSError("metastore gone")
            return limit

        def purge_delivered(self, before_ms: int, limit: int) -> int:
            return 0

    purged: list[tuple[str, int]] = []
    purger = relay_mod.OutboxPurger(FailsAtTheThirdBatch(), batch=5,  # type: ignore[arg-type]
                                    on_purged=lambda state, n: purged.append((state, n)))
    with pytest.raises(OSError):
        purger.purge_once()
    assert purged == [("undelivered", 10)]
    assert _dropped_in_log(caplog) == 10


def test_retentions_are_checked() -> None:
    for bad in ({"keep_delivered_s": -1}, {"keep_undelivered_s": 0}, {"keep_undelivered_s": float("nan")},
                {"batch": 0}):
        with pytest.raises(InvalidInputError):
            relay_mod.OutboxPurger(None, **bad)  # type: ignore[arg-type]


# -- the catalog service: flags, metrics, 200 snapshots without Kafka -----------------------------------


def test_retention_flags(tmp_path: Path) -> None:
    s = Settings.from_args(["--warehouse", str(tmp_path)], env={})
    assert (s.outbox_retention_s, s.outbox_undelivered_retention_s) == (3600, 86400)
    s = Settings.from_args(["--warehouse", str(tmp_path), "--outbox-retention", "0"],
                           env={"LSMLAKE_OUTBOX_UNDELIVERED_RETENTION": "600"})
    assert (s.outbox_retention_s, s.outbox_undelivered_retention_s) == (0, 600)
    for bad in (["--outbox-retention", "-1"], ["--outbox-undelivered-retention", "0"],
                ["--outbox-undelivered-retention", "nan"]):
        with pytest.raises(SystemExit):
            Settings.from_args(["--warehouse", str(tmp_path), *bad], env={})


@contextmanager
def _catalog(warehouse: Path, metastore: str, **settings: Any) -> Iterator[Local]:
    server = CatalogServer(Settings(warehouse=str(warehouse), metastore=metastore, **settings))
    server.start()
    channel = grpc.insecure_channel(f"127.0.0.1:{server.port}")
    try:
        yield Local(server, catalog_pb2_grpc.CatalogServiceStub(channel), channel, str(warehouse))
    finally:
        channel.close()
        server.stop()


def test_a_catalog_without_kafka_keeps_its_outbox_bounded(store_url: str, tmp_path: Path,
                                                          caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, RELAY_LOG)
    rounds, per_round = 10, 20
    with _catalog(tmp_path / "wh", store_url) as cat:  # no Kafka
        ident = cat.create_table("db", "t", [("id", "BIGINT")])
        store = cat.server._store
        assert store is not None
        sample = cat.server.metrics.registry.get_sample_value
        sizes = []
        for r in range(rounds):
            for i in range(per_round):
                n = r * per_round + i + 1
                cat.commit(ident, "w", n, cat.write(ident, {"id": [n]}))
            pending, delivered = _outbox(store)
            sizes.append(len(pending) + len(delivered))
            assert sample("lsmlake_catalog_outbox_events") == sizes[-1]
            # a day later, no broker has taken this round's events: the next purge pass drops them
            _age(store, pending, created_ms=now_ms() - DAY_MS - 60_000)
            assert not cat.server._relay.purger.purge_once().more  # type: ignore[union-attr]
            assert _outbox(store) == ([], [])
        assert cat.server._operations.catalog.get_table(T).snapshots.latest_id() == 200  # type: ignore[union-attr]
        # one event per commit, never more than one round of them in the outbox
        assert sizes == [per_round] * rounds
        assert sample("lsmlake_catalog_outbox_events") == 0
        assert sample("lsmlake_catalog_outbox_purged_total", {"state": "undelivered"}) == rounds * per_round
        assert _dropped_in_log(caplog) == rounds * per_round


def test_a_catalog_started_on_a_grown_outbox_purges_it(store_url: str, tmp_path: Path) -> None:
    """A store that grew before retention existed (or while the catalog was down) is purged at start-up."""
    with open_store(store_url) as store:
        ids = _add(store, 30)
        store.outbox.mark_delivered(ids[:20])
        _age(store, ids[:15], delivered_ms=now_ms() - 2 * HOUR_MS)  # delivered two hours ago
        _age(store, ids[20:25], created_ms=now_ms() - 2 * DAY_MS)  # never delivered, two days old
    with _catalog(tmp_path / "wh", store_url) as cat:  # no Kafka
        store = cat.server._store
        assert store is not None
        want = (ids[25:], ids[15:20])  # recent events stay: pending ones for a relay, delivered ones for a look
        assert _wait_for(lambda: _outbox(store), want) == want
