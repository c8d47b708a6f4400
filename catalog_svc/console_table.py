"""The console's page of one table (`/table/{database}/{table}`): its health and figures, the admin's compaction
buttons, each bucket's LSM picture (paged, `?bp=`), its partitions (filtered by `?pq=`, paged by `?pp=`), the
compaction plans with their durations, the last hour's charts, its snapshots (newest first, paged by `?sp=`), schema
and options. Every figure of a page is read at one snapshot."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from html import escape

from catalog_svc import console_format as fmt
from catalog_svc.console_figures import Activity, PlanTimes
from catalog_svc.console_page import View, filter_form, int_param, pager, score_html, text_param
from catalog_svc.console_services import iso
from catalog_svc.console_svg import lsm_svg
from lsmlake.catalog.health import BucketHealth, TableHealth
from lsmlake.catalog.statistics import FileStats
from lsmlake.format.partition import partition_value_string
from lsmlake.format.snapshot import Snapshot
from lsmlake.table.compact import restore_levels
from lsmlake.table.file_store_table import FileStoreTable
from lsmlake.table.scan import Split

BUCKETS_PAGE = 32
PARTITIONS_PAGE = 50
SNAPSHOTS_PAGE = 20
PLANS_SHOWN = 20


def partition_text(table: FileStoreTable, values: Sequence[object]) -> str:
    """`k=v/k2=v2` of a partition (empty for an unpartitioned table)."""
    types = table.schema.types_of(table.schema.partition_keys)
    return "/".join(f"{k}={partition_value_string(v, t)}" for k, v, t in zip(
        table.schema.partition_keys, values, types, strict=True))


@dataclass(frozen=True)
class PartitionRow:
    """One partition's figures, summed over its buckets."""

    text: str
    buckets: int
    files: int
    rows: int
    size: int
    level0_files: int
    max_runs: int
    lag_ms: int


def partition_rows(table: FileStoreTable, health: TableHealth) -> list[PartitionRow]:
    by_part: dict[bytes, list[BucketHealth]] = {}
    for b in health.buckets:
        by_part.setdefault(b.partition, []).append(b)
    rows = []
    for buckets in by_part.values():
        rows.append(PartitionRow(partition_text(table, buckets[0].partition_values), len(buckets),
                                 sum(b.files for b in buckets), sum(b.rows for b in buckets),
                                 sum(b.size_bytes for b in buckets), sum(b.level0_files for b in buckets),
                                 max(b.sorted_runs for b in buckets), max(b.lag_ms(health.now_ms) for b in buckets)))
    return sorted(rows, key=lambda r: r.text)


def pictures(table: FileStoreTable, splits: Sequence[Split], view: View, wanted: str) -> str:
    """The LSM pictures of the buckets of the partitions matching `wanted`, a page of them."""
    chosen = [s for s in sorted(splits, key=lambda s: (s.partition, s.bucket))
              if wanted.lower() in partition_text(table, s.partition_values).lower()]
    start, end, paging = pager("bp", len(chosen), int_param(view.query, "bp", 1, 1, 1_000_000), BUCKETS_PAGE, view,
                               "buckets")
    out = []
    for split in chosen[start:end]:
        part = partition_text(table, split.partition_values)
        levels = restore_levels(table, split)
        shape: dict[int, list[tuple[int, int]]] = {}
        for run in levels.level_sorted_runs():
            shape.setdefault(run.level, []).append((run.total_size, len(run.run.files)))
        title = f"{part + ' ' if part else ''}bucket {split.bucket}: {levels.number_of_sorted_runs()} runs"
        out.append(lsm_svg(title, sorted(shape.items()), levels.num_levels - 1))
    return f'{paging}<div class="buckets">{"".join(out) or "<p>no data files</p>"}</div>'


def partitions_section(rows: Sequence[PartitionRow], view: View, wanted: str) -> str:
    matching = [r for r in rows if wanted.lower() in r.text.lower()]
    start, end, paging = pager("pp", len(matching), int_param(view.query, "pp", 1, 1, 1_000_000), PARTITIONS_PAGE,
                               view, "partitions")
    body = "".join(
        f'<tr class="partition-row"><td class="l">{escape(r.text) or "(unpartitioned)"}</td><td>{r.buckets}</td>'
        f"<td>{fmt.count(r.files)}</td><td>{fmt.count(r.rows)}</td><td>{fmt.size(r.size)}</td>"
        f"<td>{r.level0_files}</td><td>{r.max_runs}</td><td>{fmt.duration(r.lag_ms) if r.lag_ms else '0 s'}</td></tr>"
        for r in matching[start:end])
    head = ('<tr><th class="l">partition</th><th>buckets</th><th>files</th><th>rows</th><th>size</th>'
            "<th>level-0 files</th><th>most runs</th><th>lag</th></tr>")
    form = filter_form("pq", wanted, view, "Partition contains", keep=lambda k: k == "refresh")
    return f'<p>{form}</p>{paging}<table id="partitions">{head}{body}</table>'


def summary(h: TableHealth, stats: FileStats | None, act: Activity, band: str) -> str:
    """The figures of the table, one per row of a two-column table."""
    rows = [("health", score_html(h.score, band) + (' <span class="stalled">STALLED: writers wait</span>'
                                                     if h.stalled else "")),
            ("size", fmt.size(stats.file_size if stats else 0)),
            ("rows (in files, before merging)", fmt.count(stats.record_count if stats else 0)),
            ("files", fmt.count(stats.file_count if stats else 0)),
            ("write rate, last hour", f"{fmt.rate(act.rows_per_s, 'rows')}, {fmt.rate(act.bytes_per_s)} "
                                      f"({fmt.count(act.written_rows)} rows, {fmt.size(act.written_bytes)} in "
                                      f"{fmt.duration(act.window_ms)}, {act.snapshots} snapshots)"),
            ("compaction throughput, last hour",
             f"{fmt.rate(act.compacted_per_s)} ({fmt.size(act.compacted_bytes)} rewritten)"
             + (f"; {fmt.rate(act.plan_bytes_per_s)} while plans ran" if act.plan_bytes_per_s is not None else "")),
            ("write amplification, last hour", fmt.ratio(act.write_amplification))]
    keys = ["size", "rows", "files", "write-rate", "compaction", "write-amp"]
    cells = "".join(f'<tr data-figure="{k}"><th class="l">{escape(label)}</th><td class="l">{value}</td></tr>'
                    for k, (label, value) in zip(["health", *keys], rows, strict=True))
    return f'<table id="summary">{cells}</table>'


def plans_section(times: Sequence[PlanTimes]) -> str:
    newest = sorted(times, key=lambda t: t.plan.created_ms, reverse=True)
    rows = "".join(
        f'<tr class="plan-row" data-plan="{t.plan.plan_id}"><td>{t.plan.plan_id}</td><td class="l">{t.plan.state}</td>'
        f"<td>{t.buckets}</td><td>{len(t.plan.input_files)}</td><td>{fmt.size(t.input_bytes)}</td>"
        f"<td>{'–' if t.wait_ms is None else fmt.duration(t.wait_ms)}</td>"
        f"<td class=\"run\">{'–' if t.run_ms is None else fmt.duration(t.run_ms)}</td>"
        f"<td>{'–' if t.bytes_per_s is None else fmt.rate(t.bytes_per_s)}</td>"
        f'<td class="l">{escape(t.plan.owner or "")}</td><td class="l">{escape(t.plan.reason or "")}</td></tr>'
        for t in newest[:PLANS_SHOWN])
    head = ('<tr><th>plan</th><th class="l">state</th><th>buckets</th><th>files</th><th>input</th><th>waited</th>'
            '<th>ran</th><th>throughput</th><th class="l">run by</th><th class="l">reason</th></tr>')
    more = (f'<p class="muted">and {len(newest) - PLANS_SHOWN} older plans of the last hour</p>'
            if len(newest) > PLANS_SHOWN else "")
    return f'<table id="plans">{head}{rows}</table>{more}'


def snapshots_section(table: FileStoreTable, view: View) -> str:
    ids = table.snapshots.ids()[::-1]
    start, end, paging = pager("sp", len(ids), int_param(view.query, "sp", 1, 1, 1_000_000), SNAPSHOTS_PAGE, view,
                               "snapshots")
    rows = []
    for sid in ids[start:end]:
        try:
            s: Snapshot | None = table.snapshots.snapshot(sid)
        except Exception:  # noqa: BLE001 (expired while listed)
            s = None
        if s is None:
            continue
        rows.append(f'<tr class="snapshot-row" data-snapshot="{s.id}"><td>{s.id}</td><td class="l">{iso(s.time_millis)}'
                    f'</td><td class="l">{escape(s.commit_kind)}</td><td>{fmt.count(s.delta_record_count)}</td>'
                    f'<td>{fmt.count(s.total_record_count)}</td><td class="l">{escape(s.commit_user)}</td></tr>')
    head = ('<tr><th>snapshot</th><th class="l">committed</th><th class="l">kind</th><th>rows added</th>'
            '<th>rows in all</th><th class="l">commit user</th></tr>')
    return f'{paging}<table id="snapshots">{head}{"".join(rows)}</table>'


def schema_section(table: FileStoreTable) -> str:
    s = table.schema
    rows = []
    for f in s.fields:
        keys = ", ".join(k for k, on in (("primary key", f.name in s.primary_keys),
                                         ("partition key", f.name in s.partition_keys)) if on)
        rows.append(f'<tr class="column-row"><td class="l">{escape(f.name)}</td><td class="l">{escape(f.type.sql())}'
                    f'</td><td class="l">{keys}</td><td class="l">{escape(f.description or "")}</td></tr>')
    head = '<tr><th class="l">column</th><th class="l">type</th><th class="l">key</th><th class="l">comment</th></tr>'
    kind = "primary-key table" if s.is_primary_key_table else "append table"
    return (f"<p>Schema {s.id}, a {kind}{f': {escape(s.comment)}' if s.comment else ''}.</p>"
            f'<table id="schema">{head}{"".join(rows)}</table>')


def options_section(table: FileStoreTable) -> str:
    opts = sorted(table.schema.options.items())
    rows = "".join(f'<tr class="option-row"><td class="l">{escape(k)}</td><td class="l">{escape(v)}</td></tr>'
                   for k, v in opts)
    return f'<table id="options"><tr><th class="l">option</th><th class="l">value</th></tr>{rows}</table>' \
        if opts else "<p>no options set: every default applies</p>"


def partition_filter(view: View) -> str:
    return text_param(view.query, "pq")
