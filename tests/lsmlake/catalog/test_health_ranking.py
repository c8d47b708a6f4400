"""The health ranking on tables in known states, built with the library in a temporary warehouse: quiet, steady,
stalled, backlogged, a compacted deletion-vector table, append tables with few and with many small files. The
clock is injected (`now_ms`), never waited for."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest

from lsmlake.catalog.filesystem import FileSystemCatalog
from lsmlake.catalog.health import TableHealth, ranked, table_health
from lsmlake.table.compact import compact_table, plan_bucket
from lsmlake.table.file_store_table import FileStoreTable

MINUTE = 60_000
DAY = 24 * 60 * MINUTE
SCHEMA = "id BIGINT NOT NULL, v STRING"


def _write(t: FileStoreTable, start: int, n: int) -> None:
    t.write_arrow(pa.table({"id": pa.array(range(start, start + n), pa.int64()), "v": ["x" * 20] * n}))


def _pk(cat: FileSystemCatalog, name: str, **options: str) -> FileStoreTable:
    cat.create_table(f"db.{name}", SCHEMA, primary_keys=["id"],
                     options={"bucket": "1", "write-only": "true", **options})
    return cat.get_table(f"db.{name}")


def _append(cat: FileSystemCatalog, name: str, writes: int, **options: str) -> FileStoreTable:
    cat.create_table(f"db.{name}", SCHEMA, options={"write-only": "true", **options})
    for i in range(writes):
        _write(cat.get_table(f"db.{name}"), i * 10, 10)
    return cat.get_table(f"db.{name}")


def _created(t: FileStoreTable) -> list[int]:
    """Creation times of the table's live files, oldest first."""
    times = [f.creation_epoch_ms for s in t.new_scan(all_levels=True).plan() for f in s.files]
    assert all(c is not None for c in times)
    return sorted(c for c in times if c is not None)


def _nothing_due(t: FileStoreTable) -> bool:
    """What `lake compact` would answer: no bucket has a unit to run."""
    return all(plan_bucket(t, s) is None for s in t.new_scan(all_levels=True).plan())


@pytest.fixture(scope="module")
def lake(tmp_path_factory: pytest.TempPathFactory) -> FileSystemCatalog:
    cat = FileSystemCatalog(str(tmp_path_factory.mktemp("wh")))
    cat.create_database("db")
    quiet = _pk(cat, "quiet")
    for i in range(3):
        _write(cat.get_table("db.quiet"), i * 100, 200)
    compact_table(quiet, full=True)
    steady = _pk(cat, "steady")  # a compacted base and three commits since: 4 runs, compaction-trigger 5
    _write(steady, 0, 500)
    compact_table(cat.get_table("db.steady"), full=True)
    for i in range(3):
        _write(cat.get_table("db.steady"), i * 10, 20)
    for i in range(10):  # ten level-0 runs, past the stop trigger (8): writers of this bucket wait
        _write(cat.get_table("db.stalled") if i else _pk(cat, "stalled"), i * 10, 20)
    for i in range(7):  # seven runs: past the compaction trigger (5), a compaction is due, nobody ran it
        _write(cat.get_table("db.backlogged") if i else _pk(cat, "backlogged"), i * 10, 20)
    _pk(cat, "dv", **{"deletion-vectors.enabled": "true"})
    _write(cat.get_table("db.dv"), 0, 20_000)
    compact_table(cat.get_table("db.dv"))
    for i in range(3):  # each round's smaller write, compacted up: runs on levels 2..5, the steady state
        _write(cat.get_table("db.dv"), i * 7, 2000 // (i + 1))
        compact_table(cat.get_table("db.dv"))
    _append(cat, "append_few", 3)  # three small files, below compaction.min.file-num (5)
    _append(cat, "append_many", 10, **{"compaction.max.file-num": "8"})  # ten: past max.file-num
    return cat


def _healths(cat: FileSystemCatalog, now: int) -> dict[str, TableHealth]:
    return {n.split(".")[1]: table_health(cat.get_table(n), [], now) for n in cat.table_ids("db")}


def test_the_ranking_of_tables_in_known_states(lake: FileSystemCatalog) -> None:
    newest = max(c for n in lake.table_ids("db") for c in _created(lake.get_table(n)))
    now = newest + 10 * MINUTE
    h = _healths(lake, now)
    assert [x.table.split(".")[1] for x in ranked(list(h.values()))] == [
        "stalled", "append_many", "backlogged", "steady", "dv", "quiet", "append_few"]

    # stalled: past its stop trigger, due since its fifth run made the newer runs outweigh the oldest by more
    # than compaction.max-size-amplification-percent (200%)
    stalled = h["stalled"]
    assert (stalled.stalled, stalled.max_sorted_runs, stalled.stop_trigger, stalled.severity) == (True, 10, 8, "bad")
    assert stalled.lag_ms == now - _created(lake.get_table("db.stalled"))[4]
    assert stalled.score <= 49 and [r.cause for r in stalled.reasons] == ["stalled", "lag"]

    backlogged = h["backlogged"]
    assert (backlogged.stalled, backlogged.max_sorted_runs, backlogged.due_buckets) == (False, 7, 1)
    assert backlogged.lag_ms == now - _created(lake.get_table("db.backlogged"))[4] > 10 * MINUTE
    assert backlogged.penalties["runs"] == pytest.approx(40 * (7 - 5) / (8 - 5))
    assert backlogged.severity == "warning" and [r.cause for r in backlogged.reasons] == ["runs", "lag"]
    assert not _nothing_due(lake.get_table("db.backlogged"))

    # append tables: no sorted runs, no stop trigger; the window of max.file-num files was due once the eighth
    # was written
    many = h["append_many"]
    assert (many.primary_key, many.max_sorted_runs, many.stop_trigger, many.stalled) == (False, 0, 0, False)
    assert (many.max_small_files, many.min_file_num, many.max_file_num) == (10, 5, 8)
    assert many.lag_ms == now - _created(lake.get_table("db.append_many"))[7]
    assert many.penalties["files"] == 40 and many.severity == "bad"
    assert [r.cause for r in many.reasons] == ["files", "lag"]

    # the healthy ones: nothing due, so `lake compact` has nothing to do and there is no lag
    for name in ("steady", "dv", "quiet", "append_few"):
        x = h[name]
        assert (x.score, x.severity, x.reasons, x.lag_ms, x.due_buckets) == (100, "good", (), 0, 0), name
        assert _nothing_due(lake.get_table(f"db.{name}")), name
    assert (h["steady"].max_sorted_runs, h["steady"].level0_files) == (4, 3)
    assert h["quiet"].max_sorted_runs == 1
    assert h["append_few"].max_small_files == 3


def test_a_compacted_deletion_vector_table_is_healthy(lake: FileSystemCatalog) -> None:
    """Runs on levels 2..5 and small upper levels are universal compaction's steady state, not small files."""
    t = lake.get_table("db.dv")
    levels = sorted(f.level for s in t.new_scan(all_levels=True).plan() for f in s.files)
    assert levels == [2, 3, 4, 5]
    h = table_health(t, [], _created(t)[-1] + DAY)
    (bucket,) = h.buckets
    assert bucket.small_files == 0 and bucket.deleted_rows > 0 and not bucket.due
    assert (h.score, h.severity, h.reasons) == (100, "good", ())


def test_quiet_data_never_lags(lake: FileSystemCatalog) -> None:
    """Tables compaction leaves alone keep no lag however long nothing is written."""
    for name in ("quiet", "steady", "dv", "append_few"):
        t = lake.get_table(f"db.{name}")
        for later in (MINUTE, DAY, 30 * DAY):
            h = table_health(t, [], _created(t)[-1] + later)
            assert (h.lag_ms, h.score) == (0, 100), (name, later)


def test_lag_grows_only_while_a_compaction_is_due(lake: FileSystemCatalog) -> None:
    t = lake.get_table("db.backlogged")
    due = _created(t)[4]
    lags = [table_health(t, [], due + m * MINUTE) for m in (0, 5, 15, 60)]
    assert [x.lag_ms for x in lags] == [0, 5 * MINUTE, 15 * MINUTE, 60 * MINUTE]
    assert [round(x.penalties["lag"], 6) for x in lags] == [0, 10, 30, 30]  # full at 15 minutes
    assert [x.severity for x in lags] == ["warning", "warning", "bad", "bad"]


def test_an_append_table_between_min_and_max_file_num(tmp_path: Path) -> None:
    """From compaction.min.file-num small files an append bucket costs points, growing to the full weight at
    max.file-num; below the target file size they make no compaction yet (Paimon's bucketed rule), so no lag."""
    cat = FileSystemCatalog(str(tmp_path))
    cat.create_database("db")
    t = _append(cat, "some", 6, **{"compaction.max.file-num": "10"})
    h = table_health(t, [], _created(t)[-1] + DAY)
    assert (h.max_small_files, h.lag_ms, h.due_buckets) == (6, 0, 0) and _nothing_due(t)
    assert h.penalties["files"] == pytest.approx(40 * (6 - 4) / (10 - 4))
    assert [r.cause for r in h.reasons] == ["files"] and h.severity == "good"
    compact_table(t, full=True)
    done = table_health(cat.get_table("db.some"), [], _created(t)[-1] + DAY)
    assert (done.max_small_files, done.score, done.reasons) == (0, 100, ())  # one file, its bucket's whole data


def test_a_full_compaction_on_schedule_is_due_from_the_end_of_the_interval(tmp_path: Path) -> None:
    """With `compaction.optimization-interval`, a compacted bucket with one more commit is left alone until the
    interval has passed since the last full compaction; then it is due, and its lag counts from that moment, not
    from its file."""
    cat = FileSystemCatalog(str(tmp_path))
    cat.create_database("db")
    t = _pk(cat, "t", **{"compaction.optimization-interval": "1 h"})
    _write(t, 0, 100)
    compact_table(cat.get_table("db.t"), full=True)
    full = cat.get_table("db.t").latest_snapshot()
    assert full is not None
    _write(cat.get_table("db.t"), 0, 10)  # two runs: universal compaction alone leaves them
    t = cat.get_table("db.t")
    before = table_health(t, [], full.time_millis + 59 * MINUTE)
    assert (before.due_buckets, before.lag_ms, before.score) == (0, 0, 100)
    after = table_health(t, [], full.time_millis + 75 * MINUTE)
    assert (after.due_buckets, after.lag_ms) == (1, 15 * MINUTE)
    assert [r.cause for r in after.reasons] == ["lag"] and (after.score, after.severity) == (70, "warning")
