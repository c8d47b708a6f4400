"""Paimon's compaction options, each rule table-driven as Paimon defines it (read in its source; the facts and
their sources are in docs/compaction-options.md): off-peak hours, the total and incremental size thresholds,
lookup-compact radical | gentle with its max interval, and the delete ratio of append tables."""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pytest

from lsmlake.catalog.filesystem import FileSystemCatalog
from lsmlake.format import options as opts
from lsmlake.format.options import TableOptions
from lsmlake.mergetree.compact.force_up_level0 import ForceUpLevel0Compaction, TriggerCount
from lsmlake.mergetree.compact.strategy import strategy_from_options
from lsmlake.mergetree.compact.universal import OffPeakHours, UniversalCompaction
from lsmlake.table.append_compaction import AppendCompactManager
from lsmlake.table.compact import split_dir
from tests.support.compaction import runs


@pytest.mark.parametrize(("start", "end", "hours", "expected"), [
    (2, 8, [1, 2, 7, 8, 9], [0, 10, 10, 0, 0]),  # [start, end): the end hour is outside
    (22, 6, [21, 22, 23, 0, 5, 6, 10], [0, 10, 10, 10, 10, 0, 0]),  # spans midnight
    (23, 0, [22, 23, 0], [0, 10, 0]),
    (0, 23, [0, 22, 23], [10, 10, 0]),
])
def test_offpeak_window(start: int, end: int, hours: list[int], expected: list[int]) -> None:
    window = OffPeakHours.of(start, end, 10)
    assert window is not None
    assert [window.ratio_at(h) for h in hours] == expected


@pytest.mark.parametrize(("start", "end"), [(5, 5), (-1, 6), (2, -1), (-1, -1)])
def test_no_offpeak_window(start: int, end: int) -> None:
    assert OffPeakHours.of(start, end, 10) is None  # equal hours mean no window, not all day


def _universal(trigger: int, offpeak: int = 0, **kw: Any) -> UniversalCompaction:
    return UniversalCompaction(max_size_amp=200, size_ratio=1, num_run_trigger=trigger,
                               offpeak=OffPeakHours.of(0, 23, offpeak) if offpeak else None, hour=lambda: 12, **kw)


def _shape(unit: Any) -> tuple[list[int], int] | None:
    return None if unit is None else ([f.file_size for f in unit.files], unit.output_level)


@pytest.mark.parametrize(("trigger", "spec", "offpeak", "expected"), [
    (2, [(0, 100), (2, 102)], 0, None),  # 100 * 1.01 < 102: not merged
    (2, [(0, 100), (2, 102)], 10, ([100, 102], 2)),  # off peak: 100 * 1.11 >= 102
    (2, [(0, 100), (2, 101)], 0, ([100, 101], 2)),  # 101.0 < 101 is false: merged
    (2, [(0, 100), (2, 111)], 10, ([100, 111], 2)),
    (2, [(0, 100), (2, 112)], 10, None),
    (5, [(0, 100), (0, 110), (0, 130), (0, 150), (2, 100000)], 0, None),
    (5, [(0, 100), (0, 110), (0, 130), (0, 150), (2, 100000)], 20, ([100, 110, 130, 150], 1)),
])
def test_offpeak_ratio_adds_to_the_size_ratio(trigger: int, spec: list[tuple[int, int]], offpeak: int,
                                              expected: tuple[list[int], int] | None) -> None:
    assert _shape(_universal(trigger, offpeak).pick(3, runs(spec))) == expected


def test_offpeak_follows_the_hour() -> None:
    hour = [3]
    s = UniversalCompaction(num_run_trigger=2, offpeak=OffPeakHours.of(22, 6, 10), hour=lambda: hour[0])
    spec = [(0, 100), (2, 105)]
    assert _shape(s.pick(3, runs(spec))) == ([100, 105], 2)  # 3 o'clock: inside 22-6
    hour[0] = 12
    assert s.pick(3, runs(spec)) is None


@pytest.mark.parametrize(("total", "incremental", "levels", "spec", "expected"), [
    (10, None, 3, [(0, 1), (1, 3), (2, 5)], ([1, 3, 5], 2)),  # total 9 < 10: full
    (10, None, 3, [(0, 2), (1, 6), (2, 10)], None),  # 18 >= 10; then 3 runs < trigger 5
    (9, None, 3, [(0, 1), (1, 3), (2, 5)], None),  # 9 < 9 is false
    (10, None, 3, [(2, 5)], None),  # a single run never
    (None, 8, 3, [(0, 1), (1, 3), (2, 5)], None),  # incremental 1 + 3 = 4
    (None, 8, 3, [(0, 5), (1, 4), (2, 100)], ([5, 4, 100], 2)),  # 9 > 8
    (None, 9, 3, [(0, 5), (1, 4), (2, 100)], None),  # 9 > 9 is false
    (None, 8, 3, [(0, 5), (0, 4)], ([5, 4], 2)),  # no run on the highest level: all incremental
    (None, 8, 6, [(0, 5), (2, 4), (5, 1)], ([5, 4, 1], 5)),  # every level below the highest counts
])
def test_total_and_incremental_size_thresholds(total: int | None, incremental: int | None, levels: int,
                                               spec: list[tuple[int, int]],
                                               expected: tuple[list[int], int] | None) -> None:
    s = _universal(5, total_size_threshold=total, incremental_size_threshold=incremental)
    assert _shape(s.pick(levels, runs(spec))) == expected


def test_the_thresholds_come_from_the_options() -> None:
    o = TableOptions({"compaction.total-size-threshold": "1 kb", "compaction.incremental-size-threshold": "2 mb",
                      "compaction.offpeak.start.hour": "22", "compaction.offpeak.end.hour": "6",
                      "compaction.offpeak-ratio": "30"})
    s = strategy_from_options(o, hour=lambda: 23)
    assert isinstance(s, UniversalCompaction)
    assert (s.total_size_threshold, s.incremental_size_threshold) == (1024, 2 << 20)
    assert s.offpeak == OffPeakHours(22, 6, 30) and s.offpeak.ratio_at(s.hour()) == 30


@pytest.mark.parametrize(("options", "kind", "interval"), [
    ({}, UniversalCompaction, None),  # no lookup: lookup-compact is ignored
    ({"lookup-compact": "gentle"}, UniversalCompaction, None),
    ({"deletion-vectors.enabled": "true"}, ForceUpLevel0Compaction, None),  # radical by default
    ({"deletion-vectors.enabled": "true", "lookup-compact": "gentle"}, ForceUpLevel0Compaction, 10),
    ({"changelog-producer": "lookup", "lookup-compact": "gentle", "num-sorted-run.compaction-trigger": "3"},
     ForceUpLevel0Compaction, 6),
    ({"merge-engine": "first-row", "lookup-compact": "gentle", "lookup-compact.max-interval": "2"},
     ForceUpLevel0Compaction, 5),  # never below the trigger
    ({"force-lookup": "true", "lookup-compact": "gentle", "lookup-compact.max-interval": "20"},
     ForceUpLevel0Compaction, 20),
    ({"compaction.force-up-level-0": "true"}, ForceUpLevel0Compaction, None),
    ({"compaction.force-up-level-0": "true", "lookup-compact": "gentle"}, ForceUpLevel0Compaction, None),
])
def test_lookup_compact_strategy(options: dict[str, str], kind: type, interval: int | None) -> None:
    s = strategy_from_options(TableOptions(options), triggers=TriggerCount())
    assert type(s) is kind
    if isinstance(s, ForceUpLevel0Compaction):
        assert s.max_interval == interval


@pytest.mark.parametrize(("spec", "expected"), [
    ([(0, 1), (2, 100)], ([1], 1)),
    ([(0, 1), (0, 5), (2, 10)], ([1, 5], 1)),
    ([(0, 1), (0, 5), (0, 10), (0, 20)], ([1, 5, 10, 20], 2)),
    ([(0, 1), (1, 99), (2, 102)], ([1, 99], 1)),
    ([(2, 10)], None),
])
def test_radical_moves_level0_up_whenever_nothing_else_is_due(spec: list[tuple[int, int]],
                                                               expected: tuple[list[int], int] | None) -> None:
    assert _shape(ForceUpLevel0Compaction(_universal(5)).pick(3, runs(spec))) == expected


def test_gentle_moves_level0_up_every_interval_th_trigger_that_found_nothing() -> None:
    triggers = TriggerCount()
    s = ForceUpLevel0Compaction(_universal(5), max_interval=5, triggers=triggers)
    spec = [(0, 1), (2, 100)]
    got = [_shape(s.pick(3, runs(spec))) for _ in range(6)]
    assert got == [None, None, None, None, ([1], 1), None] and triggers.count == 1
    # a trigger where universal compaction picks does not count
    busy = [(0, 10)] * 5 + [(2, 12)]
    assert s.pick(3, runs(busy)) is not None and triggers.count == 1
    # reaching the interval with no level-0 run resets the count and picks nothing
    triggers.count = 4
    assert s.pick(3, runs([(2, 10)])) is None and triggers.count == 0


def test_without_a_count_gentle_acts_as_radical() -> None:
    """An explicit compaction (`lake compact`) has no planning history: level 0 moves up."""
    s = strategy_from_options(TableOptions({"deletion-vectors.enabled": "true", "lookup-compact": "gentle"}))
    assert isinstance(s, ForceUpLevel0Compaction) and s.max_interval is None


def _append_bucket(tmp_path: Any, bucket: str, threshold: str | None, rows: int, deleted: int) -> AppendCompactManager:
    """An append table with deletion vectors holding one big file of `rows` rows, `deleted` of them deleted."""
    cat = FileSystemCatalog(str(tmp_path / f"b{bucket}"))
    cat.create_database("db")
    options = {"bucket": bucket, "deletion-vectors.enabled": "true"}
    if bucket != "-1":
        options["bucket-key"] = "id"
    if threshold is not None:
        options["compaction.delete-ratio-threshold"] = threshold
    cat.create_table("db.a", "id BIGINT NOT NULL, v STRING", options=options)
    table = cat.get_table("db.a")
    table.write_arrow(pa.table({"id": pa.array([0] * rows, pa.int64()), "v": [f"{i:06d}" for i in range(rows)]}))
    table.delete_where([("v", "<", f"{deleted:06d}")])
    table = cat.get_table("db.a")
    (split,) = table.new_scan(None, None, all_levels=True).plan()
    return AppendCompactManager(table, split, split_dir(table, split))


@pytest.mark.parametrize(("threshold", "rows", "deleted", "compacted"), [
    (None, 100, 21, True),  # the default 0.2: 21 > 20
    (None, 100, 20, False),  # 20 > 20 is false
    (None, 100, 11, False),
    ("0.25", 1000, 250, False),
    ("0.25", 1000, 251, True),
])
def test_delete_ratio_of_append_tables(tmp_path: Any, threshold: str | None, rows: int, deleted: int,
                                       compacted: bool) -> None:
    """A bucket -1 append table: its one file (one is too few for a small-file compaction) is compacted alone once the
    deleted share passes the threshold, and the rewrite drops the deleted rows; fixed buckets ignore the option."""
    manager = _append_bucket(tmp_path, "-1", threshold, rows, deleted)
    assert (manager.plan() is not None) == compacted
    if compacted:
        result = manager.compact()
        assert result is not None and sum(f.row_count for f in result.after) == rows - deleted
    assert _append_bucket(tmp_path, "2", threshold, rows, deleted).plan() is None


def test_the_delete_ratio_option_is_a_number() -> None:
    with pytest.raises(Exception, match="bad number"):
        TableOptions({"compaction.delete-ratio-threshold": "lots"}).get(opts.COMPACTION_DELETE_RATIO_THRESHOLD)
