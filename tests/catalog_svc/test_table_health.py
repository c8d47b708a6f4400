"""Compaction lag and the health score of tables (`lsmlake.catalog.health`), read from real tables, through the
catalog's `ListTableHealth` on a loopback gRPC server, and as Prometheus gauges."""

from __future__ import annotations

from typing import Any

import grpc
import pyarrow as pa
import pytest

from catalog_svc.health_history import HealthHistory
from catalog_svc.maintenance import Maintenance
from lsmlake.catalog.filesystem import FileSystemCatalog
from lsmlake.catalog.health import ranked, table_health
from lsmlake.catalog.operations import CatalogOperations
from lsmlake.client.health import TableHealthInfo
from lsmlake.metastore import now_ms, open_store
from lsmlake.proto_gen.lsmlake.v1 import catalog_pb2, catalog_pb2_grpc, common_pb2
from lsmlake.rpc.events import snapshot_events
from lsmlake.table.compact import compact_table
from tests.support.local_server import local_server


def _table(cat: FileSystemCatalog, name: str, writes: int, **options: str) -> Any:
    cat.create_table(f"db.{name}", "id BIGINT NOT NULL, v STRING", primary_keys=["id"],
                     options={"bucket": "1", "write-only": "true", **options})
    t = cat.get_table(f"db.{name}")
    for i in range(writes):
        t.write_arrow(pa.table({"id": pa.array(range(i * 10, i * 10 + 20), pa.int64()), "v": ["x"] * 20}))
    return cat.get_table(f"db.{name}")


def _created(t: Any) -> list[int]:
    """Creation times of the table's files, oldest first."""
    times = [f.creation_epoch_ms for s in t.plan() for f in s.files]
    assert None not in times
    return sorted(c for c in times if c is not None)


def test_lag_runs_and_score_follow_the_files(tmp_path: Any) -> None:
    cat = FileSystemCatalog(str(tmp_path))
    cat.create_database("db")
    busy = _table(cat, "busy", 8, **{"num-sorted-run.stop-trigger": "7"})  # 8 level-0 runs: past the stop trigger
    calm = _table(cat, "calm", 2)
    _table(cat, "full", 8, **{"num-sorted-run.stop-trigger": "8"})  # at the trigger: writers still write
    compact_table(calm, full=True)
    empty = _table(cat, "empty", 0)
    now = now_ms() + 60_000  # a minute later
    h_busy, h_calm, h_empty, h_full = (table_health(cat.get_table(f"db.{n}"), [], now)
                                       for n in ("busy", "calm", "empty", "full"))
    assert (h_busy.max_sorted_runs, h_busy.level0_files, h_busy.stalled) == (8, 8, True)
    assert (h_full.max_sorted_runs, h_full.stalled) == (8, False)
    # due since the fifth run made the newer runs outweigh the oldest by more than max-size-amplification 200%
    created = _created(busy)
    assert h_busy.lag_ms == now - created[4] >= 60_000
    assert h_busy.penalties["runs"] == 40.0 and 0 < h_busy.penalties["lag"] < 30
    assert h_busy.severity == "bad" and [r.cause for r in h_busy.reasons] == ["stalled", "lag"]
    assert [h.table for h in ranked([h_full, h_busy])] == ["db.busy", "db.full"]  # stalled first, score equal
    assert (h_calm.max_sorted_runs, h_calm.level0_files, h_calm.lag_ms, h_calm.stalled) == (1, 0, 0, False)
    assert h_calm.score == h_empty.score == 100 > h_full.score > h_busy.score and h_empty.buckets == ()
    assert [h.table for h in ranked([h_calm, h_empty, h_busy])] == ["db.busy", "db.calm", "db.empty"]
    assert empty.snapshots.latest() is None


def test_a_stop_trigger_below_the_compaction_trigger_still_stalls(tmp_path: Any) -> None:
    cat = FileSystemCatalog(str(tmp_path))
    cat.create_database("db")
    low = _table(cat, "low", 4, **{"num-sorted-run.stop-trigger": "3"})  # compaction-trigger 5
    h = table_health(low, [], now_ms())
    assert (h.max_sorted_runs, h.stalled, h.penalties["runs"], h.severity) == (4, True, 40.0, "bad")
    assert h.score <= 49 and h.reasons[0].cause == "stalled"


def test_deleted_rows_cost_points_past_the_delete_ratio(tmp_path: Any) -> None:
    """Half the rows deleted costs the full 15; four small files of an append bucket, below compaction.min.file-num
    (5), cost nothing."""
    cat = FileSystemCatalog(str(tmp_path))
    cat.create_database("db")
    cat.create_table("db.log", "id BIGINT NOT NULL, v STRING", options={"deletion-vectors.enabled": "true"})
    t = cat.get_table("db.log")
    for i in range(4):
        t.write_arrow(pa.table({"id": pa.array(range(i * 10, i * 10 + 10), pa.int64()), "v": ["x"] * 10}))
    t.delete_where([("id", "<", 20)])
    log = cat.get_table("db.log")
    snap = log.latest_snapshot()
    assert snap is not None
    h = table_health(log, [], snap.time_millis + 60_000)
    (bucket,) = h.buckets
    assert (bucket.files, bucket.small_files, bucket.rows, bucket.deleted_rows) == (4, 4, 40, 20)
    assert h.penalties == {"files": 0.0, "lag": 2.0, "deleted": 15.0}  # append tables have no sorted runs
    # files with more deleted rows than compaction.delete-ratio-threshold are due, since the deletes' commit
    assert (h.due_buckets, h.lag_ms) == (1, 60_000)
    assert [str(r) for r in h.reasons] == ["lag: a due compaction has waited 60 s (1 of 1 buckets due)",
                                           "deleted: 50% of the rows are marked deleted"]
    assert (h.score, h.severity) == (83, "good")


def test_an_append_table_waits_only_for_the_files_compaction_would_rewrite(tmp_path: Any) -> None:
    """Append files stay on level 0 when compacted: a compacted table has no lag, however old its file, and one
    whose small files do not yet make a compaction (fewer than `compaction.max.file-num`, far below the target
    size) has none due either. Append tables never stall."""
    cat = FileSystemCatalog(str(tmp_path))
    cat.create_database("db")
    for name, writes in (("done", 6), ("few", 2), ("due", 6)):
        cat.create_table(f"db.{name}", "id BIGINT NOT NULL, v STRING",
                         options={"compaction.max.file-num": "4", "num-sorted-run.stop-trigger": "2"})
        t = cat.get_table(f"db.{name}")
        for i in range(writes):
            t.write_arrow(pa.table({"id": pa.array(range(i * 10, i * 10 + 10), pa.int64()), "v": ["x"] * 10}))
    compact_table(cat.get_table("db.done"), full=True)
    later = now_ms() + 3_600_000
    done, few, due = (table_health(cat.get_table(f"db.{n}"), [], later) for n in ("done", "few", "due"))
    assert (done.buckets[0].files, done.lag_ms, done.penalties["lag"]) == (1, 0, 0.0)
    assert (few.buckets[0].files, few.lag_ms) == (2, 0)
    # the window of max.file-num (4) files was complete when its fourth file was written
    files = _created(cat.get_table("db.due"))
    assert due.lag_ms == later - files[3] and due.penalties["lag"] == 30.0
    # no sorted runs and no stop trigger, whatever num-sorted-run.stop-trigger says: append tables never stall
    assert (due.max_sorted_runs, due.stop_trigger, due.stalled, due.max_small_files) == (0, 0, False, 6)


def _break(cat: FileSystemCatalog, table_id: str) -> None:
    """Delete the manifest lists of the table's latest snapshot: its files can no longer be listed."""
    t = cat.get_table(table_id)
    snap = t.snapshots.latest()
    assert snap is not None
    for name in (snap.base_manifest_list, snap.delta_manifest_list):
        t.io.delete(f"{t.path}/manifest/{name}")


def test_list_table_health_over_grpc_and_the_gauges(tmp_path: Any) -> None:
    with local_server(str(tmp_path)) as lake:
        cat = FileSystemCatalog(str(tmp_path))
        cat.create_database("db")
        _table(cat, "a", 7)  # past the compaction trigger (5): a compaction is due
        _table(cat, "b", 1)
        with grpc.insecure_channel(f"127.0.0.1:{lake.server.port}") as ch:
            stub = catalog_pb2_grpc.CatalogServiceStub(ch)
            got = stub.ListTableHealth(catalog_pb2.ListTableHealthRequest(), timeout=30).tables
            assert [t.table.table for t in got] == ["a", "b"]  # a has more runs: worse
            assert [(t.max_sorted_runs, t.level0_files) for t in got] == [(7, 7), (1, 1)]
            assert got[0].lag_ms > 0 and got[0].score < 100
            # the catalog sends the colour band (runs 7 of 5..8 cost 27 points: a warning), the reasons and the
            # triggers they are measured against, so no client restates the scoring
            assert [t.severity for t in got] == ["warning", "good"]
            infos = [TableHealthInfo.from_proto(t) for t in got]
            assert [i.severity for i in infos] == ["warning", "good"]
            assert [r.cause for r in got[0].reasons] == ["runs"] and infos[0].reasons[0].startswith("runs: 7")
            assert (infos[0].due_buckets, infos[0].compaction_trigger, infos[0].primary_key) == (1, 5, True)
            assert (infos[1].due_buckets, infos[1].reasons) == (0, ())
            assert all(not t.buckets for t in got)
            one = stub.ListTableHealth(catalog_pb2.ListTableHealthRequest(
                table=common_pb2.TableIdentifier(database="db", table="b"), with_buckets=True), timeout=30).tables
            assert [(b.bucket, b.sorted_runs, b.rows, b.due) for b in one[0].buckets] == [(0, 1, 20, False)]
            # one run, nothing due: no lag however long it has waited
            assert one[0].buckets[0].lag_ms == one[0].lag_ms == 0 and one[0].score == 100 and not one[0].error
            with pytest.raises(grpc.RpcError) as e:
                stub.ListTableHealth(catalog_pb2.ListTableHealthRequest(
                    table=common_pb2.TableIdentifier(database="db", table="nope")), timeout=30)
            assert e.value.code() == grpc.StatusCode.NOT_FOUND
        metrics = lake.server.metrics
        store = open_store(lake.server.settings.metastore)  # the service's store, opened again
        maintenance = Maintenance(CatalogOperations(cat, store, snapshot_events), metrics, 0, 0, health_interval_s=1)
        assert maintenance.update_health() == 2
        sample = metrics.registry.get_sample_value
        assert sample("lsmlake_table_sorted_runs_max", {"table": "db.a"}) == 7
        assert sample("lsmlake_table_level0_files", {"table": "db.b"}) == 1
        assert 0 < (sample("lsmlake_table_health_score", {"table": "db.a"}) or 0) < 100
        assert (sample("lsmlake_table_compaction_lag_seconds", {"table": "db.a"}) or 0) > 0
        history = maintenance.history = HealthHistory()
        assert maintenance.update_health() == 2 and len(history.of("db.a")) == 1
        assert [(s.severity, s.due_buckets) for s in history.of("db.a") + history.of("db.b")] == [
            ("warning", 1), ("good", 0)]
        assert sample("lsmlake_table_unreadable", {"table": "db.a"}) == 0
        # a table that cannot be read ranks first with its error; it keeps its gauges, flagged, and its history
        _break(cat, "db.a")
        with grpc.insecure_channel(f"127.0.0.1:{lake.server.port}") as ch:
            got = catalog_pb2_grpc.CatalogServiceStub(ch).ListTableHealth(catalog_pb2.ListTableHealthRequest(),
                                                                           timeout=30).tables
        assert [(t.table.table, t.score, bool(t.error)) for t in got] == [("a", 0, True), ("b", got[1].score, False)]
        assert "manifest" in got[0].error.lower() or "no such file" in got[0].error.lower()
        assert maintenance.update_health() == 2
        assert sample("lsmlake_table_unreadable", {"table": "db.a"}) == 1
        assert sample("lsmlake_table_sorted_runs_max", {"table": "db.a"}) == 7  # the last figures, kept
        assert len(history.of("db.a")) == 1
        cat.drop_table("db.b")
        assert maintenance.update_health() == 2 - 1
        assert sample("lsmlake_table_level0_files", {"table": "db.b"}) is None  # a dropped table's gauges go
        store.close()
