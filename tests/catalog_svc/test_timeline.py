"""The compaction timeline, WatchSnapshots, metrics and reflection, over real gRPC on a loopback port.

The server runs in the test process (SQLite metastore, no Kafka: the outbox is read from the store).
"""

from __future__ import annotations

import os
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from grpc_reflection.v1alpha.proto_reflection_descriptor_database import ProtoReflectionDescriptorDatabase

from lsmlake.catalog.filesystem import FileSystemCatalog
from lsmlake.catalog.timeline import parse_plan_id
from lsmlake.errors import InvalidInputError
from lsmlake.format.data_file_writer import bucket_dir
from lsmlake.format.manifest import ManifestStore
from lsmlake.proto_gen.lsmlake.v1 import catalog_pb2, common_pb2, events_pb2
from lsmlake.rpc.convert import changes_to_proto
from lsmlake.table.compact import compact_buckets, run_planned
from tests.support.local_server import TIMEOUT_S, Local, local_server

S = catalog_pb2.CompactionPlanState


@pytest.fixture
def local(tmp_path: Path) -> Iterator[Local]:
    with local_server(str(tmp_path), metrics_port=0) as srv:
        yield srv


def test_plan_ids_are_positive_64_bit_numbers_written_plainly() -> None:
    assert parse_plan_id("1") == 1 and parse_plan_id(str(2**63 - 1)) == 2**63 - 1
    for bad in ("0", "-1", "01", " 1", "1e3", "x", "", str(2**63), "99999999999999999999"):
        with pytest.raises(InvalidInputError, match="is not a plan id"):
            parse_plan_id(bad)


def _code(call: Any, request: Any) -> tuple[grpc.StatusCode, str]:
    with pytest.raises(grpc.RpcError) as info:
        call(request, timeout=TIMEOUT_S)
    return info.value.code(), info.value.details()


def _pk_table(local: Local, name: str = "t") -> common_pb2.TableIdentifier:
    ident = local.create_table("db", name, [("id", "BIGINT NOT NULL"), ("v", "STRING")], ["id"], {"bucket": "1"})
    for i in range(3):
        local.commit(ident, "writer", i + 1, local.write(ident, {"id": [i, i + 1], "v": [f"r{i}", f"s{i}"]}))
    return ident


def _unit(local: Local, ident: common_pb2.TableIdentifier, level: int = 5) -> catalog_pb2.CompactionUnit:
    split = local.stub.PlanScan(catalog_pb2.PlanScanRequest(table=ident), timeout=TIMEOUT_S).splits[0]
    return catalog_pb2.CompactionUnit(partition=split.partition, bucket=split.bucket,
                                      total_buckets=split.total_buckets, input_files=split.files, output_level=level,
                                      drop_delete=True)


def _rows(local: Local, ident: common_pb2.TableIdentifier) -> list[dict[str, Any]]:
    table = FileSystemCatalog(local.warehouse).get_table(f"{ident.database}.{ident.table}")
    return sorted(table.to_arrow().to_pylist(), key=lambda r: r["id"])


def test_plan_lifecycle_with_a_dead_compactor(local: Local) -> None:
    ident = _pk_table(local)
    before = _rows(local, ident)
    unit = _unit(local, ident)
    plan = local.stub.RequestCompaction(catalog_pb2.RequestCompactionRequest(table=ident, units=[unit], full=True),
                                        timeout=TIMEOUT_S).plan
    assert plan.state == S.COMPACTION_PLAN_STATE_REQUESTED and plan.base_snapshot_id == 3
    assert plan.output_file_prefix.startswith("data-compact-") and plan.requested_at_ms > 0
    assert [f.file_name for f in plan.units[0].input_files] == [f.file_name for f in unit.input_files]

    # the files of a pending plan cannot be planned again; files that are not live cannot be planned
    code, msg = _code(local.stub.RequestCompaction, catalog_pb2.RequestCompactionRequest(table=ident, units=[unit]))
    assert code == grpc.StatusCode.FAILED_PRECONDITION and "already in a pending compaction plan" in msg
    ghost = catalog_pb2.CompactionUnit(partition=unit.partition, bucket=0, total_buckets=1, output_level=5,
                                       input_files=[common_pb2.DataFileMeta(file_name="data-nope-0.parquet")])
    code, msg = _code(local.stub.RequestCompaction, catalog_pb2.RequestCompactionRequest(table=ident, units=[ghost]))
    assert code == grpc.StatusCode.INVALID_ARGUMENT and "data-nope-0.parquet" in msg
    code, msg = _code(local.stub.RequestCompaction, catalog_pb2.RequestCompactionRequest(
        table=ident, units=[catalog_pb2.CompactionUnit(partition=unit.partition, input_files=unit.input_files,
                                                       output_level=9)]))
    assert code == grpc.StatusCode.INVALID_ARGUMENT and "output_level 9" in msg

    started = local.stub.StartCompaction(catalog_pb2.StartCompactionRequest(
        table=ident, plan_id=plan.plan_id, owner="compactor-1"), timeout=TIMEOUT_S).plan
    assert (started.state, started.owner, started.attempts) == (S.COMPACTION_PLAN_STATE_INFLIGHT, "compactor-1", 1)
    assert started.started_at_ms >= plan.requested_at_ms
    code, _ = _code(local.stub.StartCompaction, catalog_pb2.StartCompactionRequest(
        table=ident, plan_id=plan.plan_id, owner="compactor-2"))
    assert code == grpc.StatusCode.FAILED_PRECONDITION  # already running

    # compactor-1 dies after writing an output file; the next owner rolls the plan back
    table = FileSystemCatalog(local.warehouse).get_table("db.t")
    folder = bucket_dir(table.path, table.schema.partition_dir(()), 0)
    leftover = f"{folder}/{plan.output_file_prefix}0-0.parquet"
    Path(leftover).write_bytes(b"half-written")
    back = local.stub.RollbackCompaction(catalog_pb2.RollbackCompactionRequest(
        table=ident, plan_id=plan.plan_id, reason="compactor-1 stopped heartbeating", requeue=True),
        timeout=TIMEOUT_S)
    assert back.plan.state == S.COMPACTION_PLAN_STATE_REQUESTED and back.plan.reason.startswith("compactor-1")
    assert [os.path.basename(p) for p in back.deleted_paths] == [os.path.basename(leftover)]
    assert not os.path.exists(leftover)
    assert _rows(local, ident) == before  # no live file was touched

    local.stub.StartCompaction(catalog_pb2.StartCompactionRequest(table=ident, plan_id=plan.plan_id,
                                                                  owner="compactor-2"), timeout=TIMEOUT_S)
    _, messages = compact_buckets(table, full=True)
    changes = [changes_to_proto(m) for m in messages]
    request = catalog_pb2.CompleteCompactionRequest(table=ident, plan_id=plan.plan_id, owner="compactor-1",
                                                    commit_user="compactor-2", commit_identifier=1, changes=changes)
    code, msg = _code(local.stub.CompleteCompaction, request)
    assert code == grpc.StatusCode.FAILED_PRECONDITION and "compactor-2" in msg
    request.owner = "compactor-2"
    done = local.stub.CompleteCompaction(request, timeout=TIMEOUT_S)
    assert (done.snapshot_id, done.already_committed) == (4, False)
    assert (done.plan.state, done.plan.committed_snapshot_id, done.plan.attempts) == (
        S.COMPACTION_PLAN_STATE_COMPLETED, 4, 2)
    assert done.plan.finished_at_ms >= done.plan.started_at_ms
    again = local.stub.CompleteCompaction(request, timeout=TIMEOUT_S)  # a retry after a lost reply
    assert (again.snapshot_id, again.already_committed) == (4, True)
    snap = local.stub.GetSnapshot(catalog_pb2.GetSnapshotRequest(table=ident, snapshot_id=4), timeout=TIMEOUT_S)
    assert snap.snapshot.commit_kind == common_pb2.COMMIT_KIND_COMPACT
    assert _rows(local, ident) == before

    # the COMPACT snapshot's event names the plan
    events = [e for e in local.server._store.outbox.pending_events(1000) if e.snapshot_id == 4]
    assert len(events) == 1 and events[0].topic == "compaction-results"
    assert events_pb2.Envelope.FromString(events[0].payload).compaction_result.plan_id == plan.plan_id

    listed = local.stub.ListCompactionPlans(catalog_pb2.ListCompactionPlansRequest(table=ident), timeout=TIMEOUT_S)
    assert [(p.plan_id, p.state) for p in listed.plans] == [(plan.plan_id, S.COMPACTION_PLAN_STATE_COMPLETED)]
    pending = local.stub.ListCompactionPlans(catalog_pb2.ListCompactionPlansRequest(
        table=ident, states=[S.COMPACTION_PLAN_STATE_REQUESTED, S.COMPACTION_PLAN_STATE_INFLIGHT]), timeout=TIMEOUT_S)
    assert list(pending.plans) == []


def test_a_plan_run_again_sweeps_what_its_dead_run_wrote_after_the_rollback(local: Local) -> None:
    """A killed compactor's Spark tasks can outlive it and finish writing an output after the next owner rolled the
    plan back; the completion of the run that follows deletes every file of the plan's prefix it did not commit."""
    ident = _pk_table(local)
    before = _rows(local, ident)
    plan = local.stub.RequestCompaction(catalog_pb2.RequestCompactionRequest(
        table=ident, units=[_unit(local, ident)], full=True), timeout=TIMEOUT_S).plan
    start = catalog_pb2.StartCompactionRequest(table=ident, plan_id=plan.plan_id, owner="compactor-1")
    local.stub.StartCompaction(start, timeout=TIMEOUT_S)
    local.stub.RollbackCompaction(catalog_pb2.RollbackCompactionRequest(
        table=ident, plan_id=plan.plan_id, reason="compactor-1 is gone", requeue=True), timeout=TIMEOUT_S)
    table = FileSystemCatalog(local.warehouse).get_table("db.t")
    folder = bucket_dir(table.path, table.schema.partition_dir(()), 0)
    late = [f"{folder}/{plan.output_file_prefix}{n}-0.parquet" for n in ("a", "b")]
    late.append(f"{folder}/changelog-{plan.output_file_prefix.removeprefix('data-')}c-0.parquet")
    for path in late:  # the dead run's tasks end after the rollback listed the folder
        Path(path).write_bytes(b"written by a task of the dead run")
    unrelated = f"{folder}/data-someone-else-0.parquet"
    Path(unrelated).write_bytes(b"not this plan's")

    start.owner = "compactor-2"
    local.stub.StartCompaction(start, timeout=TIMEOUT_S)
    (split,) = table.new_scan().plan()
    msg = run_planned(table, split, [f.file_name for f in plan.units[0].input_files], 5, True,
                      file_prefix=plan.output_file_prefix)
    assert msg is not None
    messages = [msg]
    done = local.stub.CompleteCompaction(catalog_pb2.CompleteCompactionRequest(
        table=ident, plan_id=plan.plan_id, owner="compactor-2", commit_user="compactor-2", commit_identifier=1,
        changes=[changes_to_proto(m) for m in messages]), timeout=TIMEOUT_S)
    assert (done.plan.state, done.plan.attempts) == (S.COMPACTION_PLAN_STATE_COMPLETED, 2)
    assert [p for p in late if os.path.exists(p)] == []
    assert os.path.exists(unrelated)
    outputs = [f.file_name for f in msg.new_files]
    assert outputs and all(n.startswith(plan.output_file_prefix) and os.path.exists(f"{folder}/{n}") for n in outputs)
    assert _rows(local, ident) == before


def _manifest_reads_of_a_rollback(local: Local, monkeypatch: pytest.MonkeyPatch, name: str, before: int) -> int:
    """Manifest lists a rollback asks for (the snapshots it looks into), in a table with `before` commits before its
    plan was made and two while it ran; the dead run's leftover is deleted all the same."""
    ident = local.create_table("db", name, [("id", "BIGINT NOT NULL"), ("v", "STRING")], ["id"], {"bucket": "1"})
    for i in range(before):
        local.commit(ident, "writer", i + 1, local.write(ident, {"id": [i], "v": [f"r{i}"]}))
    plan = local.stub.RequestCompaction(catalog_pb2.RequestCompactionRequest(
        table=ident, units=[_unit(local, ident)], full=True), timeout=TIMEOUT_S).plan
    local.stub.StartCompaction(catalog_pb2.StartCompactionRequest(table=ident, plan_id=plan.plan_id,
                                                                  owner="compactor-1"), timeout=TIMEOUT_S)
    for i in range(before, before + 2):
        local.commit(ident, "writer", i + 1, local.write(ident, {"id": [i], "v": [f"r{i}"]}))
    table = FileSystemCatalog(local.warehouse).get_table(f"db.{name}")
    leftover = Path(bucket_dir(table.path, table.schema.partition_dir(()), 0)) / f"{plan.output_file_prefix}0-0.parquet"
    leftover.write_bytes(b"half-written")
    calls = [0]
    original = ManifestStore.read_list

    def counted(self: ManifestStore, name: str) -> Any:
        calls[0] += 1
        return original(self, name)

    monkeypatch.setattr(ManifestStore, "read_list", counted)
    local.stub.RollbackCompaction(catalog_pb2.RollbackCompactionRequest(
        table=ident, plan_id=plan.plan_id, reason="compactor-1 is gone", requeue=True), timeout=TIMEOUT_S)
    monkeypatch.undo()
    assert not leftover.exists()
    return calls[0]


def test_a_rollback_costs_what_the_plan_saw_not_the_tables_history(local: Local,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """A rollback holds the table's commit lock: it may not read every retained snapshot's manifests to learn which
    files are in use (with a few thousand snapshots it held the lock for minutes, and every writer's commit timed
    out). Only snapshots made after the plan can hold the files of its runs."""
    short = _manifest_reads_of_a_rollback(local, monkeypatch, "short", before=3)
    long = _manifest_reads_of_a_rollback(local, monkeypatch, "long", before=40)
    assert long == short, (short, long)


def test_plan_is_abandoned_when_its_inputs_are_gone(local: Local) -> None:
    ident = _pk_table(local)
    unit = _unit(local, ident)
    plan = local.stub.RequestCompaction(catalog_pb2.RequestCompactionRequest(table=ident, units=[unit]),
                                        timeout=TIMEOUT_S).plan
    # another compaction, outside the timeline, replaces the inputs
    table = FileSystemCatalog(local.warehouse).get_table("db.t")
    _, messages = compact_buckets(table, full=True)
    local.commit(ident, "other", 1, messages, common_pb2.COMMIT_KIND_COMPACT)
    code, msg = _code(local.stub.StartCompaction, catalog_pb2.StartCompactionRequest(
        table=ident, plan_id=plan.plan_id, owner="c1"))
    assert code == grpc.StatusCode.FAILED_PRECONDITION and "abandoned" in msg
    (p,) = local.stub.ListCompactionPlans(catalog_pb2.ListCompactionPlansRequest(table=ident), timeout=TIMEOUT_S).plans
    assert p.state == S.COMPACTION_PLAN_STATE_ABANDONED and "input files are gone" in p.reason
    # an INFLIGHT plan whose inputs vanish is abandoned by a requeueing rollback
    unit2 = _unit(local, ident)
    plan2 = local.stub.RequestCompaction(catalog_pb2.RequestCompactionRequest(table=ident, units=[unit2]),
                                         timeout=TIMEOUT_S).plan
    local.stub.StartCompaction(catalog_pb2.StartCompactionRequest(table=ident, plan_id=plan2.plan_id, owner="c1"),
                               timeout=TIMEOUT_S)
    local.stub.Commit(catalog_pb2.CommitRequest(table=ident, commit_user="ow", commit_identifier=1,
                                                kind=common_pb2.COMMIT_KIND_OVERWRITE, overwrite_all_partitions=True),
                      timeout=TIMEOUT_S)
    back = local.stub.RollbackCompaction(catalog_pb2.RollbackCompactionRequest(
        table=ident, plan_id=plan2.plan_id, reason="retry", requeue=True), timeout=TIMEOUT_S)
    assert back.plan.state == S.COMPACTION_PLAN_STATE_ABANDONED


def test_rollback_without_requeue_ends_the_plan(local: Local) -> None:
    ident = _pk_table(local)
    unit = _unit(local, ident)
    plan = local.stub.RequestCompaction(catalog_pb2.RequestCompactionRequest(table=ident, units=[unit]),
                                        timeout=TIMEOUT_S).plan
    code, _ = _code(local.stub.RollbackCompaction, catalog_pb2.RollbackCompactionRequest(
        table=ident, plan_id=plan.plan_id))
    assert code == grpc.StatusCode.FAILED_PRECONDITION  # not running
    local.stub.StartCompaction(catalog_pb2.StartCompactionRequest(table=ident, plan_id=plan.plan_id, owner="c1"),
                               timeout=TIMEOUT_S)
    out = local.stub.RollbackCompaction(catalog_pb2.RollbackCompactionRequest(
        table=ident, plan_id=plan.plan_id, reason="cancelled by operator"), timeout=TIMEOUT_S)
    assert (out.plan.state, out.plan.reason) == (S.COMPACTION_PLAN_STATE_ROLLED_BACK, "cancelled by operator")
    # the inputs are free again
    assert local.stub.RequestCompaction(catalog_pb2.RequestCompactionRequest(table=ident, units=[unit]),
                                        timeout=TIMEOUT_S).plan.state == S.COMPACTION_PLAN_STATE_REQUESTED
    for bad in ("", "abc", "0", "-1", "999"):
        code, msg = _code(local.stub.StartCompaction, catalog_pb2.StartCompactionRequest(
            table=ident, plan_id=bad, owner="c1"))
        assert code in (grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.NOT_FOUND), (bad, code, msg)
    code, _ = _code(local.stub.ListCompactionPlans, catalog_pb2.ListCompactionPlansRequest(
        table=common_pb2.TableIdentifier(database="db", table="none")))
    assert code == grpc.StatusCode.NOT_FOUND


def test_watch_snapshots_streams_each_commit(local: Local) -> None:
    ident = local.create_table("db", "w", [("id", "BIGINT NOT NULL")], ["id"], {"bucket": "1"})
    local.commit(ident, "u", 1, local.write(ident, {"id": [1]}))
    seen_all: list[int] = []
    seen_new: list[int] = []
    from_start = local.stub.WatchSnapshots(catalog_pb2.WatchSnapshotsRequest(table=ident, after_snapshot_id=0),
                                           timeout=TIMEOUT_S)
    only_new = local.stub.WatchSnapshots(catalog_pb2.WatchSnapshotsRequest(table=ident), timeout=TIMEOUT_S)

    def follow(stream: Any, out: list[int], n: int) -> None:
        for msg in stream:
            out.append(msg.snapshot.id)
            if len(out) == n:
                stream.cancel()
                return

    threads = [threading.Thread(target=follow, args=(from_start, seen_all, 4)),
               threading.Thread(target=follow, args=(only_new, seen_new, 3))]
    for t in threads:
        t.start()
    deadline = time.monotonic() + TIMEOUT_S
    while local.server.metrics.watchers._value.get() < 2:  # both streams open before committing
        assert time.monotonic() < deadline
        time.sleep(0.05)
    for i in range(2, 5):
        local.commit(ident, "u", i, local.write(ident, {"id": [i]}))
    for t in threads:
        t.join(TIMEOUT_S)
    assert seen_all == [1, 2, 3, 4]
    assert seen_new == [2, 3, 4]
    code, _ = _code(lambda r, timeout: list(local.stub.WatchSnapshots(r, timeout=timeout)),
                    catalog_pb2.WatchSnapshotsRequest(table=common_pb2.TableIdentifier(database="db", table="x")))
    assert code == grpc.StatusCode.NOT_FOUND


def test_metrics_and_reflection(local: Local) -> None:
    ident = local.create_table("db", "m", [("id", "BIGINT NOT NULL")], ["id"], {"bucket": "1"})
    written = local.write(ident, {"id": [1]})
    local.commit(ident, "u", 1, written)
    local.commit(ident, "u", 1, written)  # a retry
    body = urllib.request.urlopen(f"http://127.0.0.1:{local.server.metrics_port}/metrics", timeout=10).read().decode()
    assert 'lsmlake_catalog_commits_total{kind="APPEND",outcome="committed"} 1.0' in body
    assert 'lsmlake_catalog_commits_total{kind="APPEND",outcome="already_committed"} 1.0' in body
    assert "lsmlake_catalog_outbox_pending 1.0" in body  # no Kafka here: the one event waits (none for the retry)
    assert 'lsmlake_catalog_commit_seconds_count{kind="APPEND"}' in body
    db = ProtoReflectionDescriptorDatabase(local.channel)
    services = set(db.get_services())
    assert {"lsmlake.v1.CatalogService", "grpc.health.v1.Health"} <= services
    assert db.FindFileContainingSymbol("lsmlake.v1.CatalogService").name == "lsmlake/v1/catalog.proto"


def test_lake_timeline_lists_plans_with_states_and_ages(local: Local, capsys: pytest.CaptureFixture[str]) -> None:
    import json

    from lsmlake.cli import main as cli

    ident = _pk_table(local)
    unit = _unit(local, ident)
    plan = local.stub.RequestCompaction(catalog_pb2.RequestCompactionRequest(table=ident, units=[unit]),
                                        timeout=TIMEOUT_S).plan
    local.stub.StartCompaction(catalog_pb2.StartCompactionRequest(table=ident, plan_id=plan.plan_id, owner="c9"),
                               timeout=TIMEOUT_S)
    store = ["--warehouse", local.warehouse, "--metastore", f"sqlite:///{local.warehouse}/_meta.sqlite"]
    assert cli.main(["timeline", "db.t", *store, "--format", "jsonl"]) == 0
    (rec,) = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert (rec["plan_id"], rec["state"], rec["files"], rec["owner"], rec["attempts"], rec["output_level"]) == (
        int(plan.plan_id), "INFLIGHT", len(unit.input_files), "c9", 1, 5)
    assert rec["age"].endswith("s") and rec["running"] is not None
    assert cli.main(["timeline", "db.t", *store, "--state", "completed"]) == 0
    assert "INFLIGHT" not in capsys.readouterr().out
    assert cli.main(["timeline", "db.t", *store]) == 0
    table_out = capsys.readouterr().out
    assert "plan_id" in table_out and "INFLIGHT" in table_out and "c9" in table_out
    assert cli.main(["timeline", "db.t", "--warehouse", local.warehouse]) != 0  # no default store file here
    assert "metadata store" in capsys.readouterr().err


def test_snapshots_expire_on_a_schedule(tmp_path: Path) -> None:
    with local_server(str(tmp_path), expire_interval_s=0.5) as local:
        ident = local.create_table("db", "e", [("id", "BIGINT NOT NULL")], ["id"],
                                   {"bucket": "1", "snapshot.num-retained.min": "1", "snapshot.num-retained.max": "2"})
        for i in range(5):
            local.commit(ident, "u", i + 1, local.write(ident, {"id": [i]}))
        deadline = time.monotonic() + TIMEOUT_S
        while True:
            ids = [s.id for s in local.stub.ListSnapshots(catalog_pb2.ListSnapshotsRequest(table=ident),
                                                          timeout=TIMEOUT_S).snapshots]
            if ids == [4, 5]:
                break
            assert time.monotonic() < deadline, f"snapshots {ids} were never expired to [4, 5]"
            time.sleep(0.1)
        assert sorted(r["id"] for r in FileSystemCatalog(local.warehouse).get_table("db.e").to_arrow().to_pylist()) \
            == [0, 1, 2, 3, 4]
        # the pass counts its snapshots when it ends, just after readers stop seeing them
        while local.server.metrics.expired._value.get() < 3 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert local.server.metrics.expired._value.get() == 3
