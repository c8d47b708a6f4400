"""The services' registry in the metadata store: heartbeats recorded and replaced, up and down by missed beats or a
last beat saying it stops, a restart's new start time, forgetting the long gone, refusals that change nothing; two
stores over one database see the same services (catalog replicas agree)."""

from __future__ import annotations

import pytest

from lsmlake.errors import InvalidInputError
from lsmlake.metastore import MetaStore, open_store
from lsmlake.metastore.services import FORGET_AFTER_MS, MISSED_BEATS, ServiceRegistry

T0 = 1_700_000_000_000


def test_a_heartbeat_is_recorded_and_the_next_replaces_it(store: MetaStore) -> None:
    reg = ServiceRegistry(store)
    assert reg.services() == []
    reg.beat("compactor", "c-1", "h:1", 1000, '{"a": 1}', now=T0)
    reg.beat("compactor", "c-1", "h:2", 2000, '{"a": 2}', now=T0 + 1500)
    reg.beat("writer", "w-1", "h:3", 1000, now=T0 + 1600)
    reg.beat("catalog", "cat-1", "h:4", 1000, now=T0 + 1700)
    entries = reg.services()
    assert [(e.kind, e.instance_id) for e in entries] == [("catalog", "cat-1"), ("writer", "w-1"),
                                                          ("compactor", "c-1")]
    c = entries[2]
    assert (c.address, c.interval_ms, c.status, c.started_ms, c.last_ms) == ("h:2", 2000, '{"a": 2}', T0, T0 + 1500)


def test_down_after_the_missed_beats_or_at_once_when_stopping(store: MetaStore) -> None:
    reg = ServiceRegistry(store)
    reg.beat("writer", "w", "", 1000, now=T0)
    (e,) = reg.services()
    assert e.up(T0 + MISSED_BEATS * 1000) and not e.down_reason(T0 + MISSED_BEATS * 1000)
    assert not e.up(T0 + MISSED_BEATS * 1000 + 1)
    assert f"{MISSED_BEATS} missed" in e.down_reason(T0 + MISSED_BEATS * 1000 + 1)
    reg.beat("writer", "w", "", 1000, stopping=True, now=T0 + 10)
    (e,) = reg.services()
    assert not e.up(T0 + 10) and "stopped" in e.down_reason(T0 + 10)


def test_a_restart_under_the_same_id_starts_again(store: MetaStore) -> None:
    reg = ServiceRegistry(store)
    reg.beat("writer", "w", "", 1000, now=T0)
    reg.beat("writer", "w", "", 1000, now=T0 + 1000)
    assert reg.services()[0].started_ms == T0
    reg.beat("writer", "w", "", 1000, stopping=True, now=T0 + 2000)
    reg.beat("writer", "w", "", 1000, now=T0 + 5000)  # after a stop
    assert reg.services()[0].started_ms == T0 + 5000
    reg.beat("writer", "w", "", 1000, now=T0 + 5000 + (MISSED_BEATS + 1) * 1000)  # after a silence (a crash)
    assert reg.services()[0].started_ms == T0 + 5000 + (MISSED_BEATS + 1) * 1000


def test_services_gone_for_a_day_are_forgotten(store: MetaStore) -> None:
    reg = ServiceRegistry(store)
    reg.beat("compactor", "old", "", 1000, now=T0)
    reg.beat("compactor", "new", "", 1000, now=T0 + FORGET_AFTER_MS)
    assert reg.forget_gone(now=T0 + FORGET_AFTER_MS + 1) == 1
    assert [e.instance_id for e in reg.services()] == ["new"]


@pytest.mark.parametrize(("args", "message"), [
    (("scheduler", "x", "", 1000), "service kind 'scheduler' is not one of catalog, writer, compactor"),
    (("writer", "", "", 1000), "instance id '' must be a non-empty string"),
    (("writer", "x" * 300, "", 1000), "instance id has 300 characters; at most 256"),
    (("writer", "w", "", 0), "heartbeat interval (ms) 0 must be at least 1"),
])
def test_bad_heartbeats_are_refused_and_change_nothing(store: MetaStore, args: tuple[str, str, str, int],
                                                        message: str) -> None:
    reg = ServiceRegistry(store)
    with pytest.raises(InvalidInputError) as e:
        reg.beat(*args)
    assert str(e.value) == message
    assert reg.services() == []


def test_two_stores_over_one_database_see_the_same_services(store_url: str) -> None:
    with open_store(store_url) as a, open_store(store_url) as b:
        ServiceRegistry(a).beat("writer", "w", "h:1", 1000, now=T0)
        ServiceRegistry(b).beat("compactor", "c", "h:2", 1000, now=T0)
        assert ServiceRegistry(a).services() == ServiceRegistry(b).services()
        assert len(ServiceRegistry(a).services()) == 2
