"""Claims on commit users: which principal first committed under a bare commit user of a table.

Paimon's committers trust a commit user's identifiers: on restore a job drops the checkpointed data whose
identifier is not above the latest snapshot of its user. A commit user named by a client without a
principal's namespace (a Flink or Spark job's, over REST) is therefore owned by the first principal that
commits under it on the table; the catalog refuses it to every other principal. Claims are per table name,
forgotten with the table (`forget_table`) and moved with it when it is renamed.
"""

from __future__ import annotations

from lsmlake.errors import InvalidInputError
from lsmlake.metastore.checks import check_table_id
from lsmlake.metastore.transactions import StoreTables, now_ms


def _check_name(value: str, what: str) -> str:
    if not isinstance(value, str) or not value:
        raise InvalidInputError(f"{what} {value!r} must be a non-empty string")
    return value


class CommitUserClaims(StoreTables):
    """The commit-user claims table of the store."""

    def claim_commit_user(self, table_id: str, commit_user: str, principal: str) -> str:
        """The principal owning `commit_user` on the table, claiming it for `principal` when nobody has.

        Call it inside the table's `commit_lock`, in the transaction of the commit: the claim commits with it
        (or rolls back with it), and a principal racing for the same user waits for the lock and finds the claim.
        """
        check_table_id(table_id)
        _check_name(commit_user, "commit user")
        _check_name(principal, "principal")
        with self._tx(write=True) as tx:
            # the primary key settles a race the lock did not serialise (no lock held): one insert wins
            tx.run("INSERT INTO lsmlake_commit_users (table_id, commit_user, principal, created_ms) "
                   "VALUES (?, ?, ?, ?) ON CONFLICT (table_id, commit_user) DO NOTHING",
                   (table_id, commit_user, principal, now_ms()))
            row = tx.run("SELECT principal FROM lsmlake_commit_users WHERE table_id = ? AND commit_user = ?",
                         (table_id, commit_user)).fetchone()
        return str(row[0])

    def commit_user_owner(self, table_id: str, commit_user: str) -> str | None:
        """The principal that claimed `commit_user` on the table; None when nobody has."""
        check_table_id(table_id)
        with self._tx(write=False) as tx:
            row = tx.run("SELECT principal FROM lsmlake_commit_users WHERE table_id = ? AND commit_user = ?",
                         (table_id, commit_user)).fetchone()
        return None if row is None else str(row[0])

    def move_commit_users(self, table_id: str, new_table_id: str) -> None:
        """The claims of a renamed table, under its new name (inside both names' commit locks)."""
        check_table_id(table_id)
        check_table_id(new_table_id)
        with self._tx(write=True) as tx:
            tx.run("DELETE FROM lsmlake_commit_users WHERE table_id = ?", (new_table_id,))
            tx.run("UPDATE lsmlake_commit_users SET table_id = ? WHERE table_id = ?",
                   (new_table_id, table_id))
