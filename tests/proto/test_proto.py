"""The protobuf definitions under proto/ and the code scripts/gen_proto.py generates from them."""

from __future__ import annotations

import importlib
import pickle
import pkgutil
import subprocess
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest
from google.protobuf import descriptor_pb2
from google.protobuf.descriptor import ServiceDescriptor
from google.protobuf.message import Message

import lsmlake.proto_gen
from lsmlake.proto_gen.lsmlake.v1 import (
    catalog_pb2,
    catalog_pb2_grpc,
    common_pb2,
    events_pb2,
    writer_pb2,
    writer_pb2_grpc,
)
from tests.support.paths import ROOT

SCRIPT = ROOT / "scripts" / "gen_proto.py"
PROTO_ROOT = ROOT / "proto"
GEN_DIR = Path(lsmlake.proto_gen.__file__).parent
PROTO_NAMES = ("catalog", "common", "events", "writer")


def _round_trip(msg: Message) -> Message:
    data = msg.SerializeToString(deterministic=True)
    back = type(msg).FromString(data)
    assert back == msg
    assert back.SerializeToString(deterministic=True) == data
    return back


def _file_meta(name: str, level: int = 0) -> common_pb2.DataFileMeta:
    return common_pb2.DataFileMeta(
        file_name=name, file_size=4096, row_count=100, min_key=b"\x00\x01", max_key=b"\x00\x09",
        key_stats=common_pb2.SimpleStats(min_values=b"a", max_values=b"z",
                                         null_counts=common_pb2.NullCounts(counts=[0])),
        value_stats=common_pb2.SimpleStats(min_values=b"b", max_values=b"y",
                                           null_counts=common_pb2.NullCounts(counts=[0, -1, 3])),
        min_sequence_number=1, max_sequence_number=100, schema_id=0, level=level,
        extra_files=["x.index"], creation_time_ms=1_700_000_000_000, delete_row_count=0,
        file_source=common_pb2.FILE_SOURCE_APPEND, value_stats_cols=common_pb2.StringList(values=[]))


# -- generated modules --------------------------------------------------------------------------


def test_every_generated_module_imports() -> None:
    names = [m.name for m in pkgutil.walk_packages(lsmlake.proto_gen.__path__, "lsmlake.proto_gen.")]
    expected = {f"lsmlake.proto_gen.lsmlake.v1.{p}{suffix}" for p in PROTO_NAMES for suffix in ("_pb2", "_pb2_grpc")}
    assert expected <= set(names)
    for name in names:
        importlib.import_module(name)
    # imports between generated modules go through the library, never a top-level `lsmlake.v1`
    assert not any(m == "lsmlake.v1" or m.startswith("lsmlake.v1.") for m in sys.modules)


def test_type_stubs_are_generated() -> None:
    v1 = GEN_DIR / "lsmlake" / "v1"
    for p in PROTO_NAMES:
        for stub in (f"{p}_pb2.pyi", f"{p}_pb2_grpc.pyi"):
            assert (v1 / stub).is_file(), stub
    assert "from lsmlake.proto_gen.lsmlake.v1 import common_pb2" in (v1 / "catalog_pb2.pyi").read_text()


def test_messages_pickle() -> None:
    # Spark ships task arguments pickled: classes must name the module they really live in
    assert events_pb2.Envelope.__module__ == "lsmlake.proto_gen.lsmlake.v1.events_pb2"
    msg = events_pb2.Envelope(data_files=events_pb2.DataFilesEvent(snapshot_id=3, new_files=[_file_meta("a")]))
    assert pickle.loads(pickle.dumps(msg)) == msg


def test_descriptors_keep_their_proto_names() -> None:
    # reflection clients and other languages know the files by their path under proto/
    assert catalog_pb2.DESCRIPTOR.name == "lsmlake/v1/catalog.proto"
    assert catalog_pb2.DESCRIPTOR.package == "lsmlake.v1"
    assert [d.name for d in catalog_pb2.DESCRIPTOR.dependencies] == ["lsmlake/v1/common.proto"]


# -- messages -----------------------------------------------------------------------------------


def test_data_file_meta_keeps_absent_and_empty_apart() -> None:
    meta = _round_trip(_file_meta("data-1.parquet"))
    assert isinstance(meta, common_pb2.DataFileMeta)
    assert meta.HasField("value_stats_cols") and list(meta.value_stats_cols.values) == []  # no column
    assert not meta.HasField("write_cols")  # every column
    assert meta.HasField("delete_row_count") and meta.delete_row_count == 0
    assert not meta.HasField("external_path") and not meta.HasField("first_row_id")
    assert list(meta.value_stats.null_counts.counts) == [0, -1, 3]
    bare = common_pb2.DataFileMeta(file_name="f")
    assert not bare.HasField("creation_time_ms") and bare.file_source == common_pb2.FILE_SOURCE_UNSPECIFIED


def test_file_changes_with_index_files() -> None:
    dv = common_pb2.IndexFile(
        index_type="DELETION_VECTORS", file_name="index-1-0", file_size=120, row_count=1,
        deletion_vector_ranges=common_pb2.DeletionVectorRanges(ranges=[
            common_pb2.DeletionVectorRange(data_file_name="data-1.parquet", offset=1, length=40, cardinality=7)]))
    changes = common_pb2.FileChanges(
        partition=b"\x00\x00\x00\x01", bucket=3, total_buckets=4,
        new_files=[_file_meta("data-2.parquet", level=5)], deleted_files=[_file_meta("data-1.parquet")],
        changelog_files=[_file_meta("changelog-1.parquet")], new_index_files=[dv],
        deleted_index_files=[common_pb2.IndexFile(index_type="DELETION_VECTORS", file_name="index-0-0")])
    back = _round_trip(changes)
    assert isinstance(back, common_pb2.FileChanges)
    assert back.new_index_files[0].deletion_vector_ranges.ranges[0].cardinality == 7
    assert not back.deleted_index_files[0].HasField("deletion_vector_ranges")


def test_snapshot_and_split() -> None:
    _round_trip(common_pb2.Snapshot(
        id=7, schema_id=1, commit_kind=common_pb2.COMMIT_KIND_COMPACT, commit_user="compactor-1",
        commit_identifier=42, time_millis=1_700_000_000_000, total_record_count=1000, delta_record_count=0,
        properties={"kafka.offsets": '{"0": 12}'}))
    _round_trip(common_pb2.Split(
        partition=b"\x01", partition_values={"dt": "2024-01-01"}, bucket=0, total_buckets=2,
        bucket_path="dt=2024-01-01/bucket-0", snapshot_id=7, files=[_file_meta("data-1.parquet")],
        raw_convertible=True, deletion_vectors=common_pb2.IndexFile(index_type="DELETION_VECTORS")))


def test_catalog_requests() -> None:
    table = common_pb2.TableIdentifier(database="db", table="t")
    _round_trip(catalog_pb2.CreateTableRequest(
        table=table, columns=[catalog_pb2.Column(name="id", type="BIGINT NOT NULL"),
                              catalog_pb2.Column(name="v", type="DECIMAL(10, 2)", comment="price")],
        primary_keys=["id"], partition_keys=[], options={"bucket": "4"}))
    alter = _round_trip(catalog_pb2.AlterTableRequest(table=table, changes=[
        catalog_pb2.SchemaChange(add_column=catalog_pb2.AddColumn(name="w", type="STRING")),
        catalog_pb2.SchemaChange(rename_column=catalog_pb2.RenameColumn(old_name="v", new_name="price")),
        catalog_pb2.SchemaChange(set_option=catalog_pb2.SetOption(key="snapshot.num-retained.max", value="5"))]))
    assert isinstance(alter, catalog_pb2.AlterTableRequest)
    assert [c.WhichOneof("change") for c in alter.changes] == ["add_column", "rename_column", "set_option"]
    commit = _round_trip(catalog_pb2.CommitRequest(
        table=table, commit_user="writer-1", commit_identifier=9, kind=common_pb2.COMMIT_KIND_OVERWRITE,
        changes=[common_pb2.FileChanges(bucket=1, total_buckets=2, new_files=[_file_meta("d.parquet")])],
        properties={"k": "v"}, overwrite_partitions=[b"\x00"]))
    assert isinstance(commit, catalog_pb2.CommitRequest) and not commit.overwrite_all_partitions
    _round_trip(catalog_pb2.CommitResponse(snapshot_id=12, already_committed=True))
    scan = _round_trip(catalog_pb2.PlanScanRequest(
        table=table, partition_filter=[catalog_pb2.PredicateTerm(column="dt", op=catalog_pb2.PREDICATE_OP_EQ,
                                                                 value="2024-01-01")],
        key_filter=[catalog_pb2.PredicateTerm(column="id", op=catalog_pb2.PREDICATE_OP_IN, values=["1", "2"])]))
    assert isinstance(scan, catalog_pb2.PlanScanRequest) and not scan.HasField("snapshot_id")


def test_compaction_plan() -> None:
    plan = _round_trip(catalog_pb2.CompactionPlan(
        plan_id="p-1", table=common_pb2.TableIdentifier(database="db", table="t"),
        state=catalog_pb2.COMPACTION_PLAN_STATE_INFLIGHT, full=True, base_snapshot_id=5,
        output_file_prefix="data-p-1-", owner="compactor-2", attempts=2, requested_at_ms=1, started_at_ms=2,
        units=[catalog_pb2.CompactionUnit(partition=b"", bucket=0, total_buckets=1, output_level=5,
                                          input_files=[_file_meta("a.parquet"), _file_meta("b.parquet")])]))
    assert isinstance(plan, catalog_pb2.CompactionPlan) and not plan.HasField("committed_snapshot_id")
    states = {v.name for v in catalog_pb2.CompactionPlanState.DESCRIPTOR.values}
    assert {"COMPACTION_PLAN_STATE_" + s for s in ("REQUESTED", "INFLIGHT", "COMPLETED", "ROLLED_BACK",
                                                  "ABANDONED")} <= states


def test_writer_messages() -> None:
    header = _round_trip(writer_pb2.WriteRequest(header=writer_pb2.WriteHeader(
        table=common_pb2.TableIdentifier(database="db", table="t"), options={"commit.timeout": "5 s"})))
    chunk = _round_trip(writer_pb2.WriteRequest(arrow_ipc_chunk=b"\xff\xff\xff\xff"))
    assert isinstance(header, writer_pb2.WriteRequest) and isinstance(chunk, writer_pb2.WriteRequest)
    assert header.WhichOneof("payload") == "header" and chunk.WhichOneof("payload") == "arrow_ipc_chunk"
    _round_trip(writer_pb2.WriteRowsRequest(table=common_pb2.TableIdentifier(database="db", table="t"),
                                            rows_json=['{"id": 1, "_row_kind": "-D"}']))
    _round_trip(writer_pb2.WriteResponse(snapshot_id=3, rows_written=10))


def test_event_envelopes() -> None:
    table = common_pb2.TableIdentifier(database="db", table="t")
    data = _round_trip(events_pb2.Envelope(data_files=events_pb2.DataFilesEvent(
        table=table, snapshot_id=4, commit_kind=common_pb2.COMMIT_KIND_APPEND, partition=b"\x01", bucket=2,
        total_buckets=4, commit_time_millis=1, new_files=[_file_meta("d.parquet")])))
    compact = _round_trip(events_pb2.Envelope(compaction_result=events_pb2.CompactionResultEvent(
        table=table, snapshot_id=5, commit_kind=common_pb2.COMMIT_KIND_COMPACT, partition=b"\x01", bucket=2,
        total_buckets=4, plan_id="p-1", before=[_file_meta("d.parquet")], after=[_file_meta("e.parquet", 5)])))
    assert isinstance(data, events_pb2.Envelope) and isinstance(compact, events_pb2.Envelope)
    assert data.WhichOneof("event") == "data_files" and compact.WhichOneof("event") == "compaction_result"


# -- services -----------------------------------------------------------------------------------


def _methods(service: ServiceDescriptor) -> dict[str, tuple[bool, bool]]:
    """Each method's name -> (client streaming, server streaming)."""
    return {m.name: (m.client_streaming, m.server_streaming) for m in service.methods}


def test_catalog_service_methods() -> None:
    methods = _methods(catalog_pb2.DESCRIPTOR.services_by_name["CatalogService"])
    assert set(methods) == {
        "CreateDatabase", "ListDatabases", "DropDatabase",
        "CreateTable", "GetTable", "ListTables", "DropTable", "AlterTable",
        "Commit", "GetSnapshot", "ListSnapshots", "LatestSnapshot", "SnapshotAtTime", "PlanScan",
        "ExpireSnapshots", "RemoveOrphanFiles", "WatchSnapshots",
        "RequestCompaction", "StartCompaction", "CompleteCompaction", "RollbackCompaction",
        "ListCompactionPlans", "FindWrites", "AllocateSequences", "AssignBuckets", "ListTableHealth",
        "RenameTable", "ListTags", "GetTag", "CreateTag", "DeleteTag", "SyncIceberg",
    }
    assert methods["WatchSnapshots"] == (False, True)
    assert all(kind == (False, False) for name, kind in methods.items() if name != "WatchSnapshots")
    assert hasattr(catalog_pb2_grpc, "CatalogServiceStub")
    assert hasattr(catalog_pb2_grpc, "add_CatalogServiceServicer_to_server")


def test_writer_service_methods() -> None:
    methods = _methods(writer_pb2.DESCRIPTOR.services_by_name["WriterService"])
    assert methods == {"Write": (True, False), "WriteRows": (False, False)}
    assert hasattr(writer_pb2_grpc, "WriterServiceStub")


# -- the definitions themselves -----------------------------------------------------------------


@pytest.fixture(scope="module")
def descriptor_set(tmp_path_factory: pytest.TempPathFactory) -> descriptor_pb2.FileDescriptorSet:
    """The proto files compiled with their comments (source info), as protoc sees them."""
    from grpc_tools import protoc

    out = tmp_path_factory.mktemp("descriptors") / "set.pb"
    protos = sorted(str(p.relative_to(PROTO_ROOT)) for p in PROTO_ROOT.rglob("*.proto"))
    assert protoc.main(["protoc", f"--proto_path={PROTO_ROOT}", "--include_source_info",
                        f"--descriptor_set_out={out}", *protos]) == 0
    return descriptor_pb2.FileDescriptorSet.FromString(out.read_bytes())


def _message_paths(msgs: Sequence[descriptor_pb2.DescriptorProto], prefix: tuple[int, ...],
                   scope: str) -> Iterator[tuple[tuple[int, ...], str]]:
    """(source path, name) of messages, their fields and oneofs, nested messages included."""
    for i, m in enumerate(msgs):
        path = (*prefix, i)
        yield path, f"message {scope}{m.name}"
        for j, fld in enumerate(m.field):
            yield (*path, 2, j), f"field {scope}{m.name}.{fld.name}"
        for k, oneof in enumerate(m.oneof_decl):
            if not oneof.name.startswith("_"):  # proto3 `optional` makes a synthetic oneof
                yield (*path, 8, k), f"oneof {scope}{m.name}.{oneof.name}"
        nested = [n for n in m.nested_type if not n.options.map_entry]
        yield from _message_paths(nested, (*path, 3), f"{scope}{m.name}.")


def _definition_paths(f: descriptor_pb2.FileDescriptorProto) -> Iterator[tuple[tuple[int, ...], str]]:
    """(source path, name) of every definition of a file that needs a comment."""
    yield from _message_paths(f.message_type, (4,), "")
    for i, e in enumerate(f.enum_type):
        yield (5, i), f"enum {e.name}"
        for j, v in enumerate(e.value):
            yield (5, i, 2, j), f"enum value {v.name}"
    for i, s in enumerate(f.service):
        yield (6, i), f"service {s.name}"
        for j, m in enumerate(s.method):
            yield (6, i, 2, j), f"rpc {s.name}.{m.name}"


def test_every_definition_has_a_comment(descriptor_set: descriptor_pb2.FileDescriptorSet) -> None:
    missing = []
    for f in descriptor_set.file:
        commented = {tuple(loc.path) for loc in f.source_code_info.location if loc.leading_comments.strip()}
        missing += [f"{f.name}: {what}" for path, what in _definition_paths(f) if path not in commented]
    assert not missing, "definitions without a comment:\n" + "\n".join(missing)


def test_enums_start_with_unspecified(descriptor_set: descriptor_pb2.FileDescriptorSet) -> None:
    for f in descriptor_set.file:
        for e in f.enum_type:
            assert e.value[0].number == 0 and e.value[0].name.endswith("_UNSPECIFIED"), e.name


def test_proto3_package_v1(descriptor_set: descriptor_pb2.FileDescriptorSet) -> None:
    for f in descriptor_set.file:
        assert f.syntax == "proto3" and f.package == "lsmlake.v1", f.name
        assert f.name.startswith("lsmlake/v1/"), f.name


# -- the generator ------------------------------------------------------------------------------


def _snapshot(folder: Path) -> dict[str, tuple[bytes, int]]:
    return {str(p.relative_to(folder)): (p.read_bytes(), p.stat().st_mtime_ns)
            for p in sorted(folder.rglob("*")) if p.is_file() and "__pycache__" not in p.parts}


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=120)


def test_generator_is_idempotent(tmp_path: Path) -> None:
    out = tmp_path / "proto_gen"
    first = _run("--out", str(out))
    assert first.returncode == 0, first.stderr
    before = _snapshot(out)
    assert any(name.endswith("catalog_pb2_grpc.pyi") for name in before)
    second = _run("--out", str(out))
    assert second.returncode == 0, second.stderr
    assert "0 changed" in second.stdout
    assert _snapshot(out) == before  # same files, same bytes, not even rewritten


def test_generator_removes_stale_files(tmp_path: Path) -> None:
    out = tmp_path / "proto_gen"
    assert _run("--out", str(out)).returncode == 0
    stale = out / "lsmlake" / "v0" / "old_pb2.py"
    stale.parent.mkdir()
    stale.write_text("# from a deleted .proto\n")
    assert _run("--check", "--out", str(out)).returncode == 1
    assert _run("--out", str(out)).returncode == 0
    assert not stale.exists() and not stale.parent.exists()


def test_installed_code_matches_the_protos() -> None:
    result = _run("--check")
    assert result.returncode == 0, f"generated code is stale; run `make proto`\n{result.stderr}"
