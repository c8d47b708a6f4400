"""The one output vocabulary of `lake`'s listing commands (`--format`), named where the parser can take it without
loading what prints the records (`output`)."""

from __future__ import annotations

#: an aligned table for people, JSON lines, CSV, one JSON array
RECORD_FORMATS = ("table", "jsonl", "csv", "json")
FORMAT_HELP = ("table: aligned for people (times in ISO 8601, nulls empty, numbers with thousands separators; "
               "default); jsonl: one object per line; csv: a header, then one line per record; json: one array")
