"""The console's pictures, as inline SVG drawn on the server: a bucket's LSM shape, the compaction timeline and
a line over the last hour. Every text is escaped; sizes are drawn on a linear scale and written as text."""

from __future__ import annotations

from collections.abc import Sequence
from html import escape

from catalog_svc import console_format as fmt
from lsmlake.metastore import CompactionPlan

STATE_COLOURS = {"REQUESTED": "#c9a227", "INFLIGHT": "#2f6fd0", "COMPLETED": "#3a9a4a", "ROLLED_BACK": "#c0392b",
                 "ABANDONED": "#888888"}


HOUR_MS = 3_600_000
_SPANS_MIN = (5, 10, 15, 30, 60)


def window_ms(earliest_ms: int | None, now_ms: int) -> int:
    """How far back the charts reach: from the earliest thing to draw within the last hour, rounded up to 5, 10,
    15, 30 or 60 minutes, so that a busy minute is not a sliver of an hour-wide chart."""
    if earliest_ms is None:
        return HOUR_MS
    need = now_ms - earliest_ms
    return next((m * 60_000 for m in _SPANS_MIN if need <= m * 60_000), HOUR_MS)


def _span_label(span_ms: int) -> str:
    return f"-{span_ms // 60_000} min"


MIN_BAR_PX = 1.5  # a run smaller than this is drawn this wide, so that it is seen at all


def lsm_svg(title: str, levels: Sequence[tuple[int, Sequence[tuple[int, int]]]], max_level: int) -> str:
    """A bucket's LSM tree: one row per level 0..max_level; level 0 shows each of its files (a sorted run each), the
    others their one sorted run, as bars on a linear scale: a bar's width is its bytes over those of the fullest
    level, so the fullest level fills its row and twice the bytes is twice the width (a run under `MIN_BAR_PX` is
    drawn that wide). Each level's bytes, files and runs are written beside it. `levels` is (level, runs as
    (bytes, files)) of the non-empty levels."""
    row_h, label_w, full, text_w = 18, 34, 300.0, 190
    by_level = dict(levels)
    fullest = max((sum(b for b, _ in runs) for runs in by_level.values()), default=0) or 1
    parts = [f'<svg class="lsm" width="{label_w + full + text_w:.0f}" height="{(max_level + 1) * row_h + 22}" '
             f'role="img" aria-label="{escape(title)}"><text x="0" y="12" font-size="11">{escape(title)}</text>']
    for level in range(max_level + 1):
        y = 18 + level * row_h
        runs = by_level.get(level, ())
        parts.append(f'<text x="0" y="{y + 12}" font-size="10">L{level}</text>')
        x = float(label_w)
        colour = "#d9822b" if level == 0 else "#4a7fb5"
        for size, files in runs:
            w = max(MIN_BAR_PX, full * size / fullest)
            parts.append(f'<rect class="run" data-level="{level}" data-bytes="{size}" data-files="{files}" '
                         f'x="{x:.2f}" y="{y}" width="{w:.2f}" height="{row_h - 4}" fill="{colour}">'
                         f"<title>L{level}: {size:,} bytes in {files} file(s)</title></rect>")
            x += w + (1 if level == 0 else 0)
        if runs:
            total, files = sum(b for b, _ in runs), sum(f for _, f in runs)
            label = f"{fmt.size(total)}, {files} file{'s' if files != 1 else ''}" + (
                f", {len(runs)} runs" if len(runs) > 1 else "")
            parts.append(f'<text class="level-size" data-level="{level}" x="{label_w + full + 6:.0f}" y="{y + 12}" '
                         f'font-size="10">{escape(label)}</text>')
    parts.append("</svg>")
    return "".join(parts)


def timeline_svg(plans: Sequence[CompactionPlan], now_ms: int, span_ms: int = HOUR_MS) -> str:
    """The table's compaction plans of the last `span_ms` as bars from request to their last change (or now),
    one row each (the latest 40), coloured by state."""
    width, row_h = 620.0, 10
    start = now_ms - span_ms
    shown = [p for p in plans if (p.updated_ms if not p.pending else now_ms) >= start][-40:]
    height = max(1, len(shown)) * row_h + 30
    parts = [f'<svg class="timeline" width="{width + 10:.0f}" height="{height}" role="img" '
             f'aria-label="compaction plans of the last {span_ms // 60_000} minutes">']
    for i, p in enumerate(shown):
        end = now_ms if p.pending else p.updated_ms
        x0 = max(0.0, (p.created_ms - start) / span_ms * width)
        x1 = max(x0 + 2, (end - start) / span_ms * width)
        parts.append(f'<rect class="plan" data-state="{p.state}" x="{x0:.1f}" y="{i * row_h}" width="{x1 - x0:.1f}" '
                     f'height="{row_h - 2}" fill="{STATE_COLOURS.get(p.state, "#000")}"><title>plan {p.plan_id}: '
                     f'{escape(p.state)}, bucket {p.bucket}, {len(p.input_files)} files</title></rect>')
    axis = len(shown) * row_h + 14
    parts.append(f'<text x="0" y="{axis + 10}" font-size="10">{_span_label(span_ms)}</text>'
                 f'<text x="{width - 20:.0f}" y="{axis + 10}" font-size="10">now</text>')
    legend = "".join(f'<tspan fill="{c}">■ {s.lower()} </tspan>' for s, c in STATE_COLOURS.items())
    parts.append(f'<text x="90" y="{axis + 10}" font-size="10">{legend}</text></svg>')
    return "".join(parts)


def line_svg(label: str, points: Sequence[tuple[int, float]], now_ms: int, span_ms: int = HOUR_MS,
             unit: str = "") -> str:
    """A value over the last `span_ms`: (time ms, value) points as a polyline, with its latest and largest value."""
    width, height = 300.0, 60.0
    start = now_ms - span_ms
    pts = [(t, v) for t, v in points if t >= start]
    most = max((v for _, v in pts), default=0.0)
    top = most or 1.0  # an all-zero line lies on the base
    coords = " ".join(f"{(t - start) / span_ms * width:.1f},{height - v / top * height:.1f}" for t, v in pts)
    last = f"{pts[-1][1]:.1f}{unit}" if pts else "no samples yet"
    return (f'<svg class="line" width="{width + 10:.0f}" height="{height + 18:.0f}" role="img" '
            f'aria-label="{escape(label)}"><rect x="0" y="0" width="{width:.0f}" height="{height:.0f}" fill="#f7f7f7" '
            f'stroke="#ddd"/><text x="0" y="{height + 15:.0f}" font-size="10">{escape(label)}: {last} '
            f'(max {most:.1f}{unit})</text><polyline fill="none" stroke="#2f6fd0" stroke-width="1.5" '
            f'points="{coords}"/></svg>')
