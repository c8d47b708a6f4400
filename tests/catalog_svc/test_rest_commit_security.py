"""A REST commit can do no more than its caller's role allows, whatever the snapshot it sends says.

Three ways a valid writer token misused the REST `commit`, each refused (or neutralised) here through a real
catalog with a REST port and tokens of two writers, a service and an admin:
- an index manifest that adds or removes a HASH index file of a dynamic-bucket table: only the bucket assigner
  (role service) writes the HASH index, a writer's own HASH file could put a key in two buckets;
- a `timeMillis` in the year 9999: the catalog stamps the time it publishes, so age-based expiration and time
  travel keep working;
- an empty commit under another principal's bare commit user (a Flink job's) with a huge identifier: Paimon's
  committers would drop the job's checkpointed data on restore; the first principal to use a bare user on a
  table owns it there.
"""

from __future__ import annotations

import dataclasses
import json
import secrets
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

from lsmlake.catalog.expire import expire_snapshots
from lsmlake.catalog.filesystem import FileSystemCatalog
from lsmlake.format.index_manifest import HASH_INDEX, IndexEntry
from lsmlake.format.snapshot import Snapshot
from lsmlake.rpc.security import ServerSecurity
from lsmlake.table.file_store_table import FileStoreTable
from tests.support.local_server import Local, local_server
from tests.support.paimon_rest import call, check_error, table_path, table_state

#: principal -> role; two writers, so that one can try to take the other's commit users
PRINCIPALS = {"flink-writer": "writer", "other-writer": "writer", "writer-svc": "service", "root": "admin"}
YEAR_9999_MS = 253_402_300_799_999


@dataclasses.dataclass
class Served:
    local: Local
    port: int
    tokens: dict[str, str]  # principal -> token

    @property
    def warehouse(self) -> str:
        return self.local.warehouse

    def table(self, tid: str) -> FileStoreTable:
        return FileSystemCatalog(self.warehouse).get_table(tid)

    def commit(self, tid: str, snap: Snapshot, principal: str) -> Any:
        db, name = tid.split(".")
        body = {"tableId": self.table(tid).table_uuid, "snapshot": json.loads(snap.to_json()), "statistics": []}
        return call(self.port, "POST", table_path(db, name) + "/commit", body, token=self.tokens[principal])


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    root = Path(tmp_path_factory.mktemp("rest-commit-security"))
    tokens = {p: secrets.token_urlsafe(24) for p in PRINCIPALS}
    token_file = root / "tokens.json"
    token_file.write_text(json.dumps({"tokens": [{"principal": p, "role": r, "token": tokens[p]}
                                                 for p, r in PRINCIPALS.items()]}))
    with local_server(str(root / "wh"), rest_port=0, security=ServerSecurity(auth_tokens=str(token_file)),
                      expire_interval_s=0, orphan_interval_s=0, reconcile_interval_s=0) as local:
        assert local.server.rest_port is not None
        yield Served(local, local.server.rest_port, tokens)


def _create(served: Served, name: str, primary_keys: list[str] | None = None,
            options: dict[str, str] | None = None) -> FileStoreTable:
    cat = FileSystemCatalog(served.warehouse)
    cat.create_database("db", ignore_if_exists=True)
    t = cat.create_table(f"db.{name}", "id BIGINT NOT NULL, v STRING", primary_keys=primary_keys or ["id"],
                         options={"bucket": "1", **(options or {})})
    t.write_arrow(pa.table({"id": pa.array([1, 2, 3, 4, 5], pa.int64()), "v": ["a", "b", "c", "d", "e"]}))
    return cat.get_table(f"db.{name}")


def next_snapshot(t: FileStoreTable, user: str, identifier: int, index_manifest: str | None = None,
                  time_millis: int | None = None) -> Snapshot:
    """The next snapshot of `t` as a REST client builds an empty APPEND: the latest's files, no data change (the
    latest index manifest unless `index_manifest` is given)."""
    latest = t.snapshots.latest()
    assert latest is not None
    base, base_size = t.manifests.write_list(
        t.manifests.snapshot_manifests(latest.base_manifest_list, latest.delta_manifest_list))
    delta, delta_size = t.manifests.write_list([])
    return dataclasses.replace(
        latest, id=latest.id + 1, base_manifest_list=base, base_manifest_list_size=base_size,
        delta_manifest_list=delta, delta_manifest_list_size=delta_size, commit_kind="APPEND", commit_user=user,
        commit_identifier=identifier, delta_record_count=0, changelog_manifest_list=None,
        changelog_manifest_list_size=None, changelog_record_count=None,
        index_manifest=index_manifest if index_manifest is not None else latest.index_manifest, properties=None,
        time_millis=time_millis if time_millis is not None else int(time.time() * 1000), uuid=str(uuid.uuid4()))


def _published(served: Served, answer: Any) -> None:
    assert (answer.status, answer.json()) == (200, {"success": True}), answer.text


def _refused(served: Served, tid: str, snap: Snapshot, principal: str, status: int = 403) -> str:
    before = table_state(served.warehouse, tid)
    body = check_error(served.commit(tid, snap, principal), status, what=f"{principal} commit")
    assert table_state(served.warehouse, tid) == before, f"{principal}: refused, but the table changed"
    return str(body["message"])


# -- item 1: the HASH index is the bucket assigner's ------------------------------------------------------------


def _hash_entries(t: FileStoreTable) -> list[IndexEntry]:
    latest = t.snapshots.latest()
    assert latest is not None
    entries = t.indexes.read(latest.index_manifest)
    assert any(e.index_type == HASH_INDEX for e in entries)
    return entries


def _with_new_hash_bucket(t: FileStoreTable) -> str:
    """An index manifest of `t`: the latest one plus a HASH file of a new bucket holding a key hash of its own."""
    entries = _hash_entries(t)
    data = np.array([123_456_789], dtype=">i4").tobytes()
    name = t.indexes.write_index_file(data)
    bucket = max(e.bucket for e in entries) + 1
    return t.indexes.write([*entries, IndexEntry(entries[0].partition, bucket, HASH_INDEX, name, len(data), 1)])


def test_a_writer_cannot_add_or_remove_hash_index_files(served: Served) -> None:
    t = _create(served, "dyn", primary_keys=["id"], options={"bucket": "-1", "dynamic-bucket.target-row-num": "2"})
    entries = _hash_entries(t)
    added = next_snapshot(t, "rest-writer", 1, _with_new_hash_bucket(t))
    assert "HASH index" in _refused(served, "db.dyn", added, "flink-writer")
    removed = next_snapshot(t, "rest-writer", 2, t.indexes.write(entries[1:]))
    assert "HASH index" in _refused(served, "db.dyn", removed, "flink-writer")
    # the bucket assigner's role may: the same addition, sent with the service's token, is published
    _published(served, served.commit("db.dyn", next_snapshot(t, "assigner", 3, _with_new_hash_bucket(t)),
                                     "writer-svc"))
    latest = served.table("db.dyn").snapshots.latest()
    assert latest is not None and latest.commit_user == "assigner"
    assert len([e for e in served.table("db.dyn").indexes.read(latest.index_manifest)
                if e.index_type == HASH_INDEX]) == len(entries) + 1


# -- item 3: the catalog's clock dates what it publishes --------------------------------------------------------


def test_a_snapshot_dated_in_9999_is_published_with_the_catalogs_time(served: Served) -> None:
    t = _create(served, "timed")
    now = int(time.time() * 1000)
    sent = next_snapshot(t, "dater", 1, time_millis=YEAR_9999_MS)
    _published(served, served.commit("db.timed", sent, "flink-writer"))
    t = served.table("db.timed")
    forged = t.snapshots.latest()
    assert forged is not None and forged.commit_user == "dater"
    assert abs(forged.time_millis - now) < 60_000, forged.time_millis
    # a resend after a lost answer is still recognised as the snapshot published (the time is not compared)
    _published(served, served.commit("db.timed", sent, "flink-writer"))
    assert served.table("db.timed").snapshots.latest_id() == forged.id
    # age-based expiration gets past it: with a later snapshot, everything older than a second ago expires
    t.write_arrow(pa.table({"id": pa.array([9], pa.int64()), "v": ["z"]}))
    t = served.table("db.timed")
    latest_id = t.snapshots.latest_id()
    result = expire_snapshots(t, now_ms=int(time.time() * 1000) + 3_600_000, retain_min=1, time_retained_ms=1_000)
    assert forged.id in result.expired_snapshots
    assert served.table("db.timed").snapshots.ids() == [latest_id]


def test_a_published_time_is_never_before_the_latest_snapshots(served: Served) -> None:
    """The clock is the catalog's (injected here): one running behind the latest snapshot does not date a new
    snapshot before it, whatever the client sent."""
    t = _create(served, "behind")
    latest = t.snapshots.latest()
    assert latest is not None
    commits = served.local.server._operations.writes.commits
    clock = commits.clock
    commits.clock = lambda: 1_000  # far behind: 1970
    try:
        _published(served, served.commit("db.behind", next_snapshot(t, "early", 1, time_millis=5), "flink-writer"))
    finally:
        commits.clock = clock
    published = served.table("db.behind").snapshots.latest()
    assert published is not None and published.time_millis == latest.time_millis


# -- item 4: a bare commit user belongs to the principal that used it first on a table ---------------------------


def test_another_principal_cannot_commit_under_a_claimed_commit_user(served: Served) -> None:
    t = _create(served, "claimed")
    _published(served, served.commit("db.claimed", next_snapshot(t, "flink-job-1", 5), "flink-writer"))
    t = served.table("db.claimed")
    message = _refused(served, "db.claimed", next_snapshot(t, "flink-job-1", 2**62), "other-writer")
    assert "flink-job-1" in message and "another principal" in message, message
    # nor an admin: the job's checkpoints are lost just the same
    _refused(served, "db.claimed", next_snapshot(t, "flink-job-1", 2**62), "root")
    _published(served, served.commit("db.claimed", next_snapshot(t, "flink-job-1", 6), "flink-writer"))
    # other users stay free for the other writer
    _published(served, served.commit("db.claimed", next_snapshot(served.table("db.claimed"), "spark-job-1", 1),
                                     "other-writer"))


def test_claims_are_per_table_and_dropped_with_the_table(served: Served) -> None:
    t = _create(served, "first")
    other = _create(served, "second")
    _published(served, served.commit("db.first", next_snapshot(t, "job", 1), "flink-writer"))
    # the same name on another table is another table's user
    _published(served, served.commit("db.second", next_snapshot(other, "job", 1), "other-writer"))
    answer = call(served.port, "DELETE", table_path("db", "first"), token=served.tokens["root"])
    assert answer.status in (200, 204), answer.text
    t = _create(served, "first")  # a new table of that name: its users are free again
    _published(served, served.commit("db.first", next_snapshot(t, "job", 1), "other-writer"))


def test_claims_move_with_a_renamed_table(served: Served) -> None:
    t = _create(served, "before")
    _published(served, served.commit("db.before", next_snapshot(t, "flink-job-2", 1), "flink-writer"))
    answer = call(served.port, "POST", "/v1/tables/rename", {"source": {"database": "db", "object": "before"},
                                                             "destination": {"database": "db", "object": "after"}},
                  token=served.tokens["root"])
    assert answer.status in (200, 204), answer.text
    t = served.table("db.after")
    assert "another principal" in _refused(served, "db.after", next_snapshot(t, "flink-job-2", 2**62), "other-writer")
    _published(served, served.commit("db.after", next_snapshot(t, "flink-job-2", 2), "flink-writer"))
