"""The tables of the metadata store, written once for both backends."""

from __future__ import annotations

from lsmlake.format.snapshot import BATCH_COMMIT_IDENTIFIER


def schema_ddl(serial_id: str, blob: str, bigint: str) -> list[str]:
    """CREATE ... IF NOT EXISTS statements, given the backend's auto-increment id column, binary and 64-bit types."""
    return [
        "CREATE TABLE IF NOT EXISTS lsmlake_schema_version ("
        " id INTEGER PRIMARY KEY CHECK (id = 1), version INTEGER NOT NULL,"
        f" updated_ms {bigint} NOT NULL)",
        # one row per snapshot the catalog committed; (user, identifier, kind) finds a retried commit
        "CREATE TABLE IF NOT EXISTS lsmlake_commits ("
        f" table_id TEXT NOT NULL, snapshot_id {bigint} NOT NULL, commit_user TEXT NOT NULL,"
        f" commit_identifier {bigint} NOT NULL, commit_kind TEXT NOT NULL, created_ms {bigint} NOT NULL,"
        " PRIMARY KEY (table_id, snapshot_id))",
        # batch commits all share one identifier: they are never matched, so never unique
        "CREATE UNIQUE INDEX IF NOT EXISTS lsmlake_commits_by_key"
        " ON lsmlake_commits (table_id, commit_user, commit_identifier, commit_kind)"
        f" WHERE commit_identifier <> {BATCH_COMMIT_IDENTIFIER}",
        # the client writes (by request id) each commit held, to answer a resent write with its first snapshot
        "CREATE TABLE IF NOT EXISTS lsmlake_writes ("
        f" table_id TEXT NOT NULL, request_id TEXT NOT NULL, snapshot_id {bigint} NOT NULL,"
        f" created_ms {bigint} NOT NULL, PRIMARY KEY (table_id, request_id))",
        "CREATE INDEX IF NOT EXISTS lsmlake_writes_by_age ON lsmlake_writes (created_ms)",
        # the principal that first committed under a bare commit user of a table owns that user there
        "CREATE TABLE IF NOT EXISTS lsmlake_commit_users ("
        " table_id TEXT NOT NULL, commit_user TEXT NOT NULL, principal TEXT NOT NULL,"
        f" created_ms {bigint} NOT NULL, PRIMARY KEY (table_id, commit_user))",
        # the sequence-number authority: the next number each (partition, bucket) of a table hands out, never
        # below what the table's snapshots hold (raised from them up to `lsmlake_sequence_sync.snapshot_id`)
        "CREATE TABLE IF NOT EXISTS lsmlake_sequences ("
        f" table_id TEXT NOT NULL, partition_bytes {blob} NOT NULL, bucket INTEGER NOT NULL,"
        f" next_sequence {bigint} NOT NULL, PRIMARY KEY (table_id, partition_bytes, bucket))",
        "CREATE TABLE IF NOT EXISTS lsmlake_sequence_sync ("
        f" table_id TEXT NOT NULL PRIMARY KEY, snapshot_id {bigint} NOT NULL)",
        "CREATE TABLE IF NOT EXISTS lsmlake_outbox ("
        f" event_id {serial_id}, table_id TEXT NOT NULL, snapshot_id {bigint} NOT NULL, topic TEXT NOT NULL,"
        f" event_key {blob} NOT NULL, payload {blob} NOT NULL, created_ms {bigint} NOT NULL,"
        f" delivered_ms {bigint})",
        "CREATE INDEX IF NOT EXISTS lsmlake_outbox_pending ON lsmlake_outbox (event_id) WHERE delivered_ms IS NULL",
        # the retention purge deletes the oldest delivered events in batches without scanning the table
        "CREATE INDEX IF NOT EXISTS lsmlake_outbox_delivered ON lsmlake_outbox (delivered_ms)"
        " WHERE delivered_ms IS NOT NULL",
        "CREATE TABLE IF NOT EXISTS lsmlake_plans ("
        f" plan_id {serial_id}, table_id TEXT NOT NULL, partition_bytes {blob} NOT NULL,"
        " bucket INTEGER NOT NULL, input_files TEXT NOT NULL, output_level INTEGER NOT NULL, state TEXT NOT NULL"
        " CHECK (state IN ('REQUESTED', 'INFLIGHT', 'COMPLETED', 'ROLLED_BACK', 'ABANDONED')), owner TEXT,"
        f" attempts INTEGER NOT NULL, snapshot_id {bigint}, reason TEXT, created_ms {bigint} NOT NULL,"
        f" updated_ms {bigint} NOT NULL, started_ms {bigint}, detail {blob} NOT NULL)",
        "CREATE INDEX IF NOT EXISTS lsmlake_plans_by_table ON lsmlake_plans (table_id, state)",
        # the compactors look for every table's REQUESTED plans at once: without it, that reads every plan ever made
        "CREATE INDEX IF NOT EXISTS lsmlake_plans_by_state ON lsmlake_plans (state)",
        # the input files of pending plans only: the primary key keeps a file out of two pending plans
        "CREATE TABLE IF NOT EXISTS lsmlake_plan_files ("
        f" table_id TEXT NOT NULL, file_name TEXT NOT NULL, plan_id {bigint} NOT NULL"
        " REFERENCES lsmlake_plans (plan_id), PRIMARY KEY (table_id, file_name))",
        "CREATE INDEX IF NOT EXISTS lsmlake_plan_files_by_plan ON lsmlake_plan_files (plan_id)",
        # the last heartbeat of each catalog, writer and compactor process (`services.ServiceRegistry`): in the
        # store, so that every catalog replica shows the same services
        "CREATE TABLE IF NOT EXISTS lsmlake_services ("
        " kind TEXT NOT NULL, instance_id TEXT NOT NULL, address TEXT NOT NULL,"
        f" started_ms {bigint} NOT NULL, last_ms {bigint} NOT NULL, interval_ms {bigint} NOT NULL,"
        " stopping INTEGER NOT NULL, status TEXT NOT NULL, PRIMARY KEY (kind, instance_id))",
    ]
