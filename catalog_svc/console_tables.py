"""The console's table list (`/`): every table ranked by health (unreadable, then stalled, then the worst score),
filtered by a part of its name (`?q=`) and paged (`?page=`), with each table's size, rows and files, write rate,
compaction throughput, write amplification and health figures (those of the tables on the page)."""

from __future__ import annotations

from collections.abc import Sequence
from html import escape

from catalog_svc import console_format as fmt
from catalog_svc.console_figures import WINDOW_MS, Activity, SnapshotDeltas, activity, plan_times
from catalog_svc.console_page import View, band_of, filter_form, int_param, pager, score_html, text_param
from lsmlake.catalog.health import TableHealth
from lsmlake.catalog.operations import CatalogOperations
from lsmlake.catalog.statistics import FileStats

PAGE_SIZE = 50


def _lag(ms: float) -> str:
    return fmt.duration(ms) if ms else "0 s"


def table_figures(operations: CatalogOperations, deltas: SnapshotDeltas, tid: str,
                  now: int) -> tuple[FileStats, Activity] | None:
    """A table's size, rows and files at its latest snapshot, and its activity over the last hour; None when it has
    no snapshot."""
    table = operations.get_table(tid)
    snap = table.latest_snapshot()
    if snap is None:
        return None
    stats = operations.snapshot_stats(table, snap)
    plans = operations.plans_changed_since(tid, now - WINDOW_MS)
    return stats, activity(deltas.recent(table, now), plan_times(plans, operations.timeline.codec, now), now)


def _row(rank: int, h: TableHealth, figures: tuple[FileStats, Activity] | None | str, view: View) -> str:
    db, _, name = h.table.partition(".")
    link = f'<a href="{escape(view.url(f"/table/{db}/{name}", q=None, page=None))}">{escape(h.table)}</a>'
    head = f'<tr class="table-row"><td>{rank}</td><td class="l">{link}</td>'
    if h.error is not None:
        return (f'{head}<td>{score_html(0, "red")}</td><td class="l"><span class="stalled">UNREADABLE</span></td>'
                f'<td class="l" colspan="11">{escape(h.error)}</td></tr>')
    state = '<span class="stalled">STALLED</span>' if h.stalled else ""
    if isinstance(figures, str):  # could not read them: say so in their cells
        cells = f'<td class="l" colspan="6">{escape(figures)}</td>'
    elif figures is None:
        cells = '<td>0 B</td><td>0</td><td>0</td><td>–</td><td>–</td><td>–</td>'
    else:
        stats, act = figures
        cells = (f'<td class="size">{fmt.size(stats.file_size)}</td><td class="rows">{fmt.count(stats.record_count)}'
                 f'</td><td class="files">{fmt.count(stats.file_count)}</td>'
                 f'<td class="write-rate">{fmt.rate(act.rows_per_s, "rows")}<br>{fmt.rate(act.bytes_per_s)}</td>'
                 f'<td class="compaction">{fmt.rate(act.compacted_per_s)}</td>'
                 f'<td class="write-amp">{fmt.ratio(act.write_amplification)}</td>')
    band = band_of(h.score, h.severity)
    why = escape("; ".join(str(r) for r in h.reasons), quote=True)
    return (f'{head}<td class="score" title="{why}">{score_html(h.score, band)}</td><td class="l">{state}</td>{cells}'
            f"<td>{_lag(h.lag_ms)}</td><td>{h.max_sorted_runs} / {h.stop_trigger}</td><td>{h.level0_files}</td>"
            f"<td>{h.pending_plans} / {h.inflight_plans}</td><td>{_lag(h.oldest_plan_age_ms)}</td></tr>")


def tables_body(operations: CatalogOperations, deltas: SnapshotDeltas, healths: Sequence[TableHealth],
                view: View, now: int) -> str:
    q = text_param(view.query, "q")
    number = int_param(view.query, "page", 1, 1, 1_000_000)
    ranked = list(enumerate(healths, 1))
    matching = [(r, h) for r, h in ranked if q.lower() in h.table.lower()]
    start, end, paging = pager("page", len(matching), number, PAGE_SIZE, view, "tables")
    rows = []
    for rank, h in matching[start:end]:
        figures: tuple[FileStats, Activity] | None | str = None
        if h.error is None:
            try:
                figures = table_figures(operations, deltas, h.table, now)
            except Exception as e:  # noqa: BLE001 (dropped or broken meanwhile: the row says so)
                figures = f"{type(e).__name__}: {e}"[:200]
        rows.append(_row(rank, h, figures, view))
    head = ('<tr><th>#</th><th class="l">table</th><th>health</th><th class="l"></th><th>size</th><th>rows</th>'
            "<th>files</th><th>write rate</th><th>compaction</th><th>write amp.</th><th>lag</th><th>runs / stop</th>"
            "<th>level-0 files</th><th>plans requested / running</th><th>oldest plan</th></tr>")
    search = filter_form("q", q, view, "Table name contains", keep=lambda k: k == "refresh")
    shown = f"{len(matching):,} of {len(healths):,} tables match" if q else f"{len(healths):,} tables"
    return (f"<p>{search} {shown}, the least healthy first (docs/operating-tables.md). Health: "
            f'{score_html(80, "green")} from 80, {score_html(50, "amber")} from 50, {score_html(0, "red")} below or '
            "stalled (hover over a score for its reasons). "
            "Rates, compaction (bytes rewritten per second) and write amplification ((bytes written + bytes "
            "compaction wrote) / bytes written) are of the last hour.</p>"
            f'{paging}<table id="tables">{head}{"".join(rows)}</table>')
