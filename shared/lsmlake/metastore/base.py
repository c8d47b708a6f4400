"""The catalog's metadata store: per-table commit locks, commit records and commit-user claims, an event outbox
and compaction timelines.

One interface, two backends chosen by URL (`open_store`):
- `sqlite:///abs/path/meta.db` (or `sqlite:relative/meta.db`): the embedded default, one file in WAL mode;
  a commit lock is the database-wide write lock (BEGIN IMMEDIATE), so commits of all tables take turns;
- `postgresql://user@host:port/db?schema=name`: shared by several catalog replicas; a commit lock is a
  transaction-scoped advisory lock on a hash of the table id, so only commits of one table take turns.

Transactions. `commit_lock(table_id)` opens a transaction on the calling thread and holds the table's lock
until the block ends; every store method (`store.outbox.add_event`, ...) called on that thread inside the
block joins this transaction, so a commit record, its outbox events and the completion of its compaction
plan commit together with whatever the catalog does under the lock (it runs lsmlake's FileStoreCommit
there), or not at all. Outside a `commit_lock` block every method runs in a short transaction of its own.

Outbox (`store.outbox`). Events are delivered at least once: a relay reads `pending_events`, publishes
them, then calls `mark_delivered`; a crash in between publishes them again. Within one table, event ids
grow in commit order. Retention is the caller's: `purge_delivered` and `purge_undelivered` delete old
events in bounded batches.

Timeline (`store.plans`, Hudi style). `request_plan` REQUESTED -> `start_plan` INFLIGHT -> `complete_plan`
COMPLETED; `rollback_plan` returns an INFLIGHT plan of a dead compactor to REQUESTED (the caller deletes
its uncommitted outputs), `abandon_plan` ends a plan whose inputs are gone. The input files of a pending
(REQUESTED or INFLIGHT) plan cannot be in another pending plan: a unique key enforces this across replicas.
"""

from __future__ import annotations

from lsmlake.metastore.checks import check_table_id
from lsmlake.metastore.commit_records import CommitRecords
from lsmlake.metastore.commit_users import CommitUserClaims
from lsmlake.metastore.outbox import Outbox
from lsmlake.metastore.plans import CompactionPlans
from lsmlake.metastore.transactions import TransactionalStore


class MetaStore(TransactionalStore):
    """The metadata store interface; `open_store(url)` picks the backend.

    Its tables come in groups, each joining the store's transactions: `commits` (commit records, client
    writes, sequence counters), `commit_users` (commit-user claims), `outbox` (events) and `plans`
    (the compaction timeline).
    """

    def __init__(self, url: str, busy_timeout: float, max_idle: int) -> None:
        super().__init__(url, busy_timeout, max_idle)
        self.commits = CommitRecords(self)
        self.commit_users = CommitUserClaims(self)
        self.outbox = Outbox(self)
        self.plans = CompactionPlans(self)

    def forget_table(self, table_id: str) -> None:
        """Drop what the store keeps of a table (commits, plans, sequence counters, commit-user claims); undelivered
        events are still sent.

        Call it inside the table's `commit_lock` when the table is dropped, so that a new table of the same
        name starts with no history.
        """
        check_table_id(table_id)
        with self.session(write=True) as tx:
            tx.run("DELETE FROM lsmlake_commits WHERE table_id = ?", (table_id,))
            tx.run("DELETE FROM lsmlake_writes WHERE table_id = ?", (table_id,))
            tx.run("DELETE FROM lsmlake_commit_users WHERE table_id = ?", (table_id,))
            tx.run("DELETE FROM lsmlake_sequences WHERE table_id = ?", (table_id,))
            tx.run("DELETE FROM lsmlake_sequence_sync WHERE table_id = ?", (table_id,))
            tx.run("DELETE FROM lsmlake_plan_files WHERE table_id = ?", (table_id,))
            tx.run("DELETE FROM lsmlake_plans WHERE table_id = ?", (table_id,))
