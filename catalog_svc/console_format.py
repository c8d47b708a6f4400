"""How the console writes its figures: bytes, rows, rates, durations and ages, the same way on every page."""

from __future__ import annotations

_UNITS = ("B", "KB", "MB", "GB", "TB", "PB")


def size(n: float) -> str:
    """Bytes in powers of 1,024 with three significant digits: 812 B, 1.21 MB, 40.3 GB."""
    value, unit = float(n), 0
    while abs(value) >= 1024 and unit < len(_UNITS) - 1:
        value, unit = value / 1024, unit + 1
    if unit == 0:
        return f"{int(value):,} B"
    return f"{value:.3g} {_UNITS[unit]}" if value < 100 else f"{value:.0f} {_UNITS[unit]}"


def count(n: int) -> str:
    return f"{n:,}"


def rate(per_s: float, unit: str = "") -> str:
    """A rate per second: bytes (unit "") as sizes, anything else as a number with `unit`."""
    if not unit:
        return f"{size(per_s)}/s"
    return f"{per_s:,.1f} {unit}/s" if per_s < 100 else f"{per_s:,.0f} {unit}/s"


def duration(ms: float) -> str:
    """Milliseconds as ms, s, min or h."""
    if ms < 1000:
        return f"{ms:.0f} ms"
    s = ms / 1000
    if s < 120:
        return f"{s:.1f} s" if s < 10 else f"{s:.0f} s"
    return f"{s / 60:.0f} min" if s < 7200 else f"{s / 3600:.1f} h"


def ratio(value: float | None) -> str:
    return "–" if value is None else f"{value:.2f}x"
