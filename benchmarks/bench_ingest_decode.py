"""Decoding 200,000 plain JSON Kafka messages (one row each) into an Arrow batch for a 5-column
primary-key table (the benchmark schema of common.py).

Anchor: `json.loads` of each message alone, with nothing done to the result. It is the floor of
any decoder that parses message by message in Python, so beating it is what vectorising the hot
path must buy; it is honest because the anchor does strictly less work than the decoder (no
typing, validation, row kinds or Arrow building). Also printed, for context: a raw
`pyarrow.json.read_json` of the same bytes (the decoder's own floor), the decoder on a batch with
1% garbage, and Debezium events (decoded message by message). Target: at least 3x the anchor.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.json as pjson

from lsmlake.format.schema import new_table_schema
from lsmlake.format.types import parse_schema_fields
from lsmlake.ingest import decode_messages

sys.path.insert(0, str(Path(__file__).parent))
import common  # noqa: E402

MESSAGES = 200_000


def messages() -> list[bytes]:
    rows = common.batches()[0].slice(0, MESSAGES).to_pylist()
    return [json.dumps(r).encode() for r in rows]


def debezium(values: list[bytes]) -> list[bytes]:
    return [b'{"before":null,"after":' + v + b',"op":"c","ts_ms":1700000000000}' for v in values]


def best_of(n: int, fn: Callable[[], Any]) -> float:
    return min(common.timed(fn)[0] for _ in range(n))


def main() -> None:
    schema = new_table_schema(parse_schema_fields(common.LAKE_SCHEMA), partition_keys=["dt"],
                              primary_keys=["id", "dt"], options={"bucket": "1"})
    values = messages()
    n = len(values)
    result = decode_messages(schema, values, "json", False)
    assert result.batch.num_rows == n and not result.rejected, result.rejected[:3]

    secs = best_of(3, lambda: decode_messages(schema, values, "json", False))
    ours = common.report("decode_messages: plain JSON", secs, n)
    secs = best_of(3, lambda: [json.loads(v) for v in values])
    anchor = common.report("anchor: json.loads of each message", secs, n)
    explicit = pjson.ParseOptions(explicit_schema=common.SCHEMA, unexpected_field_behavior="ignore")
    secs = best_of(3, lambda: pjson.read_json(pa.BufferReader(b"\n".join(values)), parse_options=explicit))
    common.report("context: pyarrow read_json of the joined bytes", secs, n)

    dirty = list(values)
    for i in range(0, n, 100):
        dirty[i] = b"not json" if i % 200 else b'{"id": "x"}'
    secs = best_of(3, lambda: decode_messages(schema, dirty, "json", False))
    common.report("context: decode_messages, 1% garbage", secs, n)
    events = debezium(values)
    secs = best_of(1, lambda: decode_messages(schema, events, "debezium", False))
    common.report("context: decode_messages, Debezium (per message)", secs, n)

    common.result("ingest_decode_200k_json_messages", ours, "json.loads of each message", anchor, ">= 3x")


if __name__ == "__main__":
    main()
