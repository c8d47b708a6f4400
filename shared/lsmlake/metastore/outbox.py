"""The event outbox: events recorded with their commit, delivered at least once by a relay, purged in batches."""

from __future__ import annotations

from collections.abc import Iterable

from lsmlake.errors import InvalidInputError
from lsmlake.metastore.checks import check_bytes, check_int, check_table_id, chunks, marks
from lsmlake.metastore.model import OutboxEvent
from lsmlake.metastore.transactions import StoreTables, now_ms

PURGE_BATCH = 1000  # outbox events deleted per purge transaction
_EVENT_COLUMNS = "event_id, table_id, snapshot_id, topic, event_key, payload, created_ms, delivered_ms"


class Outbox(StoreTables):
    """The outbox table of the store."""

    def add_event(self, table_id: str, snapshot_id: int, topic: str, key: bytes, payload: bytes) -> int:
        """Record an event to publish (inside the commit's `commit_lock` block, so it commits with it); its id."""
        check_table_id(table_id)
        check_int(snapshot_id, "snapshot id", 1)
        if not isinstance(topic, str) or not topic:
            raise InvalidInputError(f"topic {topic!r} must be a non-empty string")
        key, payload = check_bytes(key, "event key"), check_bytes(payload, "event payload")
        with self._tx(write=True) as tx:
            return tx.insert_returning_id(
                "INSERT INTO lsmlake_outbox (table_id, snapshot_id, topic, event_key, payload, created_ms) "
                "VALUES (?, ?, ?, ?, ?, ?) RETURNING event_id", (table_id, snapshot_id, topic, key, payload, now_ms()))

    def pending_events(self, limit: int = 100) -> list[OutboxEvent]:
        """The oldest undelivered events, at most `limit`, in event-id order (commit order within a table)."""
        check_int(limit, "limit", 1)
        with self._tx(write=False) as tx:
            rows = tx.run(f"SELECT {_EVENT_COLUMNS} FROM lsmlake_outbox WHERE delivered_ms IS NULL "
                          "ORDER BY event_id LIMIT ?", (limit,)).fetchall()
        return [OutboxEvent(int(r[0]), r[1], int(r[2]), r[3], bytes(r[4]), bytes(r[5]), int(r[6]), r[7])
                for r in rows]

    def mark_delivered(self, event_ids: Iterable[int]) -> int:
        """Mark events as delivered; how many were pending (ids already delivered or unknown are ignored)."""
        ids = sorted({check_int(i, "event id") for i in event_ids})
        if not ids:
            return 0
        marked = 0
        with self._tx(write=True) as tx:
            ts = now_ms()
            for chunk in chunks(ids):
                cur = tx.run(f"UPDATE lsmlake_outbox SET delivered_ms = ? WHERE delivered_ms IS NULL "
                             f"AND event_id IN ({marks(len(chunk))})", (ts, *chunk))
                marked += cur.rowcount
        return marked

    def purge_delivered(self, delivered_before_ms: int, limit: int = PURGE_BATCH) -> int:
        """Delete at most `limit` events delivered before a time, oldest delivery first; how many were deleted.

        One short transaction per call, so that a large backlog is purged in bounded steps between
        commits: call it again while it returns `limit`.
        """
        check_int(delivered_before_ms, "time")
        check_int(limit, "limit", 1)
        with self._tx(write=True) as tx:
            return int(tx.run("DELETE FROM lsmlake_outbox WHERE event_id IN (SELECT event_id FROM "
                              "lsmlake_outbox WHERE delivered_ms IS NOT NULL AND delivered_ms < ? "
                              "ORDER BY delivered_ms LIMIT ?)", (delivered_before_ms, limit)).rowcount)

    def purge_undelivered(self, created_before_ms: int, limit: int = PURGE_BATCH) -> int:
        """Delete at most `limit` events never delivered and recorded before a time, oldest first; how many.

        These events are never published: for an outbox nobody relays (no Kafka) or a broker down for
        longer than the retention. One short transaction per call, like `purge_delivered`.
        """
        check_int(created_before_ms, "time")
        check_int(limit, "limit", 1)
        with self._tx(write=True) as tx:
            return int(tx.run("DELETE FROM lsmlake_outbox WHERE event_id IN (SELECT event_id FROM "
                              "lsmlake_outbox WHERE delivered_ms IS NULL AND created_ms < ? "
                              "ORDER BY event_id LIMIT ?)", (created_before_ms, limit)).rowcount)

    def outbox_size(self) -> int:
        """How many events the outbox holds, delivered or not."""
        with self._tx(write=False) as tx:
            return int(tx.run("SELECT COUNT(*) FROM lsmlake_outbox").fetchone()[0])

    def outbox_lag(self) -> tuple[int, int | None]:
        """How many events wait for delivery, and when the oldest of them was recorded (epoch ms)."""
        with self._tx(write=False) as tx:
            row = tx.run("SELECT COUNT(*), MIN(created_ms) FROM lsmlake_outbox "
                         "WHERE delivered_ms IS NULL").fetchone()
        return int(row[0]), None if row[1] is None else int(row[1])
