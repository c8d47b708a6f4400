"""`lake`: the command line of lsmlake.

    lake --warehouse DIR table create|list|describe|alter|drop ...
    lake --warehouse DIR write DB.TABLE FILE...
    lake --warehouse DIR scan DB.TABLE [--snapshot N] [--format jsonl|csv|parquet|table] ...
    lake --warehouse DIR snapshots DB.TABLE
    lake --warehouse DIR files DB.TABLE
    lake --warehouse DIR compact DB.TABLE [--full] [--partition KEY=VALUE ...]
    lake --warehouse DIR levels DB.TABLE [--snapshot N] [--format table|jsonl]

Errors go to stderr as `lake: error: <message>`; the exit code is 2 for bad usage and 1 for any
other error. Values travel through Arrow column by column: CSV and JSON input are parsed with the
table's own column types, and JSON output is built by casting whole columns to their JSON form.
"""

from __future__ import annotations

import argparse
import base64
import binascii
import contextlib
import dataclasses
import io
import json
import math
import os
import sys
import tempfile
import time
import traceback
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import IO, Any, NoReturn

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pcsv
import pyarrow.json as pjson
import pyarrow.parquet as pq

from lsmlake.catalog.filesystem import FileSystemCatalog, split_identifier
from lsmlake.errors import LakeError, NotFoundError
from lsmlake.format import options as opts
from lsmlake.format.partition import partition_path
from lsmlake.format.row_kind import ROW_KIND_COLUMN
from lsmlake.format.schema import TableSchema, new_table_schema
from lsmlake.format.types import AnyType, parse_schema_fields, to_arrow_type
from lsmlake.mergetree.levels import Levels
from lsmlake.metastore.request_ids import part_request_id
from lsmlake.table.compact import compact_table, restore_levels
from lsmlake.table.file_store_table import FileStoreTable
from lsmlake.table.input_rows import conform
from lsmlake.table.schema_change import AddColumn, RemoveOption, RenameColumn, SetOption

PROG = "lake"
ENV_WAREHOUSE = "LAKE_WAREHOUSE"
ENV_DEBUG = "LAKE_DEBUG"  # set to 1 to see the traceback of an unexpected error

SNAPSHOT_KEYS = ("id", "schema_id", "commit_kind", "time_millis", "total_record_count",
                 "delta_record_count", "commit_user", "commit_identifier")
FILE_KEYS = ("partition", "bucket", "file", "level", "rows", "min_seq", "max_seq", "size", "schema_id",
             "delete_rows", "dv_deleted")
LEVEL_KEYS = ("partition", "bucket", "level", "run", "file", "size", "rows", "min_key", "max_key", "min_seq",
              "max_seq")

CSV_NULL_VALUES = ["", "NULL", "null"]
_COMPRESSION_SUFFIXES = (".gz", ".bz2", ".zst", ".lz4")
_FORMAT_BY_EXTENSION = {".parquet": "parquet", ".parq": "parquet", ".csv": "csv", ".jsonl": "jsonl",
                        ".ndjson": "jsonl", ".json": "json"}
_ARROW_ERRORS = (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError)


class CliError(Exception):
    """An error the CLI reports as `lake: error: <message>` with exit code 1."""


class UsageError(CliError):
    """Bad usage: exit code 2."""


# ---------------------------------------------------------------------------------------------
# Help texts
# ---------------------------------------------------------------------------------------------

_MAIN_EPILOG = """\
examples:
  export LAKE_WAREHOUSE=/data/lake
  lake table create shop.orders --schema "id BIGINT NOT NULL, dt STRING, amount DECIMAL(10,2)" \\
      --primary-key id,dt --partition-key dt --option bucket=4
  lake write shop.orders day1.parquet day2.csv
  lake scan shop.orders --format table --limit 20
  lake scan shop.orders --snapshot 3 --format parquet --output orders-v3.parquet
  lake snapshots shop.orders --format table
  lake files shop.orders --format table
  lake levels shop.orders                                 # the LSM levels of every bucket
  lake compact shop.orders --partition dt=2024-01-31
  lake compact shop.orders --full

The warehouse is a local folder (or an object-store URI) given by --warehouse or $LAKE_WAREHOUSE.
Exit status: 0 on success, 1 on an error (message on stderr), 2 on bad usage.
Run `lake COMMAND --help` for the options of a command.
"""

_TABLE_EPILOG = """\
examples:
  lake table create shop.orders --schema "id BIGINT NOT NULL, dt STRING, amount DECIMAL(10,2)" \\
      --primary-key id,dt --partition-key dt --option bucket=4
  lake table list shop
  lake table describe shop.orders --format json
  lake table alter shop.orders --add-column "coupon STRING" --rename-column note=remark
  lake table drop shop.orders

Run `lake table ACTION --help` for the options of an action.
"""

_CREATE_EPILOG = """\
examples:
  lake table create shop.orders \\
      --schema "id BIGINT NOT NULL, dt STRING, amount DECIMAL(10,2), ts TIMESTAMP(3)" \\
      --primary-key id,dt --partition-key dt --option bucket=4
  lake table create logs.events --schema "ts TIMESTAMP(6), host STRING, msg STRING, tags ARRAY<STRING>"

Types are Paimon's SQL type names: BOOLEAN, TINYINT, SMALLINT, INT, BIGINT, FLOAT, DOUBLE,
DECIMAL(p,s), CHAR(n), VARCHAR(n), STRING, BINARY(n), VARBINARY(n), BYTES, DATE, TIME(p),
TIMESTAMP(p), TIMESTAMP(p) WITH LOCAL TIME ZONE, ARRAY<t>, MAP<k,v>, ROW<name t, ...>; add NOT NULL
to forbid nulls. Primary-key tables need --option bucket=N (N > 0) and their primary key must
include the partition keys. The database is created when it does not exist.
"""

_LIST_EPILOG = """\
examples:
  lake table list shop
  lake table list shop --format jsonl
"""

_DESCRIBE_EPILOG = """\
examples:
  lake table describe shop.orders
  lake table describe shop.orders --format json | jq .columns

json/jsonl print one object: table, schema_id, columns (id, name, type, nullable),
partition_keys, primary_keys, options, comment.
"""

_ALTER_EPILOG = """\
examples:
  lake table alter shop.orders --add-column "coupon STRING"
  lake table alter shop.orders --rename-column note=remark --set snapshot.num-retained.min=20
  lake table alter shop.orders --remove snapshot.num-retained.min

The changes are applied in the order given and published as ONE new schema version, or not at
all. Data files are not rewritten: rows written before read an added column as null and a renamed
column under its new name. Added columns must be nullable and go at the end; key columns and
columns named by options cannot be renamed; options that fix the table's layout (bucket,
merge-engine, deletion-vectors.enabled, ...) cannot change once the table has data.
"""

_DROP_EPILOG = """\
examples:
  lake table drop shop.orders
  lake table drop shop.orders --if-exists

This deletes the table folder with all its data and snapshots.
"""

_WRITE_EPILOG = """\
examples:
  lake write shop.orders orders.parquet
  lake write shop.orders day1.csv day2.jsonl         # both files in one commit
  cat rows.jsonl | lake write shop.orders - --input-format jsonl
  printf '_row_kind,id,dt\\n-D,42,2024-01-31\\n' | lake write shop.orders - --input-format csv
  lake write shop.orders big.parquet --request-id load-2024-01-31  # safe to run again after a failure

input files:
  The format comes from the extension: .parquet, .csv, .jsonl/.ndjson, or .json (JSON lines, or
  one JSON array of objects); .gz/.bz2/.zst/.lz4 compressed CSV and JSON files are read too.
  Use '-' for stdin together with --input-format. Columns are matched by name: missing nullable
  columns are null, a column the table does not have is an error.
  CSV and JSON values are parsed with the table's column types: DECIMAL as 12.34 (number or
  string), DATE as 2024-01-31, TIME as 12:30:00.5, TIMESTAMP as 2024-01-31T12:30:00.123
  (TIMESTAMP WITH LOCAL TIME ZONE takes an offset such as Z or +02:00; none means UTC),
  BINARY/BYTES as base64, ARRAY/ROW as JSON arrays/objects and MAP as a JSON object or a list of
  [key, value] pairs (in CSV a cell holds the JSON text). CSV needs a header row; an empty
  unquoted cell, NULL or null is a null, a quoted "" is the empty string.

row kinds:
  An optional _row_kind column holds +I (insert, also when empty), -U (update before),
  +U (update after) or -D (delete) for each row. Primary-key tables keep the newest row of each
  key; -U and -D remove the key. Append tables accept only +I.

commit:
  All files of one invocation are written as ONE commit (one snapshot). Every file is read and
  checked before anything is written; if anything fails, nothing is committed and the data files
  already written are deleted. Prints: wrote R rows from F files to DB.TABLE in snapshot S.
  Through the writer service (a cluster from `lake up`, or --catalog and --writer) the rows go in
  parts of 100,000, each committed before the next; with --request-id ID a run that failed midway
  can be repeated as is: parts already committed are not written again.
"""

_SCAN_EPILOG = """\
examples:
  lake scan shop.orders                                   # JSON lines on stdout
  lake scan shop.orders --format table --limit 10
  lake scan shop.orders --columns id,amount --format csv --output orders.csv
  lake scan shop.orders --snapshot 2 --format parquet --output orders-v2.parquet

output formats:
  jsonl    one JSON object per row with the table's column names. DECIMAL, DATE, TIME and
           TIMESTAMP values are strings (ISO 8601, e.g. 2024-01-31T12:30:00.000, with a Z for
           TIMESTAMP WITH LOCAL TIME ZONE), BINARY/BYTES are base64 strings, ARRAY and ROW are
           JSON arrays and objects, MAP is an object when its keys are strings and a list of
           [key, value] pairs otherwise; non-finite floats are the strings NaN, Infinity, -Infinity.
  csv      a header row, then one line per row; strings are quoted, nulls are empty, BINARY is
           base64 and nested values are JSON texts (readable again by `lake write`).
  parquet  the table's Arrow schema (needs --output).
  table    an aligned text table for people.
The rows are those of the latest snapshot, or of --snapshot N (time travel).
"""

_DELETE_EPILOG = """\
Append tables with deletion-vectors.enabled = true delete rows without rewriting files: the
positions of the matching rows go into the bucket's deletion vectors, committed as one OVERWRITE
snapshot. (Primary-key tables delete by writing -D rows: `lake write` with a _row_kind column.)

examples:
  lake --warehouse wh delete db.events --where dt=2026-11-21 --where user_id=42
"""

_CHANGELOG_EPILOG = """\
Tables with a changelog producer (option changelog-producer = input, full-compaction or lookup)
record what changed with each snapshot; streaming readers consume it. Each row carries the
snapshot that committed it and its row kind (+I, -U, +U, -D), then the table's columns.

examples:
  lake --warehouse wh changelog db.t
  lake --warehouse wh changelog db.t --from-snapshot 5 --format table
"""

_SNAPSHOTS_EPILOG = """\
examples:
  lake snapshots shop.orders
  lake snapshots shop.orders --format table

Each snapshot is one object: id, schema_id, commit_kind, time_millis, total_record_count,
delta_record_count, commit_user, commit_identifier.
"""

_TIMELINE_EPILOG = """\
examples:
  lake timeline shop.orders
  lake timeline shop.orders --state INFLIGHT --state REQUESTED --format jsonl
  lake timeline shop.orders --metastore postgresql://lake@db:5432/lake

Each compaction plan of the catalog service: plan_id, state (REQUESTED, INFLIGHT, COMPLETED,
ROLLED_BACK, ABANDONED), buckets, files, output_level, owner, attempts, age (since it was
requested), running (since its current run started, INFLIGHT only), snapshot (of its COMPACT
commit) and reason. The metadata store defaults to the catalog service's SQLite file in a local
warehouse ($LSMLAKE_METASTORE overrides).
"""

_PRODUCE_EPILOG = """\
examples:
  lake produce shop.orders rows.jsonl                      # {"id": 1, "v": "a"} per line, optional _row_kind
  lake produce shop.orders changes.jsonl --format debezium # Debezium envelopes, with or without schema

Sends each line as one message to lake.ingest.DB.TABLE, keyed by the row's primary key so that the
changes of a key stay in order; the writer service ingests the topic exactly once when it was started
with --ingest DB.TABLE[:FORMAT]. Needs a cluster (`lake up`) or --kafka-bootstrap HOST:PORT.
"""

_UP_EPILOG = """\
examples:
  lake up --warehouse wh                       # Kafka (embedded), catalog, writer, compactor; Ctrl-C stops
  lake up --warehouse wh --kafka kafka:9092    # an existing Kafka instead of the embedded broker
  lake up --warehouse wh --ingest shop.orders:debezium --no-compactor

The endpoints are printed and recorded in WAREHOUSE/.lake/cluster.json; `lake status` and
`lake down` find them there. Logs go to WAREHOUSE/.lake/logs/.
"""

_FILES_EPILOG = """\
examples:
  lake files shop.orders
  lake files shop.orders --snapshot 3 --format table

Each live data file of the snapshot (default: the latest) is one object with:
  partition  the partition directory as stored on disk: `key=value/...` with Hive-style escaping
             and Paimon's value strings (e.g. dt=2024-01-31/h=3; a DATE value is its day number,
             as Paimon names the folder); "" for an unpartitioned table
  bucket, file (the data file name), level, rows, min_seq, max_seq (sequence number range),
  size (bytes), schema_id, delete_rows (retract rows in the file, when recorded).
"""

_COMPACT_EPILOG = """\
examples:
  lake compact shop.orders                                # what the compaction strategy says is due
  lake compact shop.orders --full                         # every bucket into one sorted run
  lake compact shop.orders --partition dt=2024-01-31
  lake compact shop.orders --partition dt=2024-01-31 --partition h=3 --full

Each bucket (of the matching partitions) is compacted once, and all changes are committed as ONE
COMPACT snapshot; the rows a scan returns do not change. Primary-key tables merge sorted runs as the
universal strategy picks them (options num-sorted-run.compaction-trigger, compaction.size-ratio,
compaction.max-size-amplification-percent); --full merges everything onto the highest level and
drops deleted rows. Append tables concatenate small files (compaction.min.file-num, --full: all).
--partition KEY=VALUE (repeatable, for different partition columns) restricts the compaction to the
partitions whose columns equal the values; a value is parsed with the column's type (a DATE as
2024-01-31), and the table's partition.default-name (__DEFAULT_PARTITION__) means null.
Prints: compacted DB.TABLE in snapshot S: F files -> G files (files rewritten or moved, and their
replacements), or: nothing to compact in DB.TABLE.
Through a cluster (`lake up`, or --compactor-service), the compactor service compacts and the command
waits for it (within the client's 60 s deadline): it prints how many of the named buckets were compacted
and the COMPACT snapshots, then each bucket that was not (owned by another compactor replica, its plan
failed, or timed out) with the reason.
"""

_LEVELS_EPILOG = """\
examples:
  lake levels shop.orders
  lake levels shop.orders --snapshot 3
  lake levels shop.orders --format jsonl | jq 'select(.level == 0)'

For every (partition, bucket) a header, then the files of each non-empty level, e.g.
  dt=2024-01-31 bucket 0: 3 sorted runs, highest level 5 (max 5), 12.5 MB
    L0  run 1: data-1f0c...-0.parquet   1.2 MB  10,000 rows  keys [1 .. 9999]       seq 201-300
        run 2: data-77ab...-0.parquet   1.1 MB   9,000 rows  keys [5 .. 20000]      seq 101-200
    L5  run 3: data-0d3e...-0.parquet   8.0 MB  72,000 rows  keys [1 .. 72000]      seq 0-100
               data-5a91...-0.parquet   2.2 MB  18,000 rows  keys [72001 .. 90000]  seq 0-100
Level 0 holds one sorted run per file, newest first; every higher level holds one sorted run whose
files are listed in key order. Runs are numbered newest first, as compaction sees them. Keys are
the primary key without the partition keys, a tuple when there are several. A bucket with more
sorted runs than num-sorted-run.stop-trigger is marked STALL: writers would wait for compaction
there (run `lake compact`). Append tables have no keys; their files all stay on level 0.
The partition is key=value/... with values as `lake scan` prints them (the form --partition of
`lake compact` takes), not the escaped folder name `lake files` shows.
jsonl prints one object per file: partition, bucket, level, run, file, size (bytes), rows, min_key,
max_key (lists; empty for append tables), min_seq, max_seq.
"""


# ---------------------------------------------------------------------------------------------
# Argument parsing
# ---------------------------------------------------------------------------------------------

class _Parser(argparse.ArgumentParser):
    """Reports usage errors as `lake: error: <message>` (exit code 2)."""

    def error(self, message: str) -> NoReturn:
        self.print_usage(sys.stderr)
        self.exit(2, f"{PROG}: error: {message}\n")


def _version() -> str:
    try:
        from importlib.metadata import version
        return version("lsmlake")
    except Exception:
        return "unknown"


def _key_value(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    return key.strip(), value.strip()


def _non_negative(text: str) -> int:
    try:
        n = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if n < 0:
        raise argparse.ArgumentTypeError(f"expected a number >= 0, got {n}")
    return n


class _ChangeAction(argparse.Action):
    """Collects schema changes of all alter flags into one list, in command-line order."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any,
                 option_string: str | None = None) -> None:
        changes = list(getattr(namespace, self.dest, None) or [])
        changes.append(values)
        setattr(namespace, self.dest, changes)


def _add_column(text: str) -> AddColumn:
    parts = text.strip().split(None, 1)
    if len(parts) != 2:
        raise argparse.ArgumentTypeError(f"expected 'NAME TYPE', got {text!r}")
    return AddColumn(parts[0].strip("`"), parts[1])


def _rename_column(text: str) -> RenameColumn:
    old, new = _key_value(text)
    if not new:
        raise argparse.ArgumentTypeError(f"expected OLD=NEW, got {text!r}")
    return RenameColumn(old, new)


def _set_option(text: str) -> SetOption:
    return SetOption(*_key_value(text))


def _remove_option(text: str) -> RemoveOption:
    if not text.strip():
        raise argparse.ArgumentTypeError("expected an option key")
    return RemoveOption(text.strip())


def _names(values: Sequence[str] | None) -> list[str]:
    """`--x a,b --x c` -> [a, b, c]."""
    out: list[str] = []
    for v in values or ():
        out.extend(p.strip() for p in v.split(",") if p.strip())
    return out


def build_parser() -> argparse.ArgumentParser:
    fmt = argparse.RawDescriptionHelpFormatter
    parser = _Parser(prog=PROG, description="Create, write and read tables in the Apache Paimon format.",
                     epilog=_MAIN_EPILOG, formatter_class=fmt, allow_abbrev=False)
    parser.add_argument("--version", action="version", version=f"{PROG} (lsmlake) {_version()}")
    parser.add_argument("--warehouse", metavar="DIR", default=None,
                        help=f"the warehouse folder or URI (default: ${ENV_WAREHOUSE})")
    for name, env in (("catalog", "LAKE_CATALOG"), ("writer", "LAKE_WRITER"), ("compactor", "LAKE_COMPACTOR"),
                      ("kafka", "LAKE_KAFKA")):
        parser.add_argument(f"--{name}-service" if name != "kafka" else "--kafka-bootstrap", dest=f"{name}_target",
                            metavar="HOST:PORT", default=os.environ.get(env),
                            help=f"the {name} {'service' if name != 'kafka' else 'bootstrap'} (default: ${env}, "
                                 "else the cluster `lake up` runs on the warehouse)")
    from lsmlake.rpc.security import ChannelSecurity

    ChannelSecurity.add_arguments(parser, os.environ, "", "LAKE_", "the services")
    # Every command also accepts --warehouse after its name.
    common = _Parser(add_help=False, allow_abbrev=False)
    common.add_argument("--warehouse", metavar="DIR", default=argparse.SUPPRESS,
                        help=f"the warehouse folder or URI (default: ${ENV_WAREHOUSE})")

    def sub(group: Any, name: str, help_: str, epilog: str) -> argparse.ArgumentParser:
        p: argparse.ArgumentParser = group.add_parser(name, help=help_, description=help_, epilog=epilog,
                                                      parents=[common], formatter_class=fmt,
                                                      allow_abbrev=False)
        return p

    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    table = commands.add_parser("table", help="create, list, describe, alter or drop tables",
                                description="Create, list, describe, alter or drop tables.",
                                epilog=_TABLE_EPILOG, formatter_class=fmt,
                                allow_abbrev=False)
    actions = table.add_subparsers(dest="action", metavar="ACTION", required=True)

    p = sub(actions, "create", "create a table (and its database if needed)", _CREATE_EPILOG)
    p.add_argument("table", metavar="DB.TABLE")
    p.add_argument("--schema", required=True, metavar="COLUMNS",
                   help='column definitions, e.g. "id BIGINT NOT NULL, dt STRING, v DECIMAL(10,2)"')
    p.add_argument("--primary-key", action="append", metavar="COLS",
                   help="comma-separated primary key columns")
    p.add_argument("--partition-key", action="append", metavar="COLS",
                   help="comma-separated partition columns")
    p.add_argument("--option", action="append", type=_key_value, default=[], metavar="KEY=VALUE",
                   help="a table option such as bucket=4 (repeatable)")
    p.add_argument("--comment", help="a table comment")
    p.add_argument("--if-not-exists", action="store_true", help="do nothing if the table exists")
    p.set_defaults(func=cmd_table_create)

    p = sub(actions, "list", "list the tables of a database", _LIST_EPILOG)
    p.add_argument("database", metavar="DB")
    p.add_argument("--format", choices=("text", "jsonl", "json"), default="text",
                   help="text: one name per line (default); jsonl: {\"table\": ...} per line; json: a list")
    p.set_defaults(func=cmd_table_list)

    p = sub(actions, "describe", "show the columns, keys and options of a table", _DESCRIBE_EPILOG)
    p.add_argument("table", metavar="DB.TABLE")
    p.add_argument("--format", choices=("table", "jsonl", "json"), default="table", help="default: table")
    p.set_defaults(func=cmd_table_describe)

    p = sub(actions, "alter", "add or rename columns, set or remove options", _ALTER_EPILOG)
    p.add_argument("table", metavar="DB.TABLE")
    p.add_argument("--add-column", action=_ChangeAction, type=_add_column, dest="changes", metavar="'NAME TYPE'",
                   help='append a nullable column, e.g. "coupon STRING" (repeatable)')
    p.add_argument("--rename-column", action=_ChangeAction, type=_rename_column, dest="changes", metavar="OLD=NEW",
                   help="rename a column (repeatable)")
    p.add_argument("--set", action=_ChangeAction, type=_set_option, dest="changes", metavar="KEY=VALUE",
                   help="set a table option (repeatable)")
    p.add_argument("--remove", action=_ChangeAction, type=_remove_option, dest="changes", metavar="KEY",
                   help="remove a table option (repeatable)")
    p.set_defaults(func=cmd_table_alter, changes=None)

    p = sub(actions, "drop", "delete a table and all its data", _DROP_EPILOG)
    p.add_argument("table", metavar="DB.TABLE")
    p.add_argument("--if-exists", action="store_true", help="do nothing if the table does not exist")
    p.set_defaults(func=cmd_table_drop)

    p = sub(commands, "write", "write rows from files as one commit", _WRITE_EPILOG)
    p.add_argument("table", metavar="DB.TABLE")
    p.add_argument("files", nargs="+", metavar="FILE", help="input files; '-' reads stdin")
    p.add_argument("--input-format", choices=("parquet", "csv", "jsonl", "json"),
                   help="the format of every input (required for '-'; default: from the extension)")
    p.add_argument("--request-id", metavar="ID",
                   help="name this write (through the writer service): the same command run again after a "
                        "failure writes each part once (parts are ID/0, ID/1, ...)")
    p.set_defaults(func=cmd_write)

    p = sub(commands, "scan", "read the rows of a table", _SCAN_EPILOG)
    p.add_argument("table", metavar="DB.TABLE")
    p.add_argument("--snapshot", type=_non_negative, metavar="N",
                   help="read snapshot N (default: the latest)")
    p.add_argument("--format", choices=("jsonl", "csv", "parquet", "table"), default="jsonl",
                   help="default: jsonl")
    p.add_argument("--output", metavar="FILE", help="write to FILE instead of stdout (required for parquet)")
    p.add_argument("--columns", action="append", metavar="COLS", help="comma-separated columns to read")
    p.add_argument("--limit", type=_non_negative, metavar="N", help="at most N rows")
    p.set_defaults(func=cmd_scan)

    p = sub(commands, "snapshots", "list the snapshots of a table", _SNAPSHOTS_EPILOG)
    p.add_argument("table", metavar="DB.TABLE")
    p.add_argument("--format", choices=("jsonl", "table"), default="jsonl", help="default: jsonl")
    p.set_defaults(func=cmd_snapshots)

    p = sub(commands, "delete", "delete rows of an append table through deletion vectors", _DELETE_EPILOG)
    p.add_argument("table", metavar="DB.TABLE")
    p.add_argument("--where", action="append", type=_key_value, default=[], metavar="COLUMN=VALUE",
                   required=True, help="delete rows where COLUMN equals VALUE (repeatable: all must hold)")
    p.set_defaults(func=cmd_delete)

    p = sub(commands, "changelog", "print the changelog rows committed by a range of snapshots", _CHANGELOG_EPILOG)
    p.add_argument("table", metavar="DB.TABLE")
    p.add_argument("--from-snapshot", type=_non_negative, default=1, metavar="N",
                   help="first snapshot (default: 1, or the earliest retained one)")
    p.add_argument("--to-snapshot", type=_non_negative, metavar="M", help="last snapshot (default: the latest)")
    p.add_argument("--format", choices=("jsonl", "csv", "table"), default="jsonl", help="default: jsonl")
    p.set_defaults(func=cmd_changelog)

    p = sub(commands, "files", "list the live data files of a table", _FILES_EPILOG)
    p.add_argument("table", metavar="DB.TABLE")
    p.add_argument("--snapshot", type=_non_negative, metavar="N",
                   help="files of snapshot N (default: the latest)")
    p.add_argument("--format", choices=("jsonl", "table"), default="jsonl", help="default: jsonl")
    p.set_defaults(func=cmd_files)

    p = sub(commands, "compact", "compact the data files of a table into one COMPACT snapshot",
            _COMPACT_EPILOG)
    p.add_argument("table", metavar="DB.TABLE")
    p.add_argument("--full", action="store_true",
                   help="full compaction: every bucket into one sorted run on the highest level")
    p.add_argument("--partition", action="append", type=_key_value, default=[], metavar="KEY=VALUE",
                   help="compact only the partitions where column KEY equals VALUE (repeatable)")
    p.set_defaults(func=cmd_compact)

    p = sub(commands, "produce", "send rows or change events to a table's Kafka ingest topic", _PRODUCE_EPILOG)
    p.add_argument("table", metavar="DB.TABLE")
    p.add_argument("files", nargs="+", metavar="FILE", help="JSON lines: one message per line ('-' for stdin)")
    p.add_argument("--format", choices=("json", "debezium"), default="json",
                   help="what the lines are: plain JSON rows (default) or Debezium change events")
    p.set_defaults(func=cmd_produce)

    p = sub(commands, "expire", "expire old snapshots of a table (and the files only they use)", "")
    p.add_argument("table", metavar="DB.TABLE")
    p.add_argument("--retain-max", type=_non_negative, metavar="N", help="keep at most N snapshots")
    p.add_argument("--retain-min", type=_non_negative, metavar="N", help="keep at least N snapshots")
    p.add_argument("--older-than-ms", type=_non_negative, metavar="MS",
                   help="expire snapshots older than this (within the two limits)")
    p.set_defaults(func=cmd_expire)

    p = sub(commands, "up", "start the whole cluster on this machine (foreground; Ctrl-C stops it)", _UP_EPILOG)
    p.add_argument("--kafka", metavar="HOST:PORT", help="use this Kafka instead of the embedded broker")
    p.add_argument("--catalog-port", type=int, default=50051, help="default: 50051")
    p.add_argument("--writer-port", type=int, default=50052, help="default: 50052")
    p.add_argument("--compactor-port", type=int, default=50053, help="default: 50053")
    p.add_argument("--no-compactor", action="store_true", help="start no compactor (no Spark)")
    p.add_argument("--spark-master", default="local[*]", help="default: local[*]")
    p.add_argument("--commit-interval", type=float, default=1.0, help="writer group-commit interval, seconds")
    p.add_argument("--ingest", action="append", default=[], metavar="DB.TABLE[:FORMAT]",
                   help="consume lake.ingest.DB.TABLE (json or debezium) into the table (repeatable)")
    p.set_defaults(func=cmd_up)

    p = sub(commands, "status", "show the cluster that `lake up` runs on this warehouse", "")
    p.add_argument("--format", choices=("table", "json"), default="table", help="default: table")
    p.set_defaults(func=cmd_status)

    p = sub(commands, "down", "stop the cluster that `lake up` runs on this warehouse", "")
    p.set_defaults(func=cmd_down)

    p = sub(commands, "timeline", "list the compaction plans of a table and their states", _TIMELINE_EPILOG)
    p.add_argument("table", metavar="DB.TABLE")
    p.add_argument("--metastore", metavar="URL", default=None,
                   help="the catalog's metadata store (default: $LSMLAKE_METASTORE, else the warehouse's SQLite file)")
    p.add_argument("--state", action="append", default=None, metavar="STATE", type=str.upper,
                   help="only plans in this state (repeatable)")
    p.add_argument("--format", choices=("table", "jsonl"), default="table", help="default: table")
    p.set_defaults(func=cmd_timeline)

    p = sub(commands, "levels", "show the LSM levels and sorted runs of every bucket", _LEVELS_EPILOG)
    p.add_argument("table", metavar="DB.TABLE")
    p.add_argument("--snapshot", type=_non_negative, metavar="N",
                   help="levels of snapshot N (default: the latest)")
    p.add_argument("--format", choices=("table", "jsonl"), default="table",
                   help="table: a text picture per bucket (default); jsonl: one object per file")
    p.set_defaults(func=cmd_levels)
    return parser


# ---------------------------------------------------------------------------------------------
# Entry point
# ---------------------------------------------------------------------------------------------

def _report(message: str) -> None:
    print(f"{PROG}: error: {message}", file=sys.stderr, flush=True)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit code (never raises, never prints a traceback)."""
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as e:  # --help, --version or a usage error (already printed)
        return e.code if isinstance(e.code, int) else (0 if e.code is None else 2)
    try:
        code: int = args.func(args)
        sys.stdout.flush()
        return code
    except UsageError as e:
        _report(str(e))
        return 2
    except (CliError, LakeError) as e:
        _report(str(e) or type(e).__name__)
        return 1
    except BrokenPipeError:
        # The reader of stdout went away (`lake scan ... | head`): stop quietly.
        with contextlib.suppress(Exception):
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
        return 1
    except KeyboardInterrupt:
        _report("interrupted")
        return 130
    except OSError as e:
        what = f"{e.strerror or e}: {e.filename}" if e.filename else str(e)
        _report(what)
        return 1
    except _ARROW_ERRORS as e:
        _report(str(e))
        return 1
    except Exception as e:  # a bug: still no traceback unless asked for
        if os.environ.get(ENV_DEBUG):
            traceback.print_exc()
        _report(f"unexpected {type(e).__name__}: {e} (set {ENV_DEBUG}=1 for a traceback)")
        return 1


def _catalog(args: argparse.Namespace) -> FileSystemCatalog:
    warehouse = args.warehouse or os.environ.get(ENV_WAREHOUSE) or ""
    if not warehouse.strip():
        raise UsageError(f"no warehouse: pass --warehouse DIR or set ${ENV_WAREHOUSE}")
    if warehouse.startswith("~"):
        warehouse = os.path.expanduser(warehouse)
    return FileSystemCatalog(warehouse)


@dataclasses.dataclass(frozen=True)
class _Services:
    catalog: str
    writer: str | None
    compactor: str | None
    kafka: str | None


def _services(args: argparse.Namespace) -> _Services | None:
    """The cluster to talk to: the `--*-service` flags, else the one `lake up` runs on the warehouse, else None
    (then the command works on the warehouse folder directly)."""
    catalog = getattr(args, "catalog_target", None)
    if catalog:
        return _Services(catalog, getattr(args, "writer_target", None), getattr(args, "compactor_target", None),
                         getattr(args, "kafka_target", None))
    from lsmlake.cli.cluster import find_endpoints

    state = find_endpoints(args.warehouse or os.environ.get(ENV_WAREHOUSE))
    if state is None:
        return None
    return _Services(state.catalog, getattr(args, "writer_target", None) or state.writer,
                     getattr(args, "compactor_target", None) or state.compactor,
                     getattr(args, "kafka_target", None) or state.kafka)


def _client(services: _Services, args: argparse.Namespace) -> Any:
    from lsmlake.client.client import Client
    from lsmlake.rpc.security import ChannelSecurity

    warehouse = args.warehouse or os.environ.get(ENV_WAREHOUSE) or None
    sec = ChannelSecurity.from_args(args, "")
    return Client(services.catalog, writer=services.writer, compactor=services.compactor, warehouse=warehouse,
                  token=sec.token, tls_ca=sec.tls_ca, tls_cert=sec.tls_cert, tls_key=sec.tls_key)


def _out(text: str = "") -> None:
    sys.stdout.write(text + "\n")


# ---------------------------------------------------------------------------------------------
# table create | list | describe | drop
# ---------------------------------------------------------------------------------------------

def cmd_table_create(args: argparse.Namespace) -> int:
    catalog = _catalog(args)
    db, _ = split_identifier(args.table)
    options = dict(args.option)
    partition_keys = _names(args.partition_key)
    primary_keys = _names(args.primary_key)
    fields = parse_schema_fields(args.schema)
    # Validate the whole definition before the database folder is created.
    new_table_schema(fields, partition_keys, primary_keys, options, args.comment)
    if args.if_not_exists and catalog.table_exists(args.table):
        _out(f"table {args.table} already exists")
        return 0
    catalog.create_database(db, ignore_if_exists=True)
    services = _services(args)
    if services is not None:  # through the catalog service
        with _client(services, args) as client:
            client.create_table(args.table, args.schema, primary_keys, partition_keys, options,
                                ignore_if_exists=args.if_not_exists)
    else:
        catalog.create_table(args.table, fields, partition_keys, primary_keys, options, args.comment,
                             ignore_if_exists=args.if_not_exists)
    _out(f"created table {args.table}")
    return 0


def cmd_table_list(args: argparse.Namespace) -> int:
    names = _catalog(args).list_tables(args.database)
    if args.format == "json":
        _out(json.dumps(names))
    else:
        for n in names:
            _out(json.dumps({"table": n}) if args.format == "jsonl" else n)
    return 0


def describe(table: FileStoreTable) -> dict[str, Any]:
    s = table.schema
    return {
        "table": table.identifier,
        "schema_id": s.id,
        "columns": [{"id": f.id, "name": f.name, "type": f.type.sql(), "nullable": f.type.nullable}
                    | ({"description": f.description} if f.description is not None else {})
                    for f in s.fields],
        "partition_keys": list(s.partition_keys),
        "primary_keys": list(s.primary_keys),
        "options": dict(s.options),
        "comment": s.comment,
    }


def cmd_table_describe(args: argparse.Namespace) -> int:
    d = describe(_catalog(args).get_table(args.table))
    if args.format == "json":
        _out(json.dumps(d, indent=2, ensure_ascii=False))
        return 0
    if args.format == "jsonl":
        _out(json.dumps(d, ensure_ascii=False))
        return 0
    _out(f"table: {d['table']} (schema {d['schema_id']})")
    if d["comment"]:
        _out(f"comment: {d['comment']}")
    _out()
    rows = []
    for c in d["columns"]:
        key = ", ".join(k for k, on in (("primary key", c["name"] in d["primary_keys"]),
                                         ("partition", c["name"] in d["partition_keys"])) if on)
        rows.append([c["name"], c["type"], key])
    _print_table(["column", "type", "key"], rows)
    _out()
    _out(f"primary key:    {', '.join(d['primary_keys']) or '(none)'}")
    _out(f"partition keys: {', '.join(d['partition_keys']) or '(none)'}")
    _out("options:" if d["options"] else "options:        (none)")
    for k in sorted(d["options"]):
        _out(f"  {k} = {d['options'][k]}")
    return 0


def cmd_table_alter(args: argparse.Namespace) -> int:
    if not args.changes:
        raise UsageError("nothing to alter: give --add-column, --rename-column, --set or --remove")
    services = _services(args)
    if services is not None:
        from lsmlake.proto_gen.lsmlake.v1 import catalog_pb2
        from lsmlake.table.schema_change import AddColumn, RemoveOption, RenameColumn, SetOption

        C = catalog_pb2.SchemaChange
        proto = []
        for c in args.changes:
            if isinstance(c, AddColumn):
                add = catalog_pb2.AddColumn(name=c.name, type=c.type_text, comment=c.comment or "")
                proto.append(C(add_column=add))
            elif isinstance(c, RenameColumn):
                proto.append(C(rename_column=catalog_pb2.RenameColumn(old_name=c.old_name, new_name=c.new_name)))
            elif isinstance(c, SetOption):
                proto.append(C(set_option=catalog_pb2.SetOption(key=c.key, value=c.value)))
            elif isinstance(c, RemoveOption):
                proto.append(C(remove_option=catalog_pb2.RemoveOption(key=c.key)))
        with _client(services, args) as client:
            import grpc

            from lsmlake.client.client import _ident, lake_error

            try:
                reply = client._catalog.AlterTable(catalog_pb2.AlterTableRequest(table=_ident(args.table),
                                                                                 changes=proto), timeout=60)
            except grpc.RpcError as e:
                raise lake_error(e) from None
        _out(f"altered table {args.table} (schema {reply.table.schema_id})")
        return 0
    table = _catalog(args).alter_table(args.table, args.changes)
    _out(f"altered table {args.table} (schema {table.schema.id})")
    return 0


def cmd_table_drop(args: argparse.Namespace) -> int:
    services = _services(args)
    if services is not None:
        with _client(services, args) as client:
            dropped = client.drop_table(args.table, ignore_if_not_exists=args.if_exists)
        _out(f"dropped table {args.table}" if dropped else f"table {args.table} does not exist")
        return 0
    catalog = _catalog(args)
    try:
        catalog.drop_table(args.table)
    except NotFoundError:
        if not args.if_exists:
            raise
        _out(f"table {args.table} does not exist")
        return 0
    _out(f"dropped table {args.table}")
    return 0


# ---------------------------------------------------------------------------------------------
# write
# ---------------------------------------------------------------------------------------------

def _input_format(name: str, forced: str | None) -> str:
    if forced:
        return forced
    if name == "-":
        raise UsageError("reading stdin ('-') needs --input-format parquet|csv|jsonl|json")
    low = name.lower()
    compressed = False
    for suffix in _COMPRESSION_SUFFIXES:
        if low.endswith(suffix):
            low, compressed = low[: -len(suffix)], True
            break
    fmt = _FORMAT_BY_EXTENSION.get(os.path.splitext(low)[1])
    if fmt is None:
        raise UsageError(f"cannot tell the format of {name!r} from its extension "
                         "(.parquet, .csv, .jsonl, .json); pass --input-format")
    if fmt == "parquet" and compressed:
        raise UsageError(f"{name!r}: compressed Parquet files are not supported (Parquet compresses itself)")
    return fmt


def _read_stdin() -> bytes:
    buffer = getattr(sys.stdin, "buffer", None)
    if buffer is not None:
        data: bytes = buffer.read()
        return data
    return sys.stdin.read().encode()


Source = str | bytes  # a file path, or the bytes read from stdin


def _stream(src: Source) -> Any:
    """A fresh readable for pyarrow: the path itself (compression detected), or a file object.

    (Not a pa.BufferReader: a threaded CSV read of one sometimes aborts the process at exit with
    "terminate called without an active exception", pyarrow 19.)
    """
    return io.BytesIO(src) if isinstance(src, bytes) else src


def _raw_bytes(src: Source) -> bytes:
    if isinstance(src, bytes):
        return src
    with pa.input_stream(src, compression="detect") as f:
        data: bytes = f.read()
        return data


def read_input(src: Source, name: str, fmt: str, schema: TableSchema) -> pa.Table:
    """One input file as an Arrow table whose table columns already have the table's Arrow types."""
    targets = {f.name: to_arrow_type(f.type) for f in schema.fields}
    sql = {f.name: f.type.sql() for f in schema.fields}
    try:
        if fmt == "parquet":
            data = pq.read_table(_stream(src))
            coerce = False  # Arrow casts (in conform) fit typed Parquet columns
        elif fmt == "csv":
            data = _read_csv(src, targets)
            coerce = True
        else:
            data = _read_json(src, targets, name, fmt == "json")
            coerce = True
    except (OSError, UnicodeDecodeError, *_ARROW_ERRORS) as e:
        raise CliError(f"cannot read {name} as {fmt}: {e}") from None
    columns = []
    for cname, col in zip(data.column_names, data.columns, strict=True):
        if cname in targets and coerce:
            col = coerce_column(col, targets[cname], f"{name}: column {cname!r} ({sql[cname]})")
        columns.append(col)
    data = pa.table(columns, names=data.column_names)
    return _normalize_row_kind(data, name)


def _normalize_row_kind(data: pa.Table, name: str) -> pa.Table:
    """An empty `_row_kind` means +I; an all-empty column is dropped."""
    if ROW_KIND_COLUMN not in data.column_names:
        return data
    i = data.column_names.index(ROW_KIND_COLUMN)
    col = data.column(i)
    if col.null_count == len(col):
        return data.remove_column(i)
    if pa.types.is_dictionary(col.type):
        col = col.cast(col.type.value_type)
    if pa.types.is_string(col.type) or pa.types.is_large_string(col.type):
        col = pc.fill_null(col, "+I")
    elif pa.types.is_integer(col.type):
        col = pc.fill_null(col, 0)
    else:
        raise CliError(f"{name}: column {ROW_KIND_COLUMN!r} must hold +I, -U, +U or -D, not {col.type}")
    return data.set_column(i, ROW_KIND_COLUMN, col)


# -- CSV ----------------------------------------------------------------------------------------

def _csv_read_type(t: pa.DataType) -> pa.DataType:
    """The type the CSV reader parses a column as; the rest is converted by coerce_column."""
    if _is_binary(t) or _is_nested(t) or (pa.types.is_timestamp(t) and t.tz is not None):
        return pa.string()
    return t


def _read_csv(src: Source, targets: dict[str, pa.DataType]) -> pa.Table:
    def read(column_types: dict[str, pa.DataType]) -> pa.Table:
        convert = pcsv.ConvertOptions(column_types=column_types, null_values=CSV_NULL_VALUES,
                                      strings_can_be_null=True, quoted_strings_can_be_null=False)
        # In-memory input is small (stdin, cells): read it on this thread (see `_stream`).
        read_options = pcsv.ReadOptions(use_threads=not isinstance(src, bytes))
        return pcsv.read_csv(_stream(src), read_options=read_options, convert_options=convert)

    typed = {ROW_KIND_COLUMN: pa.string()} | {n: _csv_read_type(t) for n, t in targets.items()}
    try:
        return read(typed)
    except pa.ArrowInvalid:
        # Read the table's columns as text, then convert them one by one: the error names the column.
        return read({n: pa.string() for n in typed})


# -- JSON ---------------------------------------------------------------------------------------

def _json_read_type(t: pa.DataType) -> pa.DataType:
    """The type the JSON reader parses a value as (it knows no dates, times, base64 or maps)."""
    if pa.types.is_date(t) or pa.types.is_time(t) or _is_binary(t):
        return pa.string()
    if pa.types.is_decimal(t):
        # The reader rounds extra digits away; read them all so the (safe) cast reports the loss.
        return pa.decimal256(76, 76 - (t.precision - t.scale))
    if pa.types.is_map(t):
        entry = [("key", _json_read_type(t.key_type)), ("value", _json_read_type(t.item_type))]
        return pa.list_(pa.struct(entry))
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        return pa.list_(_json_read_type(t.value_type))
    if pa.types.is_struct(t):
        return pa.struct([pa.field(f.name, _json_read_type(f.type)) for f in t])
    return t


def _has_map(t: pa.DataType) -> bool:
    if pa.types.is_map(t):
        return True
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        return _has_map(t.value_type)
    if pa.types.is_struct(t):
        return any(_has_map(f.type) for f in t)
    return False


def _has_decimal(t: pa.DataType) -> bool:
    if pa.types.is_decimal(t):
        return True
    if pa.types.is_map(t):
        return _has_decimal(t.key_type) or _has_decimal(t.item_type)
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        return _has_decimal(t.value_type)
    if pa.types.is_struct(t):
        return any(_has_decimal(f.type) for f in t)
    return False


def _maps_as_entries(value: Any, t: pa.DataType) -> Any:
    """Rewrite one JSON value for the Arrow reader: maps as [{"key": k, "value": v}] lists, and
    DECIMAL numbers as their exact text."""
    if value is None:
        return None
    if pa.types.is_decimal(t) and isinstance(value, _JsonNumber):
        return value.text
    if pa.types.is_map(t):
        if isinstance(value, dict):
            pairs: Iterable[Any] = value.items()
        elif isinstance(value, list):
            pairs = [(p["key"], p.get("value")) if isinstance(p, dict) else tuple(p) for p in value]
        else:
            return value  # the reader reports the mismatch
        out = []
        for pair in pairs:
            if len(pair) != 2:
                raise CliError(f"a map entry must be a [key, value] pair, got {list(pair)!r}")
            k, v = pair
            if isinstance(k, str) and (pa.types.is_integer(t.key_type) or pa.types.is_floating(t.key_type)):
                k = _number(k)
            out.append({"key": _maps_as_entries(k, t.key_type), "value": _maps_as_entries(v, t.item_type)})
        return out
    if (pa.types.is_list(t) or pa.types.is_large_list(t)) and isinstance(value, list):
        return [_maps_as_entries(x, t.value_type) for x in value]
    if pa.types.is_struct(t) and isinstance(value, dict):
        fields = {f.name: f.type for f in t}
        return {k: _maps_as_entries(v, fields[k]) if k in fields else v for k, v in value.items()}
    return value


def _number(text: str) -> Any:
    try:
        return int(text)
    except ValueError:
        try:
            return float(text)
        except ValueError:
            return text


class _JsonNumber(float):
    """A JSON number that remembers its text, so that a DECIMAL gets every digit of it."""

    text: str


def _parse_float(text: str) -> float:
    n = _JsonNumber(text)
    n.text = text
    return n


def _json_records_to_lines(raw: bytes, targets: dict[str, pa.DataType], name: str) -> bytes:
    """JSON lines or a JSON array -> JSON lines, with maps rewritten for the Arrow reader."""
    text = raw.decode("utf-8-sig")
    records: list[Any]
    if text.lstrip().startswith("["):
        try:
            records = json.loads(text, parse_float=_parse_float)
        except json.JSONDecodeError as e:
            raise CliError(f"cannot read {name} as JSON: {e}") from None
        if not isinstance(records, list):
            raise CliError(f"cannot read {name} as JSON: expected an array of objects")
    else:
        records = []
        for lineno, line in enumerate(text.splitlines(), 1):
            if line.strip():
                try:
                    records.append(json.loads(line, parse_float=_parse_float))
                except json.JSONDecodeError as e:
                    raise CliError(f"cannot read {name} as JSON lines: line {lineno}: {e}") from None
    map_columns = {n: t for n, t in targets.items() if _has_map(t) or _has_decimal(t)}
    lines = []
    for i, rec in enumerate(records, 1):
        if not isinstance(rec, dict):
            raise CliError(f"cannot read {name}: record {i} is not a JSON object")
        for n, t in map_columns.items():
            if n in rec:
                try:
                    rec[n] = _maps_as_entries(rec[n], t)
                except CliError as e:
                    raise CliError(f"{name}: record {i}: column {n!r}: {e}") from None
        lines.append(json.dumps(rec, ensure_ascii=False))
    return "\n".join(lines).encode()


def _read_json(src: Source, targets: dict[str, pa.DataType], name: str, maybe_array: bool) -> pa.Table:
    data: Source = src
    if any(_has_map(t) for t in targets.values()) or (maybe_array and _starts_with_bracket(src)):
        data = _json_records_to_lines(_raw_bytes(src), targets, name)
        if not data:
            return pa.table({})
    explicit = pa.schema([pa.field(ROW_KIND_COLUMN, pa.string())]
                         + [pa.field(n, _json_read_type(t)) for n, t in targets.items()
                            if n != ROW_KIND_COLUMN])
    parse = pjson.ParseOptions(explicit_schema=explicit, unexpected_field_behavior="infer")
    try:
        table = pjson.read_json(_stream(data), parse_options=parse)
    except pa.ArrowInvalid:
        # A value of another JSON kind than the column's (e.g. "5" for BIGINT): infer, then convert.
        table = pjson.read_json(_stream(data))
    # With the explicit schema, columns absent from the input come back as nulls (a missing NOT NULL
    # column is then reported as holding nulls).
    return table


def _starts_with_bracket(src: Source) -> bool:
    if isinstance(src, bytes):
        head = src[:4096]
    else:
        with pa.input_stream(src, compression="detect") as f:
            head = f.read(4096)
    return head.lstrip(b"\xef\xbb\xbf \t\r\n").startswith(b"[")


# -- converting input columns to the table's types ----------------------------------------------

def _is_string(t: pa.DataType) -> bool:
    return pa.types.is_string(t) or pa.types.is_large_string(t)


def _is_binary(t: pa.DataType) -> bool:
    return pa.types.is_binary(t) or pa.types.is_large_binary(t) or pa.types.is_fixed_size_binary(t)


def _is_list(t: pa.DataType) -> bool:
    return pa.types.is_list(t) or pa.types.is_large_list(t)


def _is_nested(t: pa.DataType) -> bool:
    return _is_list(t) or pa.types.is_map(t) or pa.types.is_struct(t)


def _mask(arr: pa.Array) -> pa.Array | None:
    return arr.is_null() if arr.null_count else None


def _list_parts(arr: pa.Array) -> tuple[pa.Array, pa.Array]:
    """Zero-based int32 offsets and the matching slice of the values of a list or map array."""
    offsets = arr.offsets
    start = offsets[0].as_py() if len(offsets) else 0
    end = offsets[-1].as_py() if len(offsets) else 0
    values = arr.values.slice(start, end - start)
    if start:
        offsets = pc.subtract(offsets, start)
    return offsets.cast(pa.int32()), values


def coerce_column(col: pa.ChunkedArray | pa.Array, target: pa.DataType,
                  what: str) -> pa.ChunkedArray | pa.Array:
    """Convert a column read from CSV or JSON to the table's Arrow type, whole arrays at a time."""
    if isinstance(col, pa.ChunkedArray):
        if col.type.equals(target):
            return col
        return pa.chunked_array([coerce_column(c, target, what) for c in col.chunks], type=target)
    try:
        return _coerce(col, target, what)
    except _ARROW_ERRORS as e:
        raise CliError(f"{what}: {e}") from None


def _coerce(arr: pa.Array, target: pa.DataType, what: str) -> pa.Array:
    t = arr.type
    if t.equals(target):
        return arr
    if pa.types.is_null(t):
        return pa.nulls(len(arr), target)
    if _is_string(t):
        if _is_binary(target):
            return _from_base64(arr, target, what)
        if pa.types.is_time(target):
            return _time_from_strings(arr, target)
        if pa.types.is_timestamp(target) and target.tz is not None:
            # A value without a zone offset is a UTC wall time.
            has_offset = pc.match_substring_regex(arr, r"(?:[Zz]|[+-]\d\d(?::?\d\d)?)\s*$")
            utc = pc.binary_join_element_wise(arr, "Z", "")
            return pc.if_else(has_offset, arr, utc).cast(target)
        if _is_nested(target):
            return _from_json_texts(arr, target, what)
        return arr.cast(target)
    if pa.types.is_map(target) and (pa.types.is_list(t) or pa.types.is_large_list(t)) \
            and pa.types.is_struct(t.value_type):
        offsets, entries = _list_parts(arr)
        children = dict(zip([f.name for f in t.value_type], entries.flatten(), strict=True))
        if set(children) != {"key", "value"}:
            raise CliError(f"{what}: a map entry needs exactly 'key' and 'value', got {sorted(children)}")
        keys = _coerce(children["key"], target.key_type, what)
        if keys.null_count:
            raise CliError(f"{what}: a map key is null")
        items = _coerce(children["value"], target.item_type, what)
        return pa.MapArray.from_arrays(offsets, keys, items, type=target, mask=_mask(arr))
    if _is_list(target) and _is_list(t):
        offsets, values = _list_parts(arr)
        values = _coerce(values, target.value_type, what)
        result = pa.ListArray.from_arrays(offsets, values, type=pa.list_(target.value_field), mask=_mask(arr))
        return result if result.type.equals(target) else result.cast(target)
    if pa.types.is_struct(target) and pa.types.is_struct(t):
        have = dict(zip([f.name for f in t], arr.flatten(), strict=True))
        unknown = sorted(set(have) - {f.name for f in target})
        if unknown:
            raise CliError(f"{what}: unknown field(s) {unknown}; the ROW has {[f.name for f in target]}")
        fields = [_coerce(have[f.name], f.type, f"{what}.{f.name}") if f.name in have
                  else pa.nulls(len(arr), f.type) for f in target]
        return pa.StructArray.from_arrays(fields, fields=list(target), mask=_mask(arr))
    return arr.cast(target)


def _from_base64(arr: pa.Array, target: pa.DataType, what: str) -> pa.Array:
    out: list[bytes | None] = []
    for v in arr.to_pylist():
        if v is None:
            out.append(None)
            continue
        try:
            out.append(base64.b64decode(v, validate=True))
        except (binascii.Error, ValueError):
            raise CliError(f"{what}: {v[:40]!r} is not base64") from None
    return pa.array(out, type=target)


def _time_from_strings(arr: pa.Array, target: pa.DataType) -> pa.Array:
    """`12:30:00.5` -> TIME: parse as a timestamp on 1970-01-01, keep the time of day."""
    ts = pc.binary_join_element_wise("1970-01-01T", arr, "").cast(pa.timestamp("ns"))
    nanos = ts.cast(pa.int64())
    per_unit = {"s": 1_000_000_000, "ms": 1_000_000, "us": 1_000, "ns": 1}[target.unit]
    ticks = pc.divide(nanos, per_unit)
    storage = pa.int32() if pa.types.is_time32(target) else pa.int64()
    return ticks.cast(storage).view(target)


def _from_json_texts(arr: pa.Array, target: pa.DataType, what: str) -> pa.Array:
    """A column of JSON texts (a nested value in a CSV cell) -> the nested type, via the JSON reader."""
    if len(arr) == 0:
        return pa.array([], type=target)
    texts = pc.replace_substring_regex(pc.fill_null(arr, "null"), r"[\r\n]", " ")
    wrapped = pc.binary_join_element_wise('{"v":', texts, "}", "")
    data = "\n".join(wrapped.to_pylist()).encode()
    try:
        table = _read_json(data, {"v": target}, what, False)
    except (CliError, *_ARROW_ERRORS) as e:
        raise CliError(f"{what}: cells must hold JSON: {e}") from None
    if table.num_rows != len(arr) or "v" not in table.column_names:
        raise CliError(f"{what}: cells must hold one JSON value each")
    col = coerce_column(table.column("v"), target, what)
    return col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col


def cmd_write(args: argparse.Namespace) -> int:
    catalog = _catalog(args)
    if args.files.count("-") > 1:
        raise UsageError("stdin ('-') can be read only once")
    formats = [_input_format(f, args.input_format) for f in args.files]
    for f in args.files:
        if f != "-" and not os.path.isfile(f):
            raise CliError(f"{f}: no such file" if not os.path.exists(f) else f"{f}: not a file")
    table = catalog.get_table(args.table)
    schema = table.schema
    # Read and check every input before writing anything.
    batches: list[pa.Table] = []
    total = 0
    for name, fmt in zip(args.files, formats, strict=True):
        src: Source = _read_stdin() if name == "-" else name
        label = "<stdin>" if name == "-" else name
        data = read_input(src, label, fmt, schema)
        if data.num_rows == 0:
            continue
        try:
            rows, kinds = conform(schema, data)
        except LakeError as e:
            raise CliError(f"{label}: {e}") from None
        batches.append(rows.append_column(ROW_KIND_COLUMN, kinds))
        total += rows.num_rows
    nfiles = len(args.files)
    files_text = f"{nfiles} file{'s' if nfiles != 1 else ''}"
    if not batches:
        _out(f"wrote 0 rows from {files_text} to {args.table}: nothing to commit")
        return 0
    services = _services(args)
    if services is not None and services.writer:
        data = pa.concat_tables(batches, promote_options="default")
        progress = _Progress(f"writing {args.table}", data.num_rows)
        step = 100_000
        parts = range(0, data.num_rows, step)
        before = 0  # parts an earlier run of the command (same --request-id) had written
        with _client(services, args) as client:
            try:
                for n, lo in enumerate(parts):  # acknowledged part by part, so the bar means committed
                    reply = client.write(args.table, data.slice(lo, step), commit_now=True,
                                         request_id=part_request_id(args.request_id, n, len(parts)) or None)
                    before += reply.already_written
                    progress.add(min(step, data.num_rows - lo))
            finally:
                progress.close()
        earlier = f" ({before} of {len(parts)} part(s) had been written before)" if before else ""
        _out(f"wrote {total:,} rows from {files_text} to {args.table} through the writer service: "
             f"snapshot {reply.snapshot_id}{earlier}")
        return 0
    if args.request_id:
        raise UsageError("--request-id needs the writer service: run `lake up`, or pass --catalog and --writer")
    result = table.write_arrow(batches)
    if result is None:
        _out(f"wrote 0 rows from {files_text} to {args.table}: nothing to commit")
        return 0
    _out(f"wrote {total} row{'s' if total != 1 else ''} from {files_text} to {args.table} "
         f"in snapshot {result.snapshot_id}")
    return 0


# ---------------------------------------------------------------------------------------------
# Output: JSON values, CSV, aligned tables
# ---------------------------------------------------------------------------------------------

def _json_ready(arr: pa.Array) -> pa.Array:
    """The array with every value in a form `to_pylist` + `json.dumps` render naturally."""
    t = arr.type
    if pa.types.is_decimal(t) or pa.types.is_date(t) or pa.types.is_time(t):
        return arr.cast(pa.string())
    if pa.types.is_timestamp(t):
        return pc.replace_substring(arr.cast(pa.string()), " ", "T", max_replacements=1)
    if _is_binary(t):
        return pa.array([None if v is None else base64.b64encode(v).decode("ascii") for v in arr.to_pylist()],
                        type=pa.string())
    if pa.types.is_map(t):
        offsets, entries = _list_parts(arr)
        keys, items = entries.flatten()
        ck, ci = _json_ready(keys), _json_ready(items)
        if ck.type.equals(keys.type) and ci.type.equals(items.type):
            return arr
        return pa.MapArray.from_arrays(offsets, ck, ci, mask=_mask(arr))
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        offsets, values = _list_parts(arr)
        cv = _json_ready(values)
        if cv.type.equals(values.type):
            return arr
        return pa.ListArray.from_arrays(offsets, cv, mask=_mask(arr))
    if pa.types.is_struct(t):
        children = arr.flatten()
        converted = [_json_ready(c) for c in children]
        if all(a.type.equals(b.type) for a, b in zip(children, converted, strict=True)):
            return arr
        return pa.StructArray.from_arrays(converted, names=[f.name for f in t], mask=_mask(arr))
    return arr


def _maps_to_json(value: Any, t: pa.DataType) -> Any:
    """Maps come out of `to_pylist` as lists of (key, value) tuples: objects for string keys."""
    if value is None:
        return None
    if pa.types.is_map(t):
        if _is_string(t.key_type):
            return {k: _maps_to_json(v, t.item_type) for k, v in value}
        return [[_maps_to_json(k, t.key_type), _maps_to_json(v, t.item_type)] for k, v in value]
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        return [_maps_to_json(x, t.value_type) for x in value]
    if pa.types.is_struct(t):
        return {f.name: _maps_to_json(value[f.name], f.type) for f in t}
    return value


def _non_finite(v: Any) -> Any:
    if isinstance(v, float) and not math.isfinite(v):
        return "NaN" if math.isnan(v) else ("Infinity" if v > 0 else "-Infinity")
    return v


def json_values(col: pa.ChunkedArray | pa.Array) -> list[Any]:
    """The values of a column in their JSON form (see `lake scan --help`)."""
    chunks = col.chunks if isinstance(col, pa.ChunkedArray) else [col]
    t = col.type
    out: list[Any] = []
    for chunk in chunks:
        values = _json_ready(chunk).to_pylist()
        if _has_map(t):
            values = [_maps_to_json(v, t) for v in values]
        if pa.types.is_floating(t) and len(chunk) and pc.any(pc.invert(pc.is_finite(chunk))).as_py():
            values = [_non_finite(v) for v in values]
        out.extend(values)
    return out


def json_rows(table: pa.Table) -> Iterator[dict[str, Any]]:
    names = table.column_names
    columns = [json_values(c) for c in table.columns]
    for values in zip(*columns, strict=True):
        yield dict(zip(names, values, strict=True))


def _csv_ready(table: pa.Table) -> pa.Table:
    """Columns the Arrow CSV writer cannot write (binary, nested) as base64 or JSON text."""
    columns = []
    for col in table.columns:
        if _is_binary(col.type):
            col = pa.chunked_array([_json_ready(c) for c in col.chunks], type=pa.string())
        elif _is_nested(col.type):
            texts = [None if v is None else json.dumps(v, ensure_ascii=False) for v in json_values(col)]
            col = pa.array(texts, type=pa.string())
        columns.append(col)
    return pa.table(columns, names=table.column_names)


def _cell(v: Any) -> str:
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (dict, list)):
        return json.dumps(v, ensure_ascii=False)
    return str(v).replace("\r", "\\r").replace("\n", "\\n").replace("\t", "\\t")


def _print_table(header: Sequence[str], rows: Sequence[Sequence[str]], right: Iterable[int] = (),
                 out: IO[str] | None = None) -> None:
    """An aligned text table: a header, a rule, then the rows."""
    out = out or sys.stdout
    right = set(right)
    widths = [len(h) for h in header]
    for r in rows:
        widths = [max(w, len(c)) for w, c in zip(widths, r, strict=True)]

    def line(cells: Sequence[str]) -> str:
        parts = [c.rjust(w) if i in right else c.ljust(w)
                 for i, (c, w) in enumerate(zip(cells, widths, strict=True))]
        return "  ".join(parts).rstrip()

    out.write(line(header) + "\n")
    out.write("  ".join("-" * w for w in widths) + "\n")
    for r in rows:
        out.write(line(r) + "\n")


def _print_records(records: Sequence[dict[str, Any]], keys: Sequence[str], fmt: str,
                   numeric: Iterable[str] = ()) -> None:
    if fmt == "jsonl":
        for r in records:
            _out(json.dumps({k: r[k] for k in keys}, ensure_ascii=False))
        return
    num = set(numeric)
    _print_table(keys, [[_cell(r[k]) for k in keys] for r in records],
                 right=[i for i, k in enumerate(keys) if k in num])


# ---------------------------------------------------------------------------------------------
# scan
# ---------------------------------------------------------------------------------------------

@contextlib.contextmanager
def _output_file(path: str, binary: bool) -> Iterator[IO[Any]]:
    """Write to a temporary file next to `path`, renamed over it only when everything succeeded."""
    directory = os.path.dirname(os.path.abspath(path))
    try:
        fd, tmp = tempfile.mkstemp(prefix=".lake-", suffix=".tmp", dir=directory)
    except OSError as e:
        raise CliError(f"cannot write {path}: {e.strerror or e}") from None
    try:
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)
        f: IO[Any]
        f = os.fdopen(fd, "wb") if binary else os.fdopen(fd, "w", encoding="utf-8", newline="")
        with f:
            yield f
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


class _Progress:
    """A one-line progress display on stderr, only when stderr is a terminal (pipes and logs stay clean)."""

    def __init__(self, what: str, total: int | None) -> None:
        self.what = what
        self.total = total
        self.done = 0
        self.enabled = sys.stderr.isatty() and os.environ.get("LAKE_NO_PROGRESS") is None
        self._last = 0.0

    def add(self, n: int) -> None:
        self.done += n
        now = time.monotonic()
        if self.enabled and now - self._last >= 0.1:
            self._last = now
            if self.total:
                frac = min(1.0, self.done / self.total)
                bar = "#" * int(frac * 30)
                sys.stderr.write(f"\r{self.what} [{bar:<30}] {self.done:,}/{self.total:,} rows")
            else:
                sys.stderr.write(f"\r{self.what} {self.done:,} rows")
            sys.stderr.flush()

    def close(self) -> None:
        if self.enabled:
            sys.stderr.write("\r" + " " * 78 + "\r")
            sys.stderr.flush()


def _with_progress(tables: Iterable[pa.Table], progress: _Progress) -> Iterator[pa.Table]:
    try:
        for t in tables:
            progress.add(t.num_rows)
            yield t
    finally:
        progress.close()


def _limited(tables: Iterable[pa.Table], limit: int | None) -> Iterator[pa.Table]:
    if limit is None:
        yield from tables
        return
    left = limit
    if left <= 0:
        return
    for t in tables:
        if t.num_rows >= left:
            yield t.slice(0, left)
            return
        left -= t.num_rows
        yield t


def _numeric(t: pa.DataType) -> bool:
    return pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_decimal(t)


def _write_rows(tables: Iterable[pa.Table], schema: pa.Schema, fmt: str, out: IO[Any]) -> int:
    """Write the row batches in one format; returns the number of rows."""
    n = 0
    if fmt == "parquet":
        with pq.ParquetWriter(out, schema) as writer:
            for t in tables:
                writer.write_table(t.cast(schema))
                n += t.num_rows
        return n
    if fmt == "jsonl":
        for t in tables:
            for row in json_rows(t):
                out.write(json.dumps(row, ensure_ascii=False) + "\n")
            n += t.num_rows
        return n
    if fmt == "csv":
        first = True
        for t in tables:
            buf = io.BytesIO()
            pcsv.write_csv(_csv_ready(t), buf, write_options=pcsv.WriteOptions(include_header=first))
            out.write(buf.getvalue().decode("utf-8"))
            first = False
            n += t.num_rows
        if first:  # no rows: just the header
            buf = io.BytesIO()
            pcsv.write_csv(_csv_ready(schema.empty_table()), buf)
            out.write(buf.getvalue().decode("utf-8"))
        return n
    # table
    rows: list[list[str]] = []
    for t in tables:
        columns = [json_values(c) for c in t.columns]
        rows.extend([_cell(v) for v in r] for r in zip(*columns, strict=True))
    _print_table(schema.names, rows, right=[i for i, f in enumerate(schema) if _numeric(f.type)], out=out)
    return len(rows)


def cmd_scan(args: argparse.Namespace) -> int:
    if args.format == "parquet" and not args.output:
        raise UsageError("--format parquet needs --output FILE")
    catalog = _catalog(args)
    table = catalog.get_table(args.table)
    schema = table.schema
    projection = None
    if args.columns is not None:
        projection = _names(args.columns)
        if not projection:
            raise UsageError("--columns needs at least one column name")
        dup = sorted({c for c in projection if projection.count(c) > 1})
        if dup:
            raise UsageError(f"--columns lists {dup} more than once")
        for c in projection:
            schema.field(c)  # names an unknown column
    names = projection if projection is not None else schema.field_names
    out_schema = pa.schema([schema.arrow_schema.field(n) for n in names])
    snapshot = table.require_snapshot(args.snapshot) if args.snapshot is not None else table.latest_snapshot()
    splits = table.new_scan(None, snapshot).plan() if snapshot is not None else []
    total = sum(sp.row_count for sp in splits) if args.limit is None else args.limit
    tables = _with_progress(_limited(table.new_read(projection).read_batches(splits), args.limit),
                            _Progress(f"scanning {args.table}", total or None))
    if args.output:
        with _output_file(args.output, binary=args.format == "parquet") as f:
            _write_rows(tables, out_schema, args.format, f)
    else:
        _write_rows(tables, out_schema, args.format, sys.stdout)
    return 0


# ---------------------------------------------------------------------------------------------
# snapshots, files
# ---------------------------------------------------------------------------------------------

def snapshot_records(table: FileStoreTable) -> list[dict[str, Any]]:
    return [{k: getattr(s, k) for k in SNAPSHOT_KEYS} for s in table.snapshots.snapshots()]


def cmd_snapshots(args: argparse.Namespace) -> int:
    table = _catalog(args).get_table(args.table)
    numeric = ("id", "schema_id", "time_millis", "total_record_count", "delta_record_count",
               "commit_identifier")
    _print_records(snapshot_records(table), SNAPSHOT_KEYS, args.format, numeric)
    return 0


def _warehouse_dir(args: argparse.Namespace) -> str:
    warehouse = args.warehouse or os.environ.get(ENV_WAREHOUSE) or ""
    if not warehouse.strip():
        raise UsageError(f"no warehouse: pass --warehouse DIR or set ${ENV_WAREHOUSE}")
    if "://" in warehouse and not warehouse.startswith("file://"):
        raise UsageError("lake up runs on a local warehouse folder; deploy with the Helm chart for object storage")
    return os.path.expanduser(warehouse.removeprefix("file://"))


def cmd_up(args: argparse.Namespace) -> int:
    from lsmlake.cli.cluster import Cluster, check_ports

    ports = check_ports({"catalog": args.catalog_port, "writer": args.writer_port,
                         "compactor": args.compactor_port})
    cluster = Cluster(_warehouse_dir(args), kafka=args.kafka, ports=ports, compactor=not args.no_compactor,
                      spark_master=args.spark_master, commit_interval_s=args.commit_interval, ingest=args.ingest)
    sys.stderr.write("starting Kafka, catalog, writer" + (", compactor" if not args.no_compactor else "") + " ...\n")
    state = cluster.start()
    _out(f"kafka      {state.kafka}" + ("  (embedded Tansu broker)" if state.embedded_kafka else ""))
    _out(f"catalog    {state.catalog}")
    _out(f"writer     {state.writer}")
    if state.compactor:
        _out(f"compactor  {state.compactor}")
    _out(f"logs       {state.logs}")
    _out("cluster is up; Ctrl-C (or `lake down`) stops it")
    sys.stdout.flush()
    died = cluster.wait()
    if died:
        sys.stderr.write(f"the {died} stopped unexpectedly; stopping the cluster (see {state.logs})\n")
    codes = cluster.stop()
    failed = [f"{n} exited with {c}" for n, c in codes if c not in (0, None)]
    if failed:
        sys.stderr.write("; ".join(failed) + "\n")
    _out("cluster stopped")
    return 1 if died or failed else 0


def cmd_status(args: argparse.Namespace) -> int:
    from lsmlake.cli.cluster import status

    info = status(_warehouse_dir(args))
    if args.format == "json":
        _out(json.dumps(info))
    else:
        _out(f"lake up    pid {info['pid']} ({'running' if info['running'] else 'gone'})")
        _out(f"kafka      {info['kafka']}" + ("  (embedded)" if info["embedded_kafka"] else ""))
        for name, s in info["services"].items():
            _out(f"{name:10s} {s['endpoint']}  {'SERVING' if s['serving'] else 'NOT SERVING'}")
    ok = info["running"] and all(s["serving"] for s in info["services"].values())
    return 0 if ok else 1


def cmd_down(args: argparse.Namespace) -> int:
    from lsmlake.cli.cluster import down

    down(_warehouse_dir(args))
    _out("cluster stopped")
    return 0


def _message_key(doc: Any, keys: Sequence[str], debezium: bool) -> bytes | None:
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
    from lsmlake.kafka.client import configure_security, producer
    from lsmlake.kafka.security import KafkaSecurity
    from writer_svc.kafka_ingest import TOPIC_PREFIX

    services = _services(args)
    bootstrap = getattr(args, "kafka_target", None) or (services.kafka if services else None)
    if not bootstrap:
        raise UsageError("no Kafka: start a cluster with `lake up` or pass --kafka-bootstrap HOST:PORT")
    keys = list(_catalog(args).get_table(args.table).schema.primary_keys)
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
    _out(f"sent {len(lines):,} message(s) to {topic}")
    return 0


def cmd_expire(args: argparse.Namespace) -> int:
    services = _services(args)
    if services is not None:
        with _client(services, args) as client:
            r = client.expire(args.table, retain_min=args.retain_min, retain_max=args.retain_max,
                              older_than_ms=args.older_than_ms)
        expired = list(r.expired_snapshot_ids)
    else:
        from lsmlake.catalog.expire import expire_snapshots

        res = expire_snapshots(_catalog(args).get_table(args.table), retain_min=args.retain_min,
                               retain_max=args.retain_max, time_retained_ms=args.older_than_ms)
        expired = list(res.expired_snapshots)
    _out(f"expired {len(expired)} snapshot(s) of {args.table}" + (f": {expired}" if expired else ""))
    return 0


TIMELINE_KEYS = ("plan_id", "state", "buckets", "files", "output_level", "owner", "attempts", "age", "running",
                 "snapshot", "reason")


def _age(ms: float) -> str:
    s = max(0, int(ms // 1000))
    if s < 120:
        return f"{s}s"
    if s < 7200:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s // 3600}h{s % 3600 // 60:02d}m"


def timeline_records(store: Any, table_id: str, states: Sequence[str] | None, now_ms: int) -> list[dict[str, Any]]:
    """One record per compaction plan of a table, oldest first."""
    from lsmlake.proto_gen.lsmlake.v1 import catalog_pb2

    out = []
    for p in store.list_plans(table_id, states):
        units = catalog_pb2.CompactionPlan.FromString(p.detail).units if p.detail else []
        out.append({"plan_id": p.plan_id, "state": p.state, "buckets": len(units) or 1, "files": len(p.input_files),
                    "output_level": p.output_level, "owner": p.owner, "attempts": p.attempts,
                    "age": _age(now_ms - p.created_ms),
                    "running": _age(now_ms - p.started_ms) if p.state == "INFLIGHT" and p.started_ms else None,
                    "snapshot": p.snapshot_id, "reason": p.reason})
    return out


def cmd_timeline(args: argparse.Namespace) -> int:
    from lsmlake.metastore import PLAN_STATES, now_ms, open_store

    catalog = _catalog(args)
    catalog.get_table(args.table)  # a clear error for an unknown table
    url = args.metastore or os.environ.get("LSMLAKE_METASTORE")
    if not url:
        if not catalog.io.local:
            raise UsageError("a remote warehouse has no default metadata store: pass --metastore URL")
        url = f"sqlite:///{os.path.abspath(os.path.join(catalog.root, '_lsmlake_catalog.sqlite'))}"
        if not os.path.exists(url.removeprefix("sqlite:///")):
            raise CliError(f"no catalog metadata store in the warehouse ({url}): is the catalog service "
                           "running on it? pass --metastore URL")
    bad = [s for s in args.state or () if s not in PLAN_STATES]
    if bad:
        raise UsageError(f"unknown state(s) {bad}: use {', '.join(PLAN_STATES)}")
    with open_store(url) as store:
        records = timeline_records(store, args.table, args.state, now_ms())
    _print_records(records, TIMELINE_KEYS, args.format, ("plan_id", "buckets", "files", "output_level", "attempts",
                                                        "snapshot"))
    return 0


def cmd_delete(args: argparse.Namespace) -> int:
    table = _catalog(args).get_table(args.table)
    terms = []
    for key, text in args.where:
        t = table.schema.field(key).type
        try:
            value = pa.array([text], pa.string()).cast(to_arrow_type(t))[0].as_py()
        except _ARROW_ERRORS as e:
            raise CliError(f"--where {key}={text}: not a {t.sql()} value ({e})") from None
        terms.append((key, "=", value))
    result = table.delete_where(terms)
    if result is None:
        _out(f"no row of {args.table} matched: nothing deleted")
    else:
        _out(f"deleted the matching rows of {args.table} in snapshot {result.snapshot_id}")
    return 0


def cmd_changelog(args: argparse.Namespace) -> int:
    from lsmlake.mergetree.changelog import read_changelog

    table = _catalog(args).get_table(args.table)
    rows = read_changelog(table, args.from_snapshot, args.to_snapshot)
    _write_rows(iter([rows]), rows.schema, args.format, sys.stdout)
    return 0


def file_records(table: FileStoreTable, snapshot_id: int | None = None) -> list[dict[str, Any]]:
    """The live data files of a snapshot (default: the latest), sorted by partition, bucket, level."""
    snapshot = table.require_snapshot(snapshot_id) if snapshot_id is not None else table.latest_snapshot()
    if snapshot is None:
        return []
    schema = table.schema
    keys = list(schema.partition_keys)
    types = schema.types_of(keys)
    default_name = schema.table_options.get(opts.PARTITION_DEFAULT_NAME) or "__DEFAULT_PARTITION__"
    paths: dict[bytes, str] = {}
    deleted: dict[tuple[bytes, int, str], int] = {}
    for ie in table.indexes.read(snapshot.index_manifest):
        for r in ie.dv_ranges or ():
            deleted[(ie.partition, ie.bucket, r.file_name)] = r.cardinality or 0
    out = []
    for e in table.manifests.live(snapshot.base_manifest_list, snapshot.delta_manifest_list).values():
        if e.partition not in paths:
            values = table.partition_values(e.partition)
            paths[e.partition] = partition_path(values, keys, types, default_name) if keys else ""
        f = e.file
        out.append({"partition": paths[e.partition], "bucket": e.bucket, "file": f.file_name,
                    "level": f.level, "rows": f.row_count, "min_seq": f.min_sequence_number,
                    "max_seq": f.max_sequence_number, "size": f.file_size,
                    "schema_id": f.schema_id, "delete_rows": f.delete_row_count,
                    "dv_deleted": deleted.get((e.partition, e.bucket, f.file_name), 0)})
    out.sort(key=lambda r: (r["partition"], r["bucket"], r["level"], r["min_seq"], r["file"]))
    return out


def cmd_files(args: argparse.Namespace) -> int:
    table = _catalog(args).get_table(args.table)
    numeric = ("bucket", "level", "rows", "min_seq", "max_seq", "size", "schema_id", "delete_rows", "dv_deleted")
    _print_records(file_records(table, args.snapshot), FILE_KEYS, args.format, numeric)
    return 0


# ---------------------------------------------------------------------------------------------
# compact, levels
# ---------------------------------------------------------------------------------------------

def partition_filter(table: FileStoreTable, pairs: Sequence[tuple[str, str]]
                     ) -> dict[str, Any] | list[tuple[Any, ...]] | None:
    """`--partition KEY=VALUE` pairs -> a {column: value} mapping (None: no filter).

    Each value is parsed with its column's type: the string is cast as a one-element Arrow array.
    The table's partition default name stands for null (then `(column, op[, value])` terms).
    """
    if not pairs:
        return None
    schema = table.schema
    keys = list(schema.partition_keys)
    if not keys:
        raise CliError(f"table {table.identifier} is not partitioned: --partition cannot be used")
    default_name = schema.table_options.get(opts.PARTITION_DEFAULT_NAME) or "__DEFAULT_PARTITION__"
    values: dict[str, Any] = {}
    for key, text in pairs:
        if key not in keys:
            raise CliError(f"--partition {key}={text}: {key!r} is not a partition column of "
                           f"{table.identifier} (partition keys: {', '.join(keys)})")
        if key in values:
            raise UsageError(f"--partition {key}=... is given more than once")
        if text == default_name:
            values[key] = None
            continue
        t = schema.field(key).type
        try:
            values[key] = pa.array([text], pa.string()).cast(to_arrow_type(t))[0].as_py()
        except _ARROW_ERRORS as e:
            raise CliError(f"--partition {key}={text}: not a {t.sql()} value ({e})") from None
    if any(v is None for v in values.values()):
        return [(k, "is_null") if v is None else (k, "=", v) for k, v in values.items()]
    return values


def _plural(n: int, word: str) -> str:
    return f"{n:,} {word}{'' if n == 1 else 's'}"


def cmd_compact(args: argparse.Namespace) -> int:
    services = _services(args)
    if services is not None and services.compactor:
        with _client(services, args) as client:
            r = client.compact(args.table, full=args.full, wait=True, partition=dict(args.partition) or None)
        named = r.buckets_queued + r.buckets_elsewhere
        snaps = ", ".join(map(str, r.snapshot_ids)) or "none needed"
        _out(f"compacted {args.table} through the compactor service: {len(r.compacted):,} of "
             f"{_plural(named, 'bucket')} of snapshot {r.request_snapshot_id}, COMPACT snapshot(s) {snaps}")
        if r.not_compacted:
            _out(f"not compacted: {_plural(len(r.not_compacted), 'bucket')}")
            for n in r.not_compacted:
                where = "/".join(f"{k}={v}" for k, v in n.partition.items())
                _out(f"  {where + ' ' if where else ''}bucket {n.bucket}: {n.reason}")
        if r.timed_out and r.wait_limit_s is not None:
            _out(f"the compactor stopped waiting after {r.wait_limit_s:.1f} s (the call's deadline less a margin); "
                 "the buckets still queued are compacted later")
        return 0
    table = _catalog(args).get_table(args.table)
    partition = partition_filter(table, args.partition)
    result = compact_table(table, full=args.full, partition=partition)
    if result.snapshot_id is None:
        _out(f"nothing to compact in {args.table}")
        return 0
    before, after = _plural(result.files_before, "file"), _plural(result.files_after, "file")
    _out(f"compacted {args.table} in snapshot {result.snapshot_id}: {before} -> {after} "
         f"in {_plural(len(result.messages), 'bucket')}")
    return 0


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


class _JsonValues:
    """Python values of given column types (key or partition tuples) in their JSON form, as `lake scan`."""

    def __init__(self, types: Sequence[AnyType]) -> None:
        self.arrow_types = [to_arrow_type(t) for t in types]

    def __call__(self, values: Sequence[Any]) -> list[Any]:
        out: list[Any] = []
        for v, t in zip(values, self.arrow_types, strict=True):
            try:
                out.append(json_values(pa.array([v], type=t))[0])
            except _ARROW_ERRORS:
                out.append(str(v))
        return out


BucketLevels = tuple[str, int, Levels]  # (partition, bucket, levels)


def bucket_levels(table: FileStoreTable, snapshot_id: int | None = None) -> list[BucketLevels]:
    """The levels of every bucket of a snapshot (default: the latest), by partition and bucket.

    The partition is `key=value/...` with the values as `lake scan` prints them (a DATE as
    2024-01-31, null as the partition default name): the form `lake compact --partition` takes.
    """
    snapshot = table.require_snapshot(snapshot_id) if snapshot_id is not None else table.latest_snapshot()
    if snapshot is None:
        return []
    schema = table.schema
    keys = list(schema.partition_keys)
    as_json = _JsonValues(schema.types_of(keys))
    default_name = schema.table_options.get(opts.PARTITION_DEFAULT_NAME) or "__DEFAULT_PARTITION__"
    out = []
    for split in table.new_scan(None, snapshot, all_levels=True).plan():
        shown = [default_name if v is None else _cell(v) for v in as_json(split.partition_values)]
        name = "/".join(f"{k}={v}" for k, v in zip(keys, shown, strict=True))
        out.append((name, split.bucket, restore_levels(table, split)))
    out.sort(key=lambda b: (b[0], b[1]))
    return out


def _bucket_records(table: FileStoreTable, bucket: BucketLevels) -> list[dict[str, Any]]:
    """One record per file of a bucket, run by run, newest run first (level-0 files one by one, then
    levels 1, 2, ...), the files of a run in key order."""
    partition, number, levels = bucket
    keyed = table.schema.is_primary_key_table
    as_json = _JsonValues(table.schema.types_of(table.schema.trimmed_primary_keys))
    out = []
    for run, r in enumerate(levels.level_sorted_runs(), start=1):
        for f in r.run.files:
            lo, hi = levels.keys.range(f) if keyed else ((), ())
            out.append({"partition": partition, "bucket": number, "level": r.level, "run": run,
                        "file": f.file_name, "size": f.file_size, "rows": f.row_count,
                        "min_key": as_json(lo), "max_key": as_json(hi),
                        "min_seq": f.min_sequence_number, "max_seq": f.max_sequence_number})
    return out


def level_records(table: FileStoreTable, buckets: Sequence[BucketLevels]) -> list[dict[str, Any]]:
    return [r for b in buckets for r in _bucket_records(table, b)]


def _key_text(key: Sequence[Any]) -> str:
    cells = [_cell(v) for v in key]
    return cells[0] if len(cells) == 1 else "(" + ", ".join(cells) + ")"


def print_levels(table: FileStoreTable, buckets: Sequence[BucketLevels], out: IO[str]) -> None:
    """The text picture of `lake levels`: per bucket a header, then a line per file, aligned throughout."""
    if not buckets:
        out.write("no data files\n")
        return
    keyed = table.schema.is_primary_key_table
    stop_trigger = table.options.stop_trigger()
    blocks: list[tuple[list[str], list[list[str]]]] = []
    for bucket in buckets:
        partition, number, levels = bucket
        runs = levels.number_of_sorted_runs()
        where = f"{partition} bucket {number}" if partition else f"bucket {number}"
        counted = _plural(runs, "sorted run") if keyed else _plural(len(levels.all_files()), "file")
        header = [f"{where}: {counted}, highest level {levels.non_empty_highest_level()} "
                  f"(max {levels.max_level}), {human_size(levels.total_size())}"]
        if keyed and runs > stop_trigger:
            header.append(f"  STALL: {runs} sorted runs > stop trigger {stop_trigger}; "
                          "writers wait for compaction (run `lake compact`)")
        # cells: level, run, file, size, rows, [keys,] seq
        rows: list[list[str]] = []
        last_level = last_run = None
        for r in _bucket_records(table, bucket):
            cells = [f"L{r['level']}" if r["level"] != last_level else "",
                     f"run {r['run']}:" if r["run"] != last_run else "",
                     r["file"], human_size(r["size"]), _plural(r["rows"], "row")]
            if keyed:
                cells.append(f"keys [{_key_text(r['min_key'])} .. {_key_text(r['max_key'])}]")
            cells.append(f"seq {r['min_seq']}-{r['max_seq']}")
            rows.append(cells)
            last_level, last_run = r["level"], r["run"]
        blocks.append((header, rows))
    all_rows = [r for _, rows in blocks for r in rows]
    widths = [max(len(r[i]) for r in all_rows) for i in range(len(all_rows[0]) if all_rows else 0)]
    for header, rows in blocks:
        for h in header:
            out.write(h + "\n")
        for r in rows:
            cells = [c.rjust(w) if i in (3, 4) else c.ljust(w)  # size and rows to the right
                     for i, (c, w) in enumerate(zip(r, widths, strict=True))]
            out.write(f"  {cells[0]}  {cells[1]} {'  '.join(cells[2:])}".rstrip() + "\n")


def cmd_levels(args: argparse.Namespace) -> int:
    table = _catalog(args).get_table(args.table)
    buckets = bucket_levels(table, args.snapshot)
    if args.format == "jsonl":
        _print_records(level_records(table, buckets), LEVEL_KEYS, "jsonl")
    else:
        print_levels(table, buckets, sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main())
