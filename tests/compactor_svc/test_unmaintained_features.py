"""Tables with Paimon features lsmlake does not maintain (primary-key indexes, row tracking, BLOB columns, ...):
every writing and compacting path refuses them naming the option, the compactor reports them instead of planning
them, and manifest fields lsmlake does not model survive its manifest rewrites unchanged."""

from __future__ import annotations

import copy
import io
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import fastavro
import pyarrow as pa
import pytest

from compactor_svc.metrics import CompactorMetrics
from compactor_svc.ownership import Ownership
from compactor_svc.scheduler import Scheduler
from compactor_svc.triggers import FullCompactionTrigger
from lsmlake.catalog.filesystem import FileSystemCatalog
from lsmlake.catalog.health import read_health
from lsmlake.errors import InvalidInputError, LakeError
from lsmlake.format.binary_row import serialize_row
from lsmlake.format.manifest import ManifestEntry, ManifestFileMeta, ManifestStore, partition_stats
from lsmlake.format.schema import SchemaManager
from lsmlake.format.types import DataField, DataType
from lsmlake.proto_gen.lsmlake.v1 import catalog_pb2
from lsmlake.rpc.catalog_client import CompactionTimeline
from lsmlake.spark.compaction_job import SparkCompactor
from lsmlake.table.compact import compact_table
from lsmlake.table.file_store_table import FileStoreTable
from lsmlake.table.postpone import every_bucket


@dataclass(frozen=True)
class Feature:
    """Options (and BLOB columns) a Paimon table may carry, and the word a refusal must name."""

    options: dict[str, str]
    names: str  # the option (or type) the refusal names
    readable: bool  # lsmlake reads such a table correctly
    blob: bool = False  # the table has a BLOB column


# Paimon 2.0's CoreOptions keys (paimon-api/src/main/java/org/apache/paimon/CoreOptions.java) and its BLOB type
FEATURES = {
    "pk-btree": Feature({"pk-btree.index.columns": "v"}, "pk-btree.index.columns", True),
    "pk-bitmap": Feature({"pk-bitmap.index.columns": "v"}, "pk-bitmap.index.columns", True),
    "pk-multivalue": Feature({"pk-multivalue.index.columns": "v"}, "pk-multivalue.index.columns", True),
    "pk-vector": Feature({"pk-vector.index.columns": "v"}, "pk-vector.index.columns", True),
    "pk-full-text": Feature({"pk-full-text.index.columns": "s"}, "pk-full-text.index.columns", True),
    "pk-index-empty-value": Feature({"pk-btree.index.columns": ""}, "pk-btree.index.columns", True),
    "row-tracking": Feature({"row-tracking.enabled": "true"}, "row-tracking.enabled", True),
    "data-evolution": Feature({"row-tracking.enabled": "true", "data-evolution.enabled": "true"},
                              "data-evolution.enabled", True),
    "blob-column": Feature({}, "BLOB", False, blob=True),
    "blob-field": Feature({"blob-field": "s"}, "blob-field", False),
    "blob-descriptor-field": Feature({"blob-descriptor-field": "s"}, "blob-descriptor-field", False),
    "blob-view-field": Feature({"blob-view-field": "s"}, "blob-view-field", False),
    "vector-field": Feature({"vector-field": "v"}, "vector-field", True),
    "pk-clustering-override": Feature({"pk-clustering-override": "true", "clustering.columns": "v"},
                                      "pk-clustering-override", False),
    "chain-table": Feature({"chain-table.enabled": "true"}, "chain-table.enabled", False),
    "index-file-in-data-file-dir": Feature({"index-file-in-data-file-dir": "true"}, "index-file-in-data-file-dir",
                                           False),
}
# the tables each feature is tried on (writers leave compaction to the compactor): a primary-key table, and an
# append table with deletion vectors (for delete_where)
PK = {"bucket": "1", "deletion-vectors.enabled": "true", "write-only": "true"}
APPEND = {"bucket": "-1", "deletion-vectors.enabled": "true", "write-only": "true"}
COLUMNS = "k BIGINT NOT NULL, v BIGINT, s STRING"


def _rows(start: int) -> pa.Table:
    return pa.table({"k": pa.array(range(start, start + 10), pa.int64()),
                     "v": pa.array(range(10), pa.int64()), "s": pa.array([str(i) for i in range(10)])})


def _table(wh: str, name: str, pk: bool, feature: Feature) -> FileStoreTable:
    """A table written twice by lsmlake (two level-0 files, so a compaction is due), then given the feature by a
    schema version as another engine would write it."""
    catalog = FileSystemCatalog(wh)
    catalog.create_database("db", ignore_if_exists=True)
    t = catalog.create_table(f"db.{name}", COLUMNS, primary_keys=["k"] if pk else [], options=PK if pk else APPEND)
    t.write_arrow(_rows(0))
    t.write_arrow(_rows(5))
    schemas = SchemaManager(t.io, t.path)
    old = schemas.latest()
    assert old is not None
    fields = old.fields
    if feature.blob:
        fields = (*fields, DataField(old.highest_field_id + 1, "b", DataType("BLOB")))
    schemas.commit(replace(old, id=old.id + 1, fields=fields, options={**old.options, **feature.options},
                           highest_field_id=max(old.highest_field_id, *(f.id for f in fields))))
    return catalog.get_table(f"db.{name}")


def _refused(call: Callable[[], Any], names: str) -> None:
    with pytest.raises(LakeError) as e:
        call()
    assert isinstance(e.value, InvalidInputError), repr(e.value)
    assert names in str(e.value), f"the refusal does not name {names}: {e.value}"


CASES = [(f, pk) for f in FEATURES for pk in (True, False)]
IDS = [f"{f}-{'pk' if pk else 'append'}" for f, pk in CASES]


@pytest.mark.parametrize(("feature", "pk"), CASES, ids=IDS)
def test_writes_are_refused_naming_the_option(tmp_path: Path, feature: str, pk: bool) -> None:
    f = FEATURES[feature]
    t = _table(str(tmp_path), "t", pk, f)
    _refused(lambda: t.write_arrow(_rows(20)), f.names)
    if not pk:  # delete_where is for append tables
        _refused(lambda: t.delete_where({"k": 1}), f.names)


@pytest.mark.parametrize(("feature", "pk"), CASES, ids=IDS)
def test_compactions_are_refused_naming_the_option(tmp_path: Path, feature: str, pk: bool) -> None:
    f = FEATURES[feature]
    t = _table(str(tmp_path), "t", pk, f)
    snapshot = t.latest_snapshot()
    _refused(lambda: compact_table(t), f.names)
    _refused(lambda: compact_table(t, full=True), f.names)
    assert t.latest_snapshot() == snapshot  # nothing was committed


@pytest.mark.parametrize(("feature", "pk"), CASES, ids=IDS)
def test_reads_are_allowed_where_correct(tmp_path: Path, feature: str, pk: bool) -> None:
    f = FEATURES[feature]
    t = _table(str(tmp_path), "t", pk, f)
    if f.readable:  # (the primary-key table's level-0 rows wait for compaction: deletion vectors)
        assert t.to_arrow().num_rows == (0 if pk else 20)
    else:
        _refused(t.to_arrow, f.names)


@pytest.mark.parametrize(("feature", "pk"), CASES, ids=IDS)
def test_health_reports_the_refusal(tmp_path: Path, feature: str, pk: bool) -> None:
    f = FEATURES[feature]
    wh = str(tmp_path)
    _table(wh, "t", pk, f)
    h = read_health(FileSystemCatalog(wh), None, "db.t", 0)
    assert h is not None and h.error is not None, "a table lsmlake does not compact looks healthy"
    assert f.names in h.error and "cannot compact" in h.error, h.error
    assert h.score == 0


class _Timeline:
    """The catalog's timeline, faked: no pending plan; requested plans are recorded."""

    def __init__(self) -> None:
        self.requested: list[str] = []

    def plans(self, table_id: str, states: Sequence[int]) -> list[catalog_pb2.CompactionPlan]:
        return []

    def request(self, table_id: str, units: Sequence[catalog_pb2.CompactionUnit], full: bool) -> Any:
        self.requested.append(table_id)
        return catalog_pb2.CompactionPlan(plan_id=f"p{len(self.requested)}", units=units)


def _scheduler(wh: str, monkeypatch: pytest.MonkeyPatch) -> tuple[Scheduler, _Timeline, list[str]]:
    timeline = _Timeline()
    ownership = Ownership()
    ownership.update({0}, 1)
    s = Scheduler(wh, cast(CompactionTimeline, timeline), cast(SparkCompactor, None), ownership, CompactorMetrics(),
                  "c1", FullCompactionTrigger(), reconcile_interval_s=3600.0)
    executed: list[str] = []
    monkeypatch.setattr(s.runner, "execute", lambda table_id, plan, origin=None: executed.append(table_id))
    return s, timeline, executed


@pytest.mark.parametrize(("feature", "pk"), CASES, ids=IDS)
def test_the_compactor_does_not_plan_a_refused_table(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                     feature: str, pk: bool) -> None:
    f = FEATURES[feature]
    wh = str(tmp_path)
    t = _table(wh, "t", pk, f)
    s, timeline, executed = _scheduler(wh, monkeypatch)
    # an operator's trigger is refused at once, naming the option
    _refused(lambda: s.request("db.t", {}, None, True), f.names)
    # reconciliation does not mark the table's buckets
    s._reconcile()
    assert s.pending() == 0
    # an event (a writer committed) is looked at once, not planned, and not looked at again
    split = every_bucket(t, t.latest_snapshot())[0]
    key = ("db.t", split.partition, split.bucket)
    s.on_event(key, 3, False)
    for _ in range(3):
        s._round()
    assert timeline.requested == [] and executed == []
    assert s.pending() == 0, "the compactor keeps looking at a table it does not compact"
    note = s.buckets.state(key).note
    assert "not compacted" in note and f.names in note, note


def test_the_compactor_still_plans_a_supported_table(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The refusal is by table: a table without such a feature is planned as before."""
    wh = str(tmp_path)
    _table(wh, "t", True, Feature({}, "", True))
    s, timeline, executed = _scheduler(wh, monkeypatch)
    s.request("db.t", {}, None, True)
    s._round()
    assert timeline.requested == ["db.t"] and executed == ["db.t"]


# ---------------------------------------------------------------------------------------------
# Manifest fields lsmlake does not model survive its rewrites
# ---------------------------------------------------------------------------------------------

def _pypaimon_schema(unknown: bool) -> dict[str, Any]:
    """pypaimon 2.1.0's manifest-entry schema; with `unknown`, plus fields a newer Paimon might add (at the entry
    and at the file level, one of them a record type)."""
    from pypaimon.manifest.schema.manifest_entry import MANIFEST_ENTRY_SCHEMA

    schema = copy.deepcopy(MANIFEST_ENTRY_SCHEMA)
    if unknown:
        (file_field,) = [f for f in schema["fields"] if f["name"] == "_FILE"]
        file_field["type"]["fields"].append({"name": "_FUTURE_FILE_FIELD", "type": ["null", {
            "type": "record", "name": "FutureStats", "fields": [{"name": "_A", "type": "long"},
                                                                {"name": "_B", "type": ["null", "string"]}]}],
            "default": None})
        file_field["type"]["fields"].append({"name": "_FUTURE_FLAG", "type": ["null", "boolean"], "default": None})
        schema["fields"].append({"name": "_FUTURE_ENTRY_FIELD", "type": ["null", "string"], "default": None})
    return schema


def _stats() -> dict[str, Any]:
    return {"_MIN_VALUES": b"\x00" * 8, "_MAX_VALUES": b"\x00" * 8, "_NULL_COUNTS": [0]}


def _record(i: int, unknown: bool) -> dict[str, Any]:
    """A manifest entry as Paimon writes one of a data-evolution table (every optional field set)."""
    f = {"_FILE_NAME": f"data-{i}.parquet", "_FILE_SIZE": 100 + i, "_ROW_COUNT": 10, "_MIN_KEY": b"k0",
         "_MAX_KEY": b"k9", "_KEY_STATS": _stats(), "_VALUE_STATS": _stats(), "_MIN_SEQUENCE_NUMBER": i,
         "_MAX_SEQUENCE_NUMBER": i + 9, "_SCHEMA_ID": 0, "_LEVEL": 0, "_EXTRA_FILES": [f"data-{i}.parquet.index"],
         "_CREATION_TIME": 1_700_000_000_000 + i, "_DELETE_ROW_COUNT": 1, "_EMBEDDED_FILE_INDEX": b"\x01\x02",
         "_FILE_SOURCE": 1, "_VALUE_STATS_COLS": ["v", "s"], "_EXTERNAL_PATH": f"/ext/data-{i}.parquet",
         "_FIRST_ROW_ID": 10 * i, "_WRITE_COLS": ["v", "s"], "_WRITE_COLS_SEQUENCES": [i, i + 1]}
    entry: dict[str, Any] = {"_VERSION": 2, "_KIND": 0, "_PARTITION": serialize_row([], []), "_BUCKET": 0,
                             "_TOTAL_BUCKETS": 1, "_FILE": f}
    if unknown:
        f["_FUTURE_FILE_FIELD"] = {"_A": i, "_B": f"b{i}"}
        f["_FUTURE_FLAG"] = i % 2 == 0
        entry["_FUTURE_ENTRY_FIELD"] = f"e{i}"
    return entry


def _raw(path: Path) -> list[dict[str, Any]]:
    with path.open("rb") as fh:
        return list(cast(Any, fastavro.reader(fh)))


def _comparable(r: dict[str, Any]) -> dict[str, Any]:
    """A raw record with its creation time as milliseconds (fastavro reads it as a datetime)."""
    out = copy.deepcopy(r)
    ct = out["_FILE"]["_CREATION_TIME"]
    if ct is not None and not isinstance(ct, int):
        out["_FILE"]["_CREATION_TIME"] = int(ct.timestamp() * 1000)
    return out


@pytest.mark.parametrize("unknown", [False, True], ids=["paimon-fields", "unknown-fields"])
def test_manifest_merge_keeps_every_field(tmp_path: Path, unknown: bool) -> None:
    """Manifests written with Paimon's schema (pypaimon's) are merged as FileStoreCommit._base_manifests merges
    them; the merged manifest holds every entry with every field unchanged, the manifest list its row ids."""
    wh = str(tmp_path)
    catalog = FileSystemCatalog(wh)
    catalog.create_database("db")
    t = catalog.create_table("db.t", COLUMNS, options={"bucket": "-1"})
    store: ManifestStore = t.manifests
    (Path(t.path) / "manifest").mkdir(exist_ok=True)
    schema = fastavro.parse_schema(_pypaimon_schema(unknown))
    metas = []
    records = [_record(i, unknown) for i in range(4)]
    for n, chunk in enumerate((records[:2], records[2:])):
        buf = io.BytesIO()
        fastavro.writer(buf, schema, chunk)
        name = f"manifest-paimon-{n}"
        (Path(t.path) / "manifest" / name).write_bytes(buf.getvalue())
        metas.append(ManifestFileMeta(name, len(buf.getvalue()), 2, 0, partition_stats([], store.partition_types), 0))
    base, _ = store.write_list(metas[:1])
    delta, _ = store.write_list(metas[1:])
    commit = t.new_commit()
    commit.merge_min_count = 1
    written: list[str] = []
    merged = commit._base_manifests(cast(Any, SimpleNamespace(base_manifest_list=base, delta_manifest_list=delta)),
                                    written)
    assert written and [m.file_name for m in merged] == written
    after = [r for m in merged for r in _raw(Path(t.path) / "manifest" / m.file_name)]
    before = [r for n in range(2) for r in _raw(Path(t.path) / "manifest" / f"manifest-paimon-{n}")]
    assert [_comparable(r) for r in after] == [_comparable(r) for r in before]
    assert (merged[0].min_row_id, merged[0].max_row_id) == (0, 39)
    # a manifest list written again keeps the row ids (and unknown fields) of the manifests it names
    again, _ = store.write_list(merged)
    assert [(m.min_row_id, m.max_row_id) for m in store.read_list(again)] == [(0, 39)]


def test_a_level_upgrade_keeps_unknown_file_fields(tmp_path: Path) -> None:
    """A file moved to another level (a COMPACT upgrade) is re-added with every field it had."""
    wh = str(tmp_path)
    catalog = FileSystemCatalog(wh)
    catalog.create_database("db")
    t = catalog.create_table("db.t", COLUMNS, options={"bucket": "-1"})
    store: ManifestStore = t.manifests
    (Path(t.path) / "manifest").mkdir(exist_ok=True)
    buf = io.BytesIO()
    fastavro.writer(buf, fastavro.parse_schema(_pypaimon_schema(True)), [_record(0, True)])
    (Path(t.path) / "manifest" / "manifest-paimon").write_bytes(buf.getvalue())
    (entry,) = store.read_manifest("manifest-paimon")
    upgraded = replace(entry, file=entry.file.upgrade(3))
    meta = store.write_manifest([entry.as_delete(), upgraded], 0)
    delete, add = _raw(Path(t.path) / "manifest" / meta.file_name)
    original = _comparable(_record(0, True))
    assert _comparable(add)["_FILE"] == {**original["_FILE"], "_LEVEL": 3}
    assert _comparable(delete)["_FILE"] == original["_FILE"] and delete["_KIND"] == 1
    assert add["_FUTURE_ENTRY_FIELD"] == "e0"
    assert isinstance(ManifestEntry.from_avro(add), ManifestEntry)
