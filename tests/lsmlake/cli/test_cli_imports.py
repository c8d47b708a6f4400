"""What `lake` imports: a command loads its own dependencies when it runs, so that `lake --help` and a
`table list` start at once (no gRPC, Spark or Arrow for help; no gRPC or Spark for a listing).

Each case runs `main` in a fresh interpreter and reads back `sys.modules` as it was when `main` returned.
"""

from __future__ import annotations

import argparse
import importlib
import json
import subprocess
import sys
from pathlib import Path

import pytest

from lsmlake.catalog.filesystem import FileSystemCatalog
from lsmlake.cli.commands import Command
from lsmlake.cli.parser import build_parser

# `main(argv)`, then the sorted module names as the last line of stdout (the command's output comes before it).
_RUN = ("import json, sys\n"
        "from lsmlake.cli.main import main\n"
        "code = main(sys.argv[1:])\n"
        "sys.stdout.write('\\n' + json.dumps(sorted(sys.modules)) + '\\n')\n"
        "sys.exit(code)\n")

#: never needed to parse arguments or to list tables: the gRPC client, Spark, object-store clients
HEAVY = ("grpc", "google.protobuf", "pyspark", "obstore", "boto3", "botocore")
#: needed to read a warehouse (its FileIO is pyarrow's), not to show help
ARROW = ("pyarrow", "numpy")


def _run(*argv: str) -> tuple[int, str, set[str]]:
    done = subprocess.run([sys.executable, "-c", _RUN, *argv], capture_output=True, text=True, timeout=120,
                          env={"PATH": "/usr/bin:/bin", "HOME": str(Path.home())})
    assert "Traceback" not in done.stderr, done.stderr
    out, _, modules = done.stdout.rstrip("\n").rpartition("\n")
    return done.returncode, out.removesuffix("\n"), set(json.loads(modules))


def _loaded(modules: set[str], roots: tuple[str, ...]) -> list[str]:
    return sorted(m for m in modules if any(m == r or m.startswith(r + ".") for r in roots))


@pytest.fixture(scope="module")
def warehouse(tmp_path_factory: pytest.TempPathFactory) -> str:
    wh = str(tmp_path_factory.mktemp("wh"))
    catalog = FileSystemCatalog(wh)
    catalog.create_database("db")
    catalog.create_table("db.orders", "id BIGINT NOT NULL, v STRING", primary_keys=["id"], options={"bucket": "1"})
    return wh


@pytest.mark.parametrize("argv", [["--help"], ["table", "--help"], ["table", "list", "--help"], ["scan", "--help"],
                                  ["up", "--help"], ["--version"]])
def test_help_imports_no_command_and_no_arrow(argv: list[str]) -> None:
    code, out, modules = _run(*argv)
    assert code == 0
    assert out.startswith("usage: lake") or out.startswith("lake (lsmlake)")
    assert _loaded(modules, HEAVY + ARROW) == []
    assert _loaded(modules, ("lsmlake.cli.commands",)) == ["lsmlake.cli.commands"]


def test_usage_error_imports_nothing_heavy() -> None:
    code, _, modules = _run("scan", "db.t", "--format", "xml")
    assert code == 2
    assert _loaded(modules, HEAVY + ARROW) == []


def test_table_list_imports_its_command_only(warehouse: str) -> None:
    code, out, modules = _run("--warehouse", warehouse, "table", "list", "db")
    assert (code, out) == (0, "table\n------\norders")
    assert _loaded(modules, HEAVY) == []
    assert _loaded(modules, ("lsmlake.cli.commands",)) == ["lsmlake.cli.commands", "lsmlake.cli.commands.table"]
    # the services' client is imported only when there is a cluster to talk to
    assert _loaded(modules, ("lsmlake.cli.remote_backend", "lsmlake.client", "lsmlake.rpc.catalog_client")) == []


def test_table_list_error_still_imports_nothing_heavy(warehouse: str) -> None:
    code, out, modules = _run("--warehouse", warehouse, "table", "list", "nodb")
    assert (code, out) == (1, "")
    assert _loaded(modules, HEAVY) == []


def _commands(parser: argparse.ArgumentParser, path: tuple[str, ...] = ()) -> dict[tuple[str, ...], object]:
    """Every command the parser names -> its `func` default (walking nested sub-commands such as `table list`)."""
    found: dict[tuple[str, ...], object] = {}
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                found |= _commands(sub, (*path, name))
    if path and not found:
        found[path] = parser.get_default("func")
    return found


def test_every_command_the_parser_names_exists() -> None:
    """A command's module is imported only when it runs: a misspelt name must fail here, not in a user's hands."""
    commands = _commands(build_parser())
    assert ("table", "list") in commands and ("scan",) in commands and ("up",) in commands
    for path, func in commands.items():
        assert isinstance(func, Command), path
        module = importlib.import_module(f"lsmlake.cli.commands.{func.module}")
        assert callable(getattr(module, func.function, None)), path
