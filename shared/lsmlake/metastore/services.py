"""The registry of a cluster's services: the last heartbeat of each catalog, writer and compactor process.

Kept in the metadata store, not in a catalog replica's memory, so that every replica over the same store (and so
every console) shows the same services, whichever replica a heartbeat reached. One row per (kind, instance id),
replaced by each heartbeat; a process that missed `missed` heartbeats in a row, or said it was stopping, is down.
Rows of processes gone for `FORGET_AFTER_MS` are deleted (`forget_gone`): a compactor restarted under a new id
would otherwise stay on the list for ever.
"""

from __future__ import annotations

from dataclasses import dataclass

from lsmlake.errors import InvalidInputError
from lsmlake.metastore.checks import check_int
from lsmlake.metastore.transactions import StoreTables, now_ms

KINDS = ("catalog", "writer", "compactor")
MISSED_BEATS = 3  # heartbeats in a row a service may miss before it is shown down
FORGET_AFTER_MS = 24 * 3_600_000
MAX_STATUS_CHARS = 64_000  # what a reporter says of itself (owned partitions, running plans), as text
MAX_NAME_CHARS = 256
_COLUMNS = "kind, instance_id, address, started_ms, last_ms, interval_ms, stopping, status"


@dataclass(frozen=True)
class ServiceEntry:
    """A service's last heartbeat."""

    kind: str
    instance_id: str
    address: str
    started_ms: int  # its first heartbeat since it (re)started
    last_ms: int
    interval_ms: int
    stopping: bool  # its last heartbeat said it was stopping
    status: str  # what it reported of itself, as the reporter encoded it

    def down_reason(self, now: int, missed: int = MISSED_BEATS) -> str:
        """Why the service is down at `now` ("" when it is up)."""
        if self.stopping:
            return "stopped (its last heartbeat said so)"
        silent = now - self.last_ms
        if silent > missed * self.interval_ms:
            return f"no heartbeat for {silent / 1000:.0f} s ({missed} missed)"
        return ""

    def up(self, now: int, missed: int = MISSED_BEATS) -> bool:
        return not self.down_reason(now, missed)


def _check_text(value: str, what: str, limit: int, empty: bool = False) -> str:
    if not isinstance(value, str) or (not value and not empty):
        raise InvalidInputError(f"{what} {value!r} must be a non-empty string")
    if len(value) > limit:
        raise InvalidInputError(f"{what} has {len(value)} characters; at most {limit}")
    return value


class ServiceRegistry(StoreTables):
    """The services table of the store."""

    def beat(self, kind: str, instance_id: str, address: str, interval_ms: int, status: str = "",
             stopping: bool = False, now: int | None = None) -> int:
        """Record a heartbeat; when it was recorded (epoch ms).

        The service's start time is kept across heartbeats, and starts again when the previous heartbeat is
        from a process that stopped or went silent (a restart under the same id)."""
        if kind not in KINDS:
            raise InvalidInputError(f"service kind {kind!r} is not one of {', '.join(KINDS)}")
        _check_text(instance_id, "instance id", MAX_NAME_CHARS)
        _check_text(address, "address", MAX_NAME_CHARS, empty=True)
        _check_text(status, "status", MAX_STATUS_CHARS, empty=True)
        check_int(interval_ms, "heartbeat interval (ms)", 1)
        at = now_ms() if now is None else now
        with self._tx(write=True) as tx:
            tx.run(f"INSERT INTO lsmlake_services ({_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?) "
                   "ON CONFLICT (kind, instance_id) DO UPDATE SET address = excluded.address,"
                   " started_ms = CASE WHEN lsmlake_services.stopping = 1"
                   f"  OR excluded.last_ms - lsmlake_services.last_ms > {MISSED_BEATS} * lsmlake_services.interval_ms"
                   "  THEN excluded.started_ms ELSE lsmlake_services.started_ms END,"
                   " last_ms = excluded.last_ms, interval_ms = excluded.interval_ms,"
                   " stopping = excluded.stopping, status = excluded.status",
                   (kind, instance_id, address, at, at, interval_ms, int(stopping), status))
        return at

    def services(self) -> list[ServiceEntry]:
        """Every service that reported, by kind (catalogs, writers, compactors) and id."""
        with self._tx(write=False) as tx:
            rows = tx.run(f"SELECT {_COLUMNS} FROM lsmlake_services").fetchall()
        entries = [ServiceEntry(str(r[0]), str(r[1]), str(r[2]), int(r[3]), int(r[4]), int(r[5]), bool(r[6]),
                                str(r[7])) for r in rows]
        return sorted(entries, key=lambda e: (KINDS.index(e.kind) if e.kind in KINDS else len(KINDS),
                                              e.instance_id))

    def forget_gone(self, now: int | None = None, after_ms: int = FORGET_AFTER_MS) -> int:
        """Delete the services silent for `after_ms`; how many."""
        at = now_ms() if now is None else now
        with self._tx(write=True) as tx:
            return int(tx.run("DELETE FROM lsmlake_services WHERE last_ms < ?", (at - after_ms,)).rowcount)
