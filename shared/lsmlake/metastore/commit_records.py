"""Commit records (which commit made which snapshot), client writes and sequence-number counters of each table."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from lsmlake.errors import InvalidInputError, InvariantError
from lsmlake.format.snapshot import BATCH_COMMIT_IDENTIFIER, COMMIT_KINDS
from lsmlake.metastore.checks import check_bytes, check_int, check_table_id, chunks, marks
from lsmlake.metastore.request_ids import MAX_STORED_REQUEST_ID, check_request_ids
from lsmlake.metastore.transactions import StoreTables, now_ms


class CommitRecords(StoreTables):
    """The commit-record, client-write and sequence-number tables of the store."""

    def record_commit(self, table_id: str, commit_user: str, commit_identifier: int, kind: str,
                      snapshot_id: int) -> None:
        """Record that a commit produced a snapshot (idempotent; call it inside the table's `commit_lock`)."""
        check_table_id(table_id)
        if not isinstance(commit_user, str) or not commit_user:
            raise InvalidInputError(f"commit user {commit_user!r} must be a non-empty string")
        check_int(commit_identifier, "commit identifier")
        if kind not in COMMIT_KINDS:
            raise InvalidInputError(f"commit kind {kind!r} must be one of {', '.join(COMMIT_KINDS)}")
        check_int(snapshot_id, "snapshot id", 1)
        with self._tx(write=True) as tx:
            row = tx.run("SELECT commit_user, commit_identifier, commit_kind FROM lsmlake_commits "
                         "WHERE table_id = ? AND snapshot_id = ?", (table_id, snapshot_id)).fetchone()
            if row is not None:
                if tuple(row) == (commit_user, commit_identifier, kind):
                    return
                raise InvariantError(f"snapshot {snapshot_id} of table {table_id!r} is already recorded for commit "
                                     f"{tuple(row)}, not ({commit_user!r}, {commit_identifier}, {kind!r})")
            existing = self.find_commit(table_id, commit_user, commit_identifier, kind)
            if existing is not None:
                raise InvariantError(f"commit ({commit_user!r}, {commit_identifier}, {kind!r}) of table {table_id!r} "
                                     f"is already recorded as snapshot {existing}, not {snapshot_id}")
            try:
                tx.run("INSERT INTO lsmlake_commits (table_id, snapshot_id, commit_user, commit_identifier, "
                       "commit_kind, created_ms) VALUES (?, ?, ?, ?, ?, ?)",
                       (table_id, snapshot_id, commit_user, commit_identifier, kind, now_ms()))
            except tx.integrity_errors as e:
                raise InvariantError(f"commit of snapshot {snapshot_id} of table {table_id!r} was recorded "
                                     "concurrently: record commits inside the table's commit_lock") from e

    def find_commit(self, table_id: str, user: str, identifier: int, kind: str) -> int | None:
        """The snapshot an earlier commit with this user, identifier and kind made, if any (batch ids never match)."""
        check_table_id(table_id)
        if identifier == BATCH_COMMIT_IDENTIFIER:
            return None
        with self._tx(write=False) as tx:
            row = tx.run("SELECT snapshot_id FROM lsmlake_commits WHERE table_id = ? AND commit_user = ? "
                         "AND commit_identifier = ? AND commit_kind = ? "
                         f"AND commit_identifier <> {BATCH_COMMIT_IDENTIFIER}",
                         (table_id, user, identifier, kind)).fetchone()
        return None if row is None else int(row[0])

    def last_recorded_snapshot(self, table_id: str) -> int | None:
        """The highest snapshot id recorded for a table, to find snapshots published without a record after a crash."""
        check_table_id(table_id)
        with self._tx(write=False) as tx:
            row = tx.run("SELECT MAX(snapshot_id) FROM lsmlake_commits WHERE table_id = ?",
                         (table_id,)).fetchone()
        return None if row is None or row[0] is None else int(row[0])

    # -- client writes -----------------------------------------------------------------------------

    def record_writes(self, table_id: str, request_ids: Sequence[str], snapshot_id: int) -> None:
        """Record the client writes a snapshot committed (inside the table's `commit_lock`); InvariantError
        when one was recorded already (a commit must be refused first, see `find_writes`)."""
        check_table_id(table_id)
        check_int(snapshot_id, "snapshot id", 1)
        ids = check_request_ids(request_ids, MAX_STORED_REQUEST_ID)
        if not ids:
            return
        ts = now_ms()
        with self._tx(write=True) as tx:
            try:
                for rid in ids:
                    tx.run("INSERT INTO lsmlake_writes (table_id, request_id, snapshot_id, created_ms) "
                           "VALUES (?, ?, ?, ?)", (table_id, rid, snapshot_id, ts))
            except tx.integrity_errors as e:
                raise InvariantError(f"a write of snapshot {snapshot_id} of table {table_id!r} was committed "
                                     "before: refuse commits whose writes find_writes finds") from e

    def find_writes(self, table_id: str, request_ids: Sequence[str]) -> dict[str, int]:
        """The snapshot of each of these client writes the table committed (and has not forgotten)."""
        check_table_id(table_id)
        ids = check_request_ids(request_ids, MAX_STORED_REQUEST_ID)
        out: dict[str, int] = {}
        with self._tx(write=False) as tx:
            for chunk in chunks(ids):
                rows = tx.run("SELECT request_id, snapshot_id FROM lsmlake_writes WHERE table_id = ? "
                              f"AND request_id IN ({marks(len(chunk))})", (table_id, *chunk)).fetchall()
                out.update((r[0], int(r[1])) for r in rows)
        return out

    def forget_writes(self, recorded_before_ms: int) -> int:
        """Forget the client writes recorded before a time (of every table); how many were forgotten."""
        check_int(recorded_before_ms, "time")
        with self._tx(write=True) as tx:
            return int(tx.run("DELETE FROM lsmlake_writes WHERE created_ms < ?",
                              (recorded_before_ms,)).rowcount)

    # -- sequence numbers --------------------------------------------------------------------------

    def sequences_synced_to(self, table_id: str) -> int | None:
        """The newest snapshot whose files the table's sequence counters are known to be above (None: never synced)."""
        check_table_id(table_id)
        with self._tx(write=False) as tx:
            row = tx.run("SELECT snapshot_id FROM lsmlake_sequence_sync WHERE table_id = ?",
                         (table_id,)).fetchone()
        return None if row is None else int(row[0])

    def allocate_sequences(self, table_id: str, counts: Mapping[tuple[bytes, int], int],
                           floors: Mapping[tuple[bytes, int], int],
                           synced_to: int | None) -> dict[tuple[bytes, int], int]:
        """Hand out `counts[key]` consecutive sequence numbers per (partition, bucket); the first of each range.

        Call it inside the table's `commit_lock`. Every counter is first raised to its `floor` (one above the
        highest number the table's snapshots up to `synced_to` hold), so ranges are monotone per bucket,
        never overlap and never fall below a committed row. `synced_to` is recorded for the next call.
        """
        check_table_id(table_id)
        for (partition, bucket), n in {**floors, **counts}.items():
            check_bytes(partition, "partition")
            check_int(bucket, "bucket")
            check_int(n, "sequence count", 0)
        with self._tx(write=True) as tx:
            current = {(bytes(r[0]), int(r[1])): int(r[2]) for r in tx.run(
                "SELECT partition_bytes, bucket, next_sequence FROM lsmlake_sequences WHERE table_id = ?",
                (table_id,)).fetchall()}
            wanted = {k: max(current.get(k, 0), floors.get(k, 0)) for k in {*current, *floors, *counts}}
            first = {k: wanted[k] for k in counts}
            for k, n in counts.items():
                wanted[k] += n
            for (partition, bucket), value in wanted.items():
                if current.get((partition, bucket)) != value:
                    tx.run("INSERT INTO lsmlake_sequences (table_id, partition_bytes, bucket, next_sequence) "
                           "VALUES (?, ?, ?, ?) ON CONFLICT (table_id, partition_bytes, bucket) "
                           "DO UPDATE SET next_sequence = excluded.next_sequence",
                           (table_id, partition, bucket, value))
            if synced_to is not None:
                tx.run("INSERT INTO lsmlake_sequence_sync (table_id, snapshot_id) VALUES (?, ?) "
                       "ON CONFLICT (table_id) DO UPDATE SET snapshot_id = excluded.snapshot_id",
                       (table_id, synced_to))
        return first
