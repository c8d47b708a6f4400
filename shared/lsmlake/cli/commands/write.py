"""Commands that change a table's rows: `lake write` (files, one commit), `lake delete` (deletion vectors)
and `lake produce` (rows or change events to the table's Kafka ingest topic)."""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa

from lsmlake.cli.errors import CliError, UsageError
from lsmlake.cli.filters import where_predicate
from lsmlake.cli.inputs import Source, input_format, read_rows, read_stdin
from lsmlake.cli.placement import waiting_rows, waiting_text
from lsmlake.cli.progress import Progress, Waiting
from lsmlake.cli.records import out, plural
from lsmlake.cli.warehouse import find_services, open_backend, open_catalog
from lsmlake.ingest.kafka_offsets import TOPIC_PREFIX


def cmd_write(args: argparse.Namespace) -> int:
    catalog = open_catalog(args)
    if args.files.count("-") > 1:
        raise UsageError("stdin ('-') can be read only once")
    formats = [input_format(f, args.input_format) for f in args.files]
    for f in args.files:
        if f != "-" and not os.path.isfile(f):
            raise CliError(f"{f}: no such file" if not os.path.exists(f) else f"{f}: not a file")
    table = catalog.get_table(args.table)
    # Read and check every input before writing anything.
    batches: list[pa.Table] = []
    total = 0
    for name, fmt in zip(args.files, formats, strict=True):
        with Waiting(f"reading {'<stdin>' if name == '-' else name}"):
            src: Source = read_stdin() if name == "-" else name
            rows = read_rows(src, "<stdin>" if name == "-" else name, fmt, table.schema, args.table)
        if rows.num_rows:
            batches.append(rows)
            total += rows.num_rows
    files_text = plural(len(args.files), "file")
    if not batches:
        out(f"wrote 0 rows from {files_text} to {args.table}: nothing to commit")
        return 0
    backend = open_backend(args)
    outcome = backend.write(table, batches, args.request_id, Progress(f"writing {args.table}", total))
    out(outcome.report(args.table, total, files_text))
    waiting = waiting_rows(table)
    if waiting:
        services = find_services(args)
        out(waiting_text(args.table, waiting, compactor=services is not None and services.compactor is not None))
    return 0


def cmd_delete(args: argparse.Namespace) -> int:
    services = find_services(args)
    if services is not None:
        # Not through the catalog: the library's delete checks at commit that no matching row was appended since
        # it read the table, a check a commit through the catalog cannot carry. Its own commit is safe beside the
        # services' (a conditional publication, redone on conflict), so it runs here, and says so.
        sys.stderr.write(f"lake delete commits to the warehouse itself, not through the catalog service "
                         f"{services.catalog}: the catalog's commit cannot check that no matching row was appended "
                         "while the delete ran\n")
    table = open_catalog(args).get_table(args.table)
    predicate = where_predicate(table, args.where)
    assert predicate is not None  # --where is required
    result = table.delete_where(predicate)
    if result is None:
        out(f"no row of {args.table} matched: nothing deleted")
    else:
        out(f"deleted the matching rows of {args.table} in snapshot {result.snapshot_id}")
    return 0


def _message_key(doc: Any, keys: Sequence[str], debezium: bool) -> bytes | None:
    """The primary key of the row a message changes, so that the changes of a key share a partition."""
    if not isinstance(doc, dict):
        return None
    if debezium:
        doc = doc.get("payload", doc) if isinstance(doc.get("payload"), dict) else doc
        doc = doc.get("after") or doc.get("before") or {}
        if not isinstance(doc, dict):
            return None
    values = [doc.get(k) for k in keys]
    return None if any(v is None for v in values) else json.dumps(values).encode()


def cmd_produce(args: argparse.Namespace) -> int:
    # kafka-python loads for this command only, not for every `lake` invocation
    from lsmlake.kafka.client import configure_security, producer
    from lsmlake.kafka.security import KafkaSecurity

    services = find_services(args)
    bootstrap = getattr(args, "kafka_target", None) or (services.kafka if services else None)
    if not bootstrap:
        raise UsageError("no Kafka: start a cluster with `lake up` or pass --kafka-bootstrap HOST:PORT")
    keys = list(open_catalog(args).get_table(args.table).schema.primary_keys)
    if args.files.count("-") > 1:
        raise UsageError("stdin ('-') can be read only once")
    lines: list[bytes] = []
    for f in args.files:
        data = sys.stdin.buffer.read() if f == "-" else Path(f).read_bytes()
        lines += [ln for ln in data.splitlines() if ln.strip()]
    topic = TOPIC_PREFIX + args.table
    configure_security(KafkaSecurity.from_env(os.environ))
    p = producer(bootstrap, linger_ms=20)
    try:
        futures = []
        for ln in lines:
            try:
                doc = json.loads(ln)
            except ValueError:
                doc = None  # sent as it is: the writer dead-letters it with the reason
            futures.append(p.send(topic, key=_message_key(doc, keys, args.format == "debezium"), value=ln))
        p.flush(timeout=120)
        for fut in futures:
            fut.get(timeout=60)
    finally:
        p.close(timeout=10)
    out(f"sent {len(lines):,} message(s) to {topic}")
    return 0
