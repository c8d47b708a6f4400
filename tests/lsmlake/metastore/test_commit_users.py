"""Claims on bare commit users, on both backends: the first principal to use a user on a table owns it there, a
claim commits or rolls back with its commit, two principals racing for one user cannot both win, and a table's
claims go when it is forgotten (or move with it when it is renamed)."""

from __future__ import annotations

import threading

import pytest

from lsmlake.errors import InvalidInputError
from lsmlake.metastore import MetaStore, open_store

T = "db.t"


def test_the_first_principal_owns_a_user(store: MetaStore) -> None:
    assert store.commit_users.commit_user_owner(T, "flink-job-1") is None
    with store.commit_lock(T):
        assert store.commit_users.claim_commit_user(T, "flink-job-1", "alice") == "alice"
    with store.commit_lock(T):
        # claiming again changes nothing
        assert store.commit_users.claim_commit_user(T, "flink-job-1", "alice") == "alice"
        assert store.commit_users.claim_commit_user(T, "flink-job-1", "bob") == "alice"  # nor does another principal
    assert store.commit_users.commit_user_owner(T, "flink-job-1") == "alice"
    with store.commit_lock("db.other"):  # another table's user of the same name is another user
        assert store.commit_users.claim_commit_user("db.other", "flink-job-1", "bob") == "bob"
    with pytest.raises(InvalidInputError, match="commit user"):
        store.commit_users.claim_commit_user(T, "", "alice")
    with pytest.raises(InvalidInputError, match="principal"):
        store.commit_users.claim_commit_user(T, "u", "")


def test_a_claim_rolls_back_with_its_commit(store: MetaStore) -> None:
    with pytest.raises(RuntimeError), store.commit_lock(T):
        store.commit_users.claim_commit_user(T, "u", "alice")
        raise RuntimeError("the commit failed")
    assert store.commit_users.commit_user_owner(T, "u") is None


def test_two_principals_racing_for_a_user_cannot_both_win(store_url: str) -> None:
    owners: list[str] = []
    errors: list[BaseException] = []
    start = threading.Barrier(8)

    def claim(principal: str) -> None:
        try:
            with open_store(store_url) as s:
                start.wait()
                with s.commit_lock(T):
                    owners.append(s.commit_users.claim_commit_user(T, "job", principal))
        except BaseException as e:
            errors.append(e)

    threads = [threading.Thread(target=claim, args=(f"p{i}",)) for i in range(8)]
    for th in threads:
        th.start()
    for th in threads:
        th.join(60)
    assert errors == []
    assert len(owners) == 8 and len(set(owners)) == 1, owners


def test_claims_are_forgotten_with_the_table_and_move_with_a_rename(store: MetaStore) -> None:
    with store.commit_lock(T):
        store.commit_users.claim_commit_user(T, "u", "alice")
        store.commit_users.claim_commit_user(T, "v", "bob")
    with store.commit_lock(T), store.commit_lock("db.renamed"):
        store.commit_users.move_commit_users(T, "db.renamed")
    assert store.commit_users.commit_user_owner(T, "u") is None
    assert store.commit_users.commit_user_owner("db.renamed", "u") == "alice"
    with store.commit_lock("db.renamed"):
        store.forget_table("db.renamed")
    assert store.commit_users.commit_user_owner("db.renamed", "u") is None
    assert store.commit_users.commit_user_owner("db.renamed", "v") is None
