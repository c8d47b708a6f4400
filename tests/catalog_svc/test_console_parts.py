"""The console's parts without a server: the last hour's figures against a plain-Python reckoning, the linear LSM
picture, paging, query parameters, links that keep the refresh setting, the colour bands, how figures are
written."""

from __future__ import annotations

import re
from pathlib import Path

import pyarrow as pa
import pytest

from catalog_svc import console_format as fmt
from catalog_svc.console_figures import PlanTimes, SnapshotDelta, SnapshotDeltas, activity
from catalog_svc.console_page import View, band_of, int_param, pager
from catalog_svc.console_svg import MIN_BAR_PX, lsm_svg
from lsmlake.catalog.filesystem import FileSystemCatalog
from lsmlake.errors import InvalidInputError
from lsmlake.metastore import CompactionPlan
from lsmlake.table.compact import compact_table

NOW = 1_700_000_000_000
MIN = 60_000


def _delta(sid: int, kind: str, ago_ms: int, rows: int, added: int, deleted: int = 0) -> SnapshotDelta:
    return SnapshotDelta(sid, kind, NOW - ago_ms, rows, added, 1, deleted, 1 if deleted else 0)


def _plan(pid: int, state: str, created: int, started: int | None, updated: int) -> CompactionPlan:
    return CompactionPlan(pid, "db.t", b"", 0, ("f",), 5, state, "c/1", 1, None, None, created, updated, started)


def test_the_last_hour_s_figures_are_the_sums_of_the_snapshots_and_plans() -> None:
    deltas = [_delta(1, "APPEND", 50 * MIN, 100, 1000), _delta(2, "APPEND", 40 * MIN, 300, 3000),
              _delta(3, "COMPACT", 30 * MIN, 400, 3500, deleted=4000), _delta(4, "OVERWRITE", 10 * MIN, 50, 500)]
    done = PlanTimes(_plan(1, "COMPLETED", NOW - 31 * MIN, NOW - 30 * MIN - 8000, NOW - 30 * MIN), 1, 4000, 52_000,
                     8000)
    old = PlanTimes(_plan(2, "COMPLETED", NOW - 90 * MIN, NOW - 89 * MIN, NOW - 88 * MIN), 1, 9999, 1, 60_000)
    running = PlanTimes(_plan(3, "INFLIGHT", NOW - MIN, NOW - MIN, NOW - MIN), 1, 7777, 0, None)
    a = activity(deltas, [done, old, running], NOW)
    # by hand: the window starts at the first snapshot (50 minutes ago); compaction is not a write
    span_s = 50 * 60
    assert a.window_ms == span_s * 1000 and a.snapshots == 4
    assert (a.written_rows, a.written_bytes) == (100 + 300 + 50, 1000 + 3000 + 500)
    assert a.rows_per_s == pytest.approx(450 / span_s) and a.bytes_per_s == pytest.approx(4500 / span_s)
    assert (a.compacted_bytes, a.compaction_output_bytes) == (4000, 3500)
    assert a.compacted_per_s == pytest.approx(4000 / span_s)
    assert a.write_amplification == pytest.approx((4500 + 3500) / 4500)
    # only the plan completed in the window counts, the running one has no run time yet
    assert (a.plan_run_ms, a.plan_input_bytes) == (8000, 4000) and a.plan_bytes_per_s == pytest.approx(500.0)


def test_no_writes_no_amplification_and_no_plans_no_plan_throughput() -> None:
    a = activity([_delta(1, "COMPACT", MIN, 10, 100, deleted=120)], [], NOW)
    assert a.write_amplification is None and a.plan_bytes_per_s is None and a.rows_per_s == 0
    empty = activity([], [], NOW)
    assert (empty.window_ms, empty.snapshots, empty.bytes_per_s) == (0, 0, 0.0)


def test_the_lsm_picture_is_linear_and_writes_each_level_s_size() -> None:
    svg = lsm_svg("p=<b> bucket 0", [(0, [(1000, 1), (3000, 1)]), (2, [(8000, 4)]), (5, [(2, 1)])], 5)
    bars = re.findall(r'<rect class="run" data-level="(\d)" data-bytes="(\d+)" data-files="(\d+)" x="[\d.]+" '
                      r'y="\d+" width="([\d.]+)"', svg)
    widths = {(int(level), int(size)): float(w) for level, size, _, w in bars}
    # level 2 is the fullest (8,000 bytes): it fills the 300 px; level 0 holds half of that
    assert widths[(2, 8000)] == 300.0
    assert widths[(0, 1000)] == pytest.approx(37.5) and widths[(0, 3000)] == pytest.approx(112.5)
    assert widths[(5, 2)] == MIN_BAR_PX  # 0.075 px: drawn at the least width
    labels = dict(re.findall(r'<text class="level-size" data-level="(\d)"[^>]*>([^<]*)</text>', svg))
    assert labels == {"0": f"{fmt.size(4000)}, 2 files, 2 runs", "2": f"{fmt.size(8000)}, 4 files",
                      "5": "2 B, 1 file"}
    assert "<b>" not in svg and "p=&lt;b&gt;" in svg


@pytest.mark.parametrize(("total", "number", "expected"), [
    (0, 1, (0, 0, "0–0 of 0 (page 1 of 1)")), (120, 1, (0, 50, "1–50 of 120 (page 1 of 3)")),
    (120, 3, (100, 120, "101–120 of 120 (page 3 of 3)")), (120, 9, (100, 120, "101–120 of 120 (page 3 of 3)"))])
def test_pages(total: int, number: int, expected: tuple[int, int, str]) -> None:
    start, end, html = pager("page", total, number, 50, View("/", {}, 15), "tables")
    assert (start, end) == expected[:2] and f"tables {expected[2]}" in html
    assert ('class="prev"' in html) is (number > 1 and total > 0)
    assert ('class="next"' in html) is (end < total)


@pytest.mark.parametrize(("text", "message"), [
    ("x", "page='x' is not a whole number in 1..99"), ("0", "page='0' is not a whole number in 1..99"),
    ("-1", "page='-1' is not a whole number in 1..99"), ("100", "page='100' is not a whole number in 1..99")])
def test_a_bad_number_in_the_address_is_refused_naming_it(text: str, message: str) -> None:
    with pytest.raises(InvalidInputError) as e:
        int_param({"page": text}, "page", 1, 1, 99)
    assert str(e.value) == message
    assert int_param({}, "page", 7, 1, 99) == 7 and int_param({"page": " 42 "}, "page", 1, 1, 99) == 42


def test_links_keep_the_refresh_setting() -> None:
    off = View.of("/table/db/t", {"refresh": "0", "pq": "dt=1", "sp": "2"})
    assert off.refresh_s == 0
    assert off.url(sp=3) == "/table/db/t?refresh=0&pq=dt%3D1&sp=3"
    assert off.url("/services") == "/services?refresh=0"
    assert off.url(refresh=15) == "/table/db/t?refresh=15&pq=dt%3D1&sp=2"
    default = View.of("/", {})
    assert default.refresh_s == 15 and default.url("/services") == "/services"
    with pytest.raises(InvalidInputError, match="refresh='fast'"):
        View.of("/", {"refresh": "fast"})


@pytest.mark.parametrize(("score", "severity", "colour"), [
    (100, "good", "green"), (80, None, "green"), (79, None, "amber"), (50, None, "amber"), (49, None, "red"),
    (95, "bad", "red"), (60, "warning", "amber")])
def test_colour_bands(score: int, severity: str | None, colour: str) -> None:
    assert band_of(score, severity) == colour


def test_figures_are_written_one_way() -> None:
    assert [fmt.size(n) for n in (0, 812, 1024, 1_269_000, 40.3 * 2**30)] == ["0 B", "812 B", "1 KB", "1.21 MB",
                                                                             "40.3 GB"]
    assert [fmt.duration(ms) for ms in (5, 1500, 45_000, 600_000, 9_000_000)] == ["5 ms", "1.5 s", "45 s",
                                                                                  "10 min", "2.5 h"]
    assert fmt.rate(2048) == "2 KB/s" and fmt.rate(12.34, "rows") == "12.3 rows/s"
    assert fmt.ratio(None) == "–" and fmt.ratio(1.755) == "1.75x"


def test_kept_deltas_answer_as_a_fresh_read_does_after_more_commits(tmp_path: Path) -> None:
    cat = FileSystemCatalog(str(tmp_path))
    cat.create_database("db")
    table = cat.create_table("db.t", "id BIGINT NOT NULL", primary_keys=["id"], options={"bucket": "1"})
    kept = SnapshotDeltas()
    for i in range(3):
        table.write_arrow(pa.table({"id": pa.array(range(i * 10, i * 10 + 10), pa.int64())}))
    now = table.snapshots.latest().time_millis + 1000  # type: ignore[union-attr]
    assert [d.snapshot_id for d in kept.recent(table, now)] == [1, 2, 3]
    compact_table(table, full=True)
    table.write_arrow(pa.table({"id": pa.array([99], pa.int64())}))
    now += 60_000
    first = kept.recent(table, now)
    assert first == SnapshotDeltas().recent(table, now)
    assert [(d.snapshot_id, d.kind) for d in first] == [(1, "APPEND"), (2, "APPEND"), (3, "APPEND"), (4, "COMPACT"),
                                                        (5, "APPEND")]
    assert first[3].deleted_files == 3 and first[3].added_rows == 30 and first[4].added_rows == 1
    assert kept.recent(table, now, limit=2) == first[-2:]
    assert kept.recent(table, now + 2 * 3_600_000) == []  # all older than the window
