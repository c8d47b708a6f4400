"""The argument parser of `lake`: its commands, their options, and the command each one runs.

A command is named (`commands.Command`), not imported: building the parser loads no command's dependencies.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from typing import Any, NoReturn

from lsmlake.cli import help_text as h
from lsmlake.cli.arguments import (
    ChangeAction,
    add_column,
    key_value,
    non_negative,
    positive,
    positive_seconds,
    remove_option,
    rename_column,
    set_option,
    table_option,
)
from lsmlake.cli.cluster import ENV_STATE_DIR
from lsmlake.cli.commands import Command
from lsmlake.cli.formats import FORMAT_HELP, RECORD_FORMATS
from lsmlake.cli.suggest import invalid_choice, unknown_flags
from lsmlake.cli.warehouse import ENV_WAREHOUSE
from lsmlake.rpc.security import ChannelSecurity

PROG = "lake"


class _Parser(argparse.ArgumentParser):
    """Reports usage errors as `lake: error: <message>` (exit code 2).

    Arguments no parser knows are reported by the command's own parser, with its usage and the closest flags it
    has: argparse would report them from the top, with the usage of `lake` itself.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.commands: dict[tuple[str, ...], argparse.ArgumentParser] = {}  # set on the top parser only

    def error(self, message: str) -> NoReturn:
        self.print_usage(sys.stderr)
        self.exit(2, f"{PROG}: error: {invalid_choice(message)}\n")

    def parse_args(self, args: Sequence[str] | None = None,  # type: ignore[override]
                   namespace: argparse.Namespace | None = None) -> argparse.Namespace:
        parsed, extras = self.parse_known_args(args, namespace)
        if extras:
            path = tuple(p for p in (getattr(parsed, "command", None), getattr(parsed, "action", None)) if p)
            self.commands.get(path, self).error(unknown_flags(self.commands.get(path, self), extras))
        return parsed


class _Version(argparse.Action):
    """`--version`: prints the installed version, looked up only then (importlib.metadata is slow to import)."""

    def __init__(self, option_strings: Sequence[str], dest: str = argparse.SUPPRESS,
                 default: str = argparse.SUPPRESS, help: str = "show program's version number and exit") -> None:
        super().__init__(option_strings=option_strings, dest=dest, default=default, nargs=0, help=help)

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any,
                 option_string: str | None = None) -> None:
        print(f"{PROG} (lsmlake) {_version()}")
        parser.exit()


def _version() -> str:
    try:
        from importlib.metadata import version
        return version("lsmlake")
    except Exception:
        return "unknown"


def build_parser() -> _Parser:
    fmt = argparse.RawDescriptionHelpFormatter
    parser = _Parser(prog=PROG, description="Create, write and read tables in the Apache Paimon format.",
                     epilog=h.MAIN_EPILOG, formatter_class=fmt, allow_abbrev=False)
    parser.add_argument("--version", action=_Version)
    parser.add_argument("--warehouse", metavar="DIR", default=None,
                        help=f"the warehouse folder or URI (default: ${ENV_WAREHOUSE})")
    for name, env in (("catalog", "LAKE_CATALOG"), ("writer", "LAKE_WRITER"), ("compactor", "LAKE_COMPACTOR"),
                      ("kafka", "LAKE_KAFKA")):
        parser.add_argument(f"--{name}-service" if name != "kafka" else "--kafka-bootstrap", dest=f"{name}_target",
                            metavar="HOST:PORT", default=os.environ.get(env),
                            help=f"the {name} {'service' if name != 'kafka' else 'bootstrap'} (default: ${env}, "
                                 "else the cluster `lake up` runs on the warehouse)")
    state_help = (f"the local folder of the cluster's state for an object-store warehouse (default: ${ENV_STATE_DIR}, "
                  "else ~/.lake/clusters/<bucket and prefix>); a folder warehouse keeps it in <warehouse>/.lake")
    parser.add_argument("--state-dir", metavar="DIR", default=None, help=state_help)
    ChannelSecurity.add_arguments(parser, os.environ, "", "LAKE_", "the services")
    # Every command also accepts --warehouse and --state-dir after its name.
    common = _Parser(add_help=False, allow_abbrev=False)
    common.add_argument("--warehouse", metavar="DIR", default=argparse.SUPPRESS,
                        help=f"the warehouse folder or URI (default: ${ENV_WAREHOUSE})")
    common.add_argument("--state-dir", metavar="DIR", default=argparse.SUPPRESS, help=state_help)

    def sub(group: Any, name: str, help_: str, epilog: str) -> argparse.ArgumentParser:
        p: argparse.ArgumentParser = group.add_parser(name, help=help_, description=help_, epilog=epilog,
                                                      parents=[common], formatter_class=fmt,
                                                      allow_abbrev=False)
        path = tuple(p.prog.split()[1:])
        parser.commands[path] = p
        return p

    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    _table_commands(commands, sub, fmt)
    _other_commands(commands, sub)
    return parser


Sub = Any  # the `sub` helper of build_parser: (group, name, help, epilog) -> parser


def _table_commands(commands: Any, sub: Sub, fmt: type[argparse.HelpFormatter]) -> None:
    table = commands.add_parser("table", help="create, list, describe, alter or drop tables",
                                description="Create, list, describe, alter or drop tables.",
                                epilog=h.TABLE_EPILOG, formatter_class=fmt,
                                allow_abbrev=False)
    actions = table.add_subparsers(dest="action", metavar="ACTION", required=True)

    p = sub(actions, "create", "create a table (and its database if needed)", h.CREATE_EPILOG)
    p.add_argument("table", metavar="DB.TABLE")
    p.add_argument("--schema", required=True, metavar="COLUMNS",
                   help='column definitions, e.g. "id BIGINT NOT NULL, dt STRING, v DECIMAL(10,2)"')
    p.add_argument("--primary-key", action="append", metavar="COLS",
                   help="comma-separated primary key columns")
    p.add_argument("--partition-key", action="append", metavar="COLS",
                   help="comma-separated partition columns")
    p.add_argument("--option", action="append", type=table_option, default=[], metavar="KEY=VALUE",
                   help="a table option such as bucket=4 (repeatable; the options: docs/options.md)")
    p.add_argument("--comment", help="a table comment")
    p.add_argument("--if-not-exists", action="store_true", help="do nothing if the table exists")
    p.set_defaults(func=Command("table", "cmd_table_create"))

    p = sub(actions, "list", "list the tables of a database", h.LIST_EPILOG)
    p.add_argument("database", metavar="DB")
    p.add_argument("--format", choices=RECORD_FORMATS, default="table", help=FORMAT_HELP)
    p.set_defaults(func=Command("table", "cmd_table_list"))

    p = sub(actions, "describe", "show the columns, keys and options of a table", h.DESCRIBE_EPILOG)
    p.add_argument("table", metavar="DB.TABLE")
    p.add_argument("--format", choices=("table", "jsonl", "json"), default="table", help="default: table")
    p.set_defaults(func=Command("table", "cmd_table_describe"))

    p = sub(actions, "alter", "add or rename columns, set or remove options", h.ALTER_EPILOG)
    p.add_argument("table", metavar="DB.TABLE")
    p.add_argument("--add-column", action=ChangeAction, type=add_column, dest="changes", metavar="'NAME TYPE'",
                   help='append a nullable column, e.g. "coupon STRING" (repeatable)')
    p.add_argument("--rename-column", action=ChangeAction, type=rename_column, dest="changes", metavar="OLD=NEW",
                   help="rename a column (repeatable)")
    p.add_argument("--set", action=ChangeAction, type=set_option, dest="changes", metavar="KEY=VALUE",
                   help="set a table option (repeatable)")
    p.add_argument("--remove", action=ChangeAction, type=remove_option, dest="changes", metavar="KEY",
                   help="remove a table option (repeatable)")
    p.set_defaults(func=Command("table", "cmd_table_alter"), changes=None)

    p = sub(actions, "drop", "delete a table and all its data", h.DROP_EPILOG)
    p.add_argument("table", metavar="DB.TABLE")
    p.add_argument("--if-exists", action="store_true", help="do nothing if the table does not exist")
    p.set_defaults(func=Command("table", "cmd_table_drop"))


def _other_commands(commands: Any, sub: Sub) -> None:
    """Every command but `table`, in the order `lake --help` lists them."""
    p = sub(commands, "write", "write rows from files as one commit (through a cluster too)", h.WRITE_EPILOG)
    p.add_argument("table", metavar="DB.TABLE")
    p.add_argument("files", nargs="+", metavar="FILE", help="input files; '-' reads stdin")
    p.add_argument("--input-format", choices=("parquet", "csv", "jsonl", "json"),
                   help="the format of every input (required for '-'; default: from the extension)")
    p.add_argument("--request-id", metavar="ID",
                   help="name this write (through a cluster): the same command run again writes the rows once "
                        "(after a success it finds the first run's snapshot)")
    p.set_defaults(func=Command("write", "cmd_write"))

    p = sub(commands, "scan", "read the rows of a table", h.SCAN_EPILOG)
    p.add_argument("table", metavar="DB.TABLE")
    p.add_argument("--snapshot", type=non_negative, metavar="N",
                   help="read snapshot N (default: the latest)")
    p.add_argument("--format", choices=("jsonl", "csv", "parquet", "table"), default="jsonl",
                   help="default: jsonl")
    p.add_argument("--output", metavar="FILE", help="write to FILE instead of stdout (required for parquet)")
    p.add_argument("--columns", action="append", metavar="COLS", help="comma-separated columns to read")
    p.add_argument("--limit", type=non_negative, metavar="N", help="at most N rows")
    p.add_argument("--where", action="append", default=[], metavar="PREDICATE",
                   help="only rows where PREDICATE holds, e.g. \"dt = '2024-01-01' AND (id < 3 OR id IS NULL)\" "
                        "(repeatable: all must hold)")
    p.add_argument("--partition", action="append", type=key_value, default=[], metavar="KEY=VALUE",
                   help="only the partitions where column KEY equals VALUE (repeatable); an error if none exists")
    p.set_defaults(func=Command("read", "cmd_scan"))

    p = sub(commands, "snapshots", "list the snapshots of a table", h.SNAPSHOTS_EPILOG)
    p.add_argument("table", metavar="DB.TABLE")
    p.add_argument("--format", choices=RECORD_FORMATS, default="jsonl", help="default: jsonl; " + FORMAT_HELP)
    p.set_defaults(func=Command("read", "cmd_snapshots"))

    p = sub(commands, "delete", "delete rows of an append table through deletion vectors", h.DELETE_EPILOG)
    p.add_argument("table", metavar="DB.TABLE")
    p.add_argument("--where", action="append", default=[], metavar="PREDICATE", required=True,
                   help="delete the rows where PREDICATE holds: COLUMN=VALUE, or e.g. \"day = '2024-01-01' AND "
                        "(id < 3 OR id IS NULL)\" (repeatable: all must hold)")
    p.set_defaults(func=Command("write", "cmd_delete"))

    p = sub(commands, "changelog", "print the changelog rows committed by a range of snapshots",
            h.CHANGELOG_EPILOG)
    p.add_argument("table", metavar="DB.TABLE")
    p.add_argument("--from-snapshot", type=non_negative, default=1, metavar="N",
                   help="first snapshot (default: 1, or the earliest retained one)")
    p.add_argument("--to-snapshot", type=non_negative, metavar="M", help="last snapshot (default: the latest)")
    p.add_argument("--format", choices=("jsonl", "csv", "table"), default="jsonl", help="default: jsonl")
    p.set_defaults(func=Command("read", "cmd_changelog"))

    p = sub(commands, "files", "list the live data files of a table", h.FILES_EPILOG)
    p.add_argument("table", metavar="DB.TABLE")
    p.add_argument("--snapshot", type=non_negative, metavar="N",
                   help="files of snapshot N (default: the latest)")
    p.add_argument("--format", choices=RECORD_FORMATS, default="jsonl", help="default: jsonl; " + FORMAT_HELP)
    p.set_defaults(func=Command("read", "cmd_files"))

    p = sub(commands, "compact", "compact the data files of a table into one COMPACT snapshot",
            h.COMPACT_EPILOG)
    p.add_argument("table", metavar="DB.TABLE")
    p.add_argument("--full", action="store_true",
                   help="full compaction: every bucket into one sorted run on the highest level")
    p.add_argument("--partition", action="append", type=key_value, default=[], metavar="KEY=VALUE",
                   help="compact only the partitions where column KEY equals VALUE (repeatable)")
    p.add_argument("--timeout", type=positive_seconds, metavar="SECONDS", default=None,
                   help="through a cluster: how long to wait for the compactor (default: 60); buckets not done by "
                        "then are compacted later")
    p.set_defaults(func=Command("compaction", "cmd_compact"))

    p = sub(commands, "rescale", "change the bucket count of a postpone-bucket table's partitions",
            h.RESCALE_EPILOG)
    p.add_argument("table", metavar="DB.TABLE")
    p.add_argument("--buckets", type=positive, required=True, metavar="N", help="the new bucket count")
    p.add_argument("--partition", action="append", type=key_value, default=[], metavar="KEY=VALUE",
                   help="rescale only the partitions where column KEY equals VALUE (repeatable)")
    p.set_defaults(func=Command("compaction", "cmd_rescale"))

    p = sub(commands, "produce", "send rows or change events to a table's Kafka ingest topic", h.PRODUCE_EPILOG)
    p.add_argument("table", metavar="DB.TABLE")
    p.add_argument("files", nargs="+", metavar="FILE", help="JSON lines: one message per line ('-' for stdin)")
    p.add_argument("--format", choices=("json", "debezium"), default="json",
                   help="what the lines are: plain JSON rows (default) or Debezium change events")
    p.set_defaults(func=Command("write", "cmd_produce"))

    p = sub(commands, "expire", "expire old snapshots of a table (and the files only they use)", "")
    p.add_argument("table", metavar="DB.TABLE")
    p.add_argument("--retain-max", type=non_negative, metavar="N", help="keep at most N snapshots")
    p.add_argument("--retain-min", type=non_negative, metavar="N", help="keep at least N snapshots")
    p.add_argument("--older-than-ms", type=non_negative, metavar="MS",
                   help="expire snapshots older than this (within the two limits)")
    p.set_defaults(func=Command("read", "cmd_expire"))

    iceberg = commands.add_parser("iceberg", help="publish a table's Iceberg metadata (docs/iceberg.md)",
                                  description="Publish a table's Iceberg metadata, so Iceberg engines read it.",
                                  allow_abbrev=False)
    actions = iceberg.add_subparsers(dest="action", metavar="ACTION", required=True)
    p = sub(actions, "sync", "publish the Iceberg metadata of the table's latest snapshot (also for a table "
                             "without metadata.iceberg.storage)", "")
    p.add_argument("table", metavar="DB.TABLE")
    p.set_defaults(func=Command("read", "cmd_iceberg_sync"))

    p = sub(commands, "up", "start the whole cluster on this machine (foreground; Ctrl-C stops it)", h.UP_EPILOG)
    p.add_argument("--kafka", metavar="HOST:PORT", help="use this Kafka instead of the embedded broker")
    p.add_argument("--catalog-port", type=int, default=50051, help="default: 50051")
    p.add_argument("--writer-port", type=int, default=50052, help="default: 50052")
    p.add_argument("--compactor-port", type=int, default=50053, help="default: 50053")
    p.add_argument("--rest-port", type=int, default=None,
                   help="port of the catalog's Paimon REST catalog API (metastore=rest); 0: a free one; "
                        "default: 8181, or a free one when 8181 is in use")
    p.add_argument("--ui-port", type=int, default=None,
                   help="port of the catalog's web console (tables by health, buckets, compaction timeline); "
                        "0: a free one; default: 8080, or a free one when 8080 is in use")
    p.add_argument("--no-compactor", action="store_true", help="start no compactor (no Spark)")
    p.add_argument("--spark-master", default="local[*]", help="default: local[*]")
    p.add_argument("--commit-interval", type=float, default=1.0, help="writer group-commit interval, seconds")
    p.add_argument("--ingest", action="append", default=[], metavar="DB.TABLE[:FORMAT]",
                   help="consume lake.ingest.DB.TABLE (json or debezium) into the table (repeatable)")
    p.add_argument("--s3", action="store_true",
                   help="start a local S3 server (moto) and run on an s3:// warehouse in it (default: "
                        "s3://lake/warehouse); its objects live in memory until the cluster stops")
    p.add_argument("--metastore", metavar="URL", default=None,
                   help="the catalog's metastore (sqlite:///PATH or postgresql://...); default: a SQLite file in "
                        "the warehouse folder, or in the state folder for an object-store warehouse")
    p.set_defaults(func=Command("cluster", "cmd_up"))

    p = sub(commands, "status", "show the cluster that `lake up` runs on this warehouse", "")
    p.add_argument("--format", choices=("table", "json"), default="table", help="default: table")
    p.set_defaults(func=Command("cluster", "cmd_status"))

    p = sub(commands, "down", "stop the cluster that `lake up` runs on this warehouse", "")
    p.set_defaults(func=Command("cluster", "cmd_down"))

    p = sub(commands, "health", "rank tables by compaction health: lag, sorted runs, plans", h.HEALTH_EPILOG)
    p.add_argument("table", metavar="DB.TABLE", nargs="?", help="one table (default: every table)")
    p.add_argument("--database", metavar="DB", help="the tables of one database")
    p.add_argument("--metastore", metavar="URL", default=None,
                   help="the catalog's metadata store, for the plans (default: $LSMLAKE_METASTORE, else the "
                        "warehouse's SQLite file if there is one)")
    p.add_argument("--format", choices=RECORD_FORMATS, default="table", help=FORMAT_HELP)
    p.set_defaults(func=Command("compaction", "cmd_health"))

    p = sub(commands, "timeline", "list the compaction plans of a table and their states", h.TIMELINE_EPILOG)
    p.add_argument("table", metavar="DB.TABLE")
    p.add_argument("--metastore", metavar="URL", default=None,
                   help="the catalog's metadata store (default: $LSMLAKE_METASTORE, else that of the cluster `lake up` "
                        "runs on the warehouse, else the warehouse's SQLite file)")
    p.add_argument("--state", action="append", default=None, metavar="STATE", type=str.upper,
                   help="only plans in this state (repeatable)")
    p.add_argument("--format", choices=RECORD_FORMATS, default="table", help=FORMAT_HELP)
    p.set_defaults(func=Command("compaction", "cmd_timeline"))

    p = sub(commands, "levels", "show the LSM levels and sorted runs of every bucket", h.LEVELS_EPILOG)
    p.add_argument("table", metavar="DB.TABLE")
    p.add_argument("--snapshot", type=non_negative, metavar="N",
                   help="levels of snapshot N (default: the latest)")
    p.add_argument("--format", choices=RECORD_FORMATS, default="table",
                   help="table: a text picture per bucket (default); jsonl, csv, json: one record per file")
    p.set_defaults(func=Command("compaction", "cmd_levels"))
