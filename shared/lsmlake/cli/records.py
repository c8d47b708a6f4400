"""Records as `lake`'s listing commands print them (`--format table|jsonl|csv|json`), and the words and numbers
of its messages. No Arrow here: `lake table list` starts without loading it."""

from __future__ import annotations

import csv
import datetime as dt
import io
import json
import sys
from collections.abc import Iterable, Sequence
from typing import IO, Any


def out(text: str = "") -> None:
    sys.stdout.write(text + "\n")


def plural(n: int, word: str) -> str:
    return f"{n:,} {word}{'' if n == 1 else 's'}"


def human_size(n: int) -> str:
    """Bytes for people: 845 B, 12.3 KB, 1.2 MB (units of 1024)."""
    if n < 1024:
        return f"{n} B"
    value = float(n)
    for unit in ("KB", "MB", "GB"):
        value /= 1024
        if value < 1024:
            return f"{value:.1f} {unit}"
    return f"{value / 1024:.1f} TB"


def cell(v: Any) -> str:
    """A JSON-form value as one cell of a text table (a null is empty)."""
    if v is None:
        return ""
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (dict, list)):
        return json.dumps(v, ensure_ascii=False)
    return str(v).replace("\r", "\\r").replace("\n", "\\n").replace("\t", "\\t")


def print_table(header: Sequence[str], rows: Sequence[Sequence[str]], right: Iterable[int] = (),
                stream: IO[str] | None = None) -> None:
    """An aligned text table: a header, a rule, then the rows."""
    stream = stream or sys.stdout
    right = set(right)
    widths = [len(h) for h in header]
    for r in rows:
        widths = [max(w, len(c)) for w, c in zip(widths, r, strict=True)]

    def line(cells: Sequence[str]) -> str:
        parts = [c.rjust(w) if i in right else c.ljust(w)
                 for i, (c, w) in enumerate(zip(cells, widths, strict=True))]
        return "  ".join(parts).rstrip()

    stream.write(line(header) + "\n")
    stream.write("  ".join("-" * w for w in widths) + "\n")
    for r in rows:
        stream.write(line(r) + "\n")


def iso_time(ms: int | float) -> str:
    """Epoch milliseconds as ISO 8601 in UTC: 2026-11-28T04:28:46.123Z."""
    moment = dt.datetime.fromtimestamp(ms / 1000, tz=dt.UTC)
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def table_cell(v: Any, time: bool = False) -> str:
    """A record's value in a table: whole numbers with thousands separators (in every table), times (epoch ms) as
    ISO 8601, a null empty."""
    if time and isinstance(v, int | float) and not isinstance(v, bool):
        return iso_time(v)
    if isinstance(v, int) and not isinstance(v, bool):
        return f"{v:,}"
    return cell(v)


def _csv_value(v: Any) -> Any:
    if v is None:
        return ""
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, dict | list):
        return json.dumps(v, ensure_ascii=False)
    return v


def print_records(records: Sequence[dict[str, Any]], keys: Sequence[str], fmt: str,
                  numeric: Iterable[str] = (), times: Iterable[str] = ()) -> None:
    """Records in one of `formats.RECORD_FORMATS`: JSON lines, one JSON array, CSV (a header, nulls empty), or an
    aligned table with the `numeric` keys to the right and the `times` keys (epoch ms) as ISO 8601. JSON and CSV
    keep the values as they are (times as epoch ms), for programs."""
    if fmt == "jsonl":
        for r in records:
            out(json.dumps({k: r[k] for k in keys}, ensure_ascii=False))
        return
    if fmt == "json":
        out(json.dumps([{k: r[k] for k in keys} for r in records], ensure_ascii=False))
        return
    if fmt == "csv":
        buf = io.StringIO()
        writer = csv.writer(buf, lineterminator="\n")
        writer.writerow(keys)
        for r in records:
            writer.writerow([_csv_value(r[k]) for k in keys])
        sys.stdout.write(buf.getvalue())
        return
    num, when = set(numeric), set(times)
    print_table(keys, [[table_cell(r[k], k in when) for k in keys] for r in records],
                right=[i for i, k in enumerate(keys) if k in num])
