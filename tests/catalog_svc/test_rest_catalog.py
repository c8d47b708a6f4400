"""The catalog's Paimon REST API with the real clients: pypaimon 2.1.0 writes and reads, paimon-rust 0.4.0 reads,
through a real catalog server on a loopback port (in this process; the compactor service end to end is
tests/integration/test_rest_engines.py).

Each pypaimon commit becomes a snapshot recorded with its events like a gRPC commit; lsmlake's compaction
(committed through the catalog) makes a deletion-vector table's level-0 rows visible to pypaimon, which reads
exactly the model's rows; a commit that loses its snapshot id to a compaction is answered `success: false`,
and pypaimon's retry lands once.
"""

from __future__ import annotations

import itertools
import tempfile
from collections.abc import Iterator
from typing import Any

import pyarrow as pa
import pytest

from lsmlake.catalog.commit.request import CommitRequest
from lsmlake.catalog.filesystem import FileSystemCatalog
from lsmlake.format.snapshot import APPEND, COMPACT
from lsmlake.table.compact import compact_buckets
from tests.support.local_server import Local, local_server
from tests.support.pypaimon_io import read, write

pypaimon = pytest.importorskip("pypaimon", reason="pypaimon (the test extra) is not installed")

TOKEN = "rest-client-token-0001"
_COMPACTIONS = itertools.count(1)


@pytest.fixture()
def served() -> Iterator[tuple[Local, dict[str, str]]]:
    with tempfile.TemporaryDirectory() as wh, local_server(wh, rest_port=0) as local:
        port = local.server.rest_port
        yield local, {"metastore": "rest", "uri": f"http://127.0.0.1:{port}", "warehouse": "lake",
                      "token.provider": "bear", "token": TOKEN}


def _catalog(options: dict[str, str]) -> Any:
    return pypaimon.CatalogFactory.create(options)


def _create(cat: Any, name: str, fields: list[pa.Field], primary_keys: list[str] | None = None,
            options: dict[str, str] | None = None, partition_keys: list[str] | None = None) -> Any:
    cat.create_database("db", True)
    schema = pypaimon.Schema.from_pyarrow_schema(pa.schema(fields), partition_keys=partition_keys,
                                                 primary_keys=primary_keys, options=options or {})
    cat.create_table(f"db.{name}", schema, False)
    return cat.get_table(f"db.{name}")


def _read(cat: Any, name: str) -> list[dict[str, Any]]:
    return sorted(read(cat.get_table(f"db.{name}")).to_pylist(), key=lambda r: r["id"])


def _read_rust(options: dict[str, str], name: str) -> list[dict[str, Any]]:
    datafusion = pytest.importorskip("pypaimon_rust.datafusion", reason="pypaimon-rust (the test extra) is missing")
    rb = datafusion.PaimonCatalog(options).get_table(f"db.{name}").new_read_builder()
    batches = rb.new_read().read(rb.new_scan().plan().splits())
    return sorted(pa.Table.from_batches(batches).to_pylist(), key=lambda r: r["id"]) if batches else []


def _compact(local: Local, name: str) -> int:
    """A full compaction by lsmlake, committed through the catalog like the compactor's; its snapshot id."""
    table = FileSystemCatalog(local.warehouse).get_table(f"db.{name}")
    _, messages = compact_buckets(table, full=True)
    assert messages, "nothing to compact"
    outcome = local.server._operations.writes.commits.commit(  # type: ignore[union-attr]
        CommitRequest(f"db.{name}", COMPACT, "test-compactor", next(_COMPACTIONS), messages))
    return outcome.snapshot_id


def _events(local: Local, name: str) -> list[tuple[int, str]]:
    """(snapshot id, kind) of every snapshot the catalog recorded for the table, in order."""
    table = FileSystemCatalog(local.warehouse).get_table(f"db.{name}")
    store = local.server._store
    assert store is not None
    recorded = store.commits.last_recorded_snapshot(f"db.{name}") or 0
    return [(s.id, s.commit_kind) for s in table.snapshots.snapshots() if s.id <= recorded]


_ID = pa.field("id", pa.int64(), nullable=False)


def test_deletion_vector_table_written_by_pypaimon_is_read_after_lsmlake_compacts(served: Any) -> None:
    local, options = served
    cat = _catalog(options)
    table = _create(cat, "dv", [_ID, pa.field("v", pa.string())], ["id"],
                    {"bucket": "2", "deletion-vectors.enabled": "true"})
    model: dict[int, str] = {}
    for r in range(4):
        ids = list(range(r * 5, r * 5 + 10))  # each round overwrites half of the previous round's keys
        write(table, pa.table({"id": pa.array(ids, pa.int64()), "v": [f"r{r}"] * len(ids)}))
        model.update((i, f"r{r}") for i in ids)
    expected = [{"id": k, "v": v} for k, v in sorted(model.items())]
    # pypaimon writes level 0 only, which a deletion-vector read skips: nothing is visible before a compaction
    assert _read(cat, "dv") == []
    assert _events(local, "dv") == [(1, APPEND), (2, APPEND), (3, APPEND), (4, APPEND)]
    assert _compact(local, "dv") == 5
    assert _read(cat, "dv") == expected
    assert _read_rust(options, "dv") == expected
    # more pypaimon commits build on lsmlake's compaction
    write(cat.get_table("db.dv"), pa.table({"id": pa.array([0, 100], pa.int64()), "v": ["late", "late"]}))
    model.update({0: "late", 100: "late"})
    _compact(local, "dv")
    assert _read(cat, "dv") == [{"id": k, "v": v} for k, v in sorted(model.items())]
    assert [k for _, k in _events(local, "dv")] == [APPEND] * 4 + [COMPACT, APPEND, COMPACT]


def test_append_and_partial_update_tables(served: Any) -> None:
    local, options = served
    cat = _catalog(options)
    log = _create(cat, "log", [_ID, pa.field("dt", pa.string()), pa.field("n", pa.int64())],
                  partition_keys=["dt"], options={"bucket": "-1"})
    rows = [{"id": i, "dt": f"d{i % 2}", "n": i * i} for i in range(20)]
    for part in (rows[:7], rows[7:]):
        write(log, pa.Table.from_pylist(part, schema=pa.schema([_ID, ("dt", pa.string()), ("n", pa.int64())])))
    assert _read(cat, "log") == rows
    assert _read_rust(options, "log") == rows
    specs = sorted(p.spec["dt"] for p in cat.list_partitions_paged("db.log").elements)
    assert specs == ["d0", "d1"]

    pu = _create(cat, "pu", [_ID, pa.field("a", pa.string()), pa.field("b", pa.int64())], ["id"],
                 {"bucket": "1", "merge-engine": "partial-update"})
    schema = pa.schema([_ID, ("a", pa.string()), ("b", pa.int64())])
    write(pu, pa.Table.from_pylist([{"id": 1, "a": "x", "b": None}, {"id": 2, "a": None, "b": 20}], schema=schema))
    write(pu, pa.Table.from_pylist([{"id": 1, "a": None, "b": 10}, {"id": 2, "a": "y", "b": None}], schema=schema))
    merged = [{"id": 1, "a": "x", "b": 10}, {"id": 2, "a": "y", "b": 20}]
    assert _read(cat, "pu") == merged  # pypaimon merges level 0 itself when the table has no deletion vectors
    _compact(local, "pu")
    assert _read(cat, "pu") == merged
    assert _read_rust(options, "pu") == merged
    files = FileSystemCatalog(local.warehouse).get_table("db.pu").plan()
    assert [f.level for s in files for f in s.files] == [5]  # one sorted run after the full compaction


def test_commit_that_loses_its_id_to_a_compaction_is_retried_and_lands_once(served: Any) -> None:
    local, options = served
    cat = _catalog(options)
    table = _create(cat, "race", [_ID, pa.field("v", pa.string())], ["id"], {"bucket": "1"})
    write(table, pa.table({"id": pa.array([1, 2], pa.int64()), "v": ["a", "a"]}))
    write(table, pa.table({"id": pa.array([2, 3], pa.int64()), "v": ["b", "b"]}))
    assert local.server._operations is not None
    service = local.server._operations.writes
    original = service.commit_snapshot
    answers: list[bool] = []

    def compaction_first(request: Any) -> bool:
        if not answers:  # the compactor commits between pypaimon's read of the latest snapshot and its commit
            _compact(local, "race")
        answers.append(original(request))
        return answers[-1]

    service.commit_snapshot = compaction_first  # type: ignore[method-assign]
    write(cat.get_table("db.race"), pa.table({"id": pa.array([3, 4], pa.int64()), "v": ["c", "c"]}))
    assert answers == [False, True]  # refused as a lost race (HTTP 200, success false), then landed on retry
    snaps = FileSystemCatalog(local.warehouse).get_table("db.race").snapshots.snapshots()
    assert [s.commit_kind for s in snaps] == [APPEND, APPEND, COMPACT, APPEND]
    assert snaps[-1].total_record_count == 3 + 2  # the 3 compacted rows and the 2 new ones, counted once
    assert _read(cat, "race") == [{"id": 1, "v": "a"}, {"id": 2, "v": "b"}, {"id": 3, "v": "c"},
                                  {"id": 4, "v": "c"}]
    metric = local.server.metrics.conflicts.labels(APPEND)._value.get()
    assert metric == 1


def test_tables_are_defined_altered_listed_tagged_renamed_and_dropped(served: Any) -> None:
    from pypaimon.schema.data_types import AtomicType
    from pypaimon.schema.schema_change import SchemaChange

    local, options = served
    cat = _catalog(options)
    table = _create(cat, "t", [_ID, pa.field("v", pa.string())], ["id"], {"bucket": "1"})
    assert cat.load_snapshot("db.t") is None  # an empty table: no snapshot, not "no table"
    write(table, pa.table({"id": pa.array([1], pa.int64()), "v": ["a"]}))
    assert cat.load_snapshot("db.t").snapshot.id == 1
    assert cat.list_tables("db") == ["t"]
    cat.alter_table("db.t", [SchemaChange.add_column("w", AtomicType("BIGINT"))])
    assert [f.name for f in cat.get_table("db.t").table_schema.fields] == ["id", "v", "w"]
    cat.create_tag("db.t", "first")
    assert cat.get_tag("db.t", "first").snapshot.id == 1
    lake = FileSystemCatalog(local.warehouse)
    assert lake.get_table("db.t").io.exists(f"{lake.table_path('db.t')}/tag/tag-first")
    cat.delete_tag("db.t", "first")
    assert not lake.get_table("db.t").io.exists(f"{lake.table_path('db.t')}/tag/tag-first")
    cat.rename_table("db.t", "db.u")
    assert cat.list_tables("db") == ["u"]
    assert _read(cat, "u") == [{"id": 1, "v": "a", "w": None}]
    cat.drop_table("db.u")
    assert cat.list_tables("db") == []
    with pytest.raises(Exception, match="(?i)not exist"):
        cat.get_table("db.u")
