"""`--where` of `lake scan` and `lake delete` takes the predicate language (AND, OR, parentheses, = != < <= > >=,
IN, IS [NOT] NULL): each gives the rows of a plain-Python filter of the same table, locally and planned by a
catalog service."""

from __future__ import annotations

import contextlib
import io
import json
import random
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lsmlake.catalog.filesystem import FileSystemCatalog
from lsmlake.cli import main as cli
from tests.lsmlake.cli.conftest import Lake
from tests.support.local_server import local_server

Row = dict[str, Any]
Test = Callable[[Row], bool]

COLUMNS = {"id": [None, *range(-3, 12)], "dt": ["a", "b", "c"], "n": [None, 0, 1, 2, 5], "s": [None, "x", "y", "it's"]}


def table_rows(seed: int = 7) -> list[Row]:
    rnd = random.Random(seed)
    return [{c: rnd.choice(vs) for c, vs in COLUMNS.items()} for _ in range(60)]


def csv_cell(v: Any) -> str:
    if v is None:
        return ""
    return '"' + v.replace('"', '""') + '"' if isinstance(v, str) else str(v)


def run(warehouse: Path, *args: str) -> str:
    """`lake --warehouse WAREHOUSE ARGS...` in-process; its stdout (it must succeed)."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = cli.main(["--warehouse", str(warehouse), *args])
    assert code == 0, err.getvalue()
    return out.getvalue()


def create_table(warehouse: Path, name: str, rows: list[Row], *options: str) -> None:
    run(warehouse, "table", "create", name, "--schema", "id BIGINT, dt STRING, n INT, s STRING",
        "--partition-key", "dt", *options)
    for part in range(3):  # several files per partition: the planner prunes some
        path = warehouse.parent / f"{name}-{part}.csv"
        path.write_text("id,dt,n,s\n" + "".join(",".join(csv_cell(r[c]) for c in COLUMNS) + "\n"
                                                for r in rows[part::3]))
        run(warehouse, "write", name, str(path))


def jsonl(text: str) -> list[Row]:
    return sorted((json.loads(line) for line in text.splitlines()), key=key)


def expected(rows: list[Row], test: Test) -> list[Row]:
    return sorted((r for r in rows if test(r)), key=key)


def literal(column: str, v: Any) -> str:
    return "'" + v.replace("'", "''") + "'" if isinstance(v, str) else str(v)


@st.composite
def terms(draw: st.DrawFn) -> tuple[str, Test]:
    column = draw(st.sampled_from(sorted(COLUMNS)))
    values = [v for v in COLUMNS[column] if v is not None]
    op = draw(st.sampled_from(["=", "!=", "<", "<=", ">", ">=", "IN", "IS NULL", "IS NOT NULL"]))
    if op == "IS NULL":
        return f"{column} IS NULL", lambda r: r[column] is None
    if op == "IS NOT NULL":
        return f"{column} IS NOT NULL", lambda r: r[column] is not None
    if op == "IN":
        chosen = draw(st.lists(st.sampled_from(values), min_size=1, max_size=3))
        return (f"{column} IN ({', '.join(literal(column, v) for v in chosen)})",
                lambda r: r[column] is not None and r[column] in chosen)
    v = draw(st.sampled_from(values))
    compare = {"=": lambda a, b: a == b, "!=": lambda a, b: a != b, "<": lambda a, b: a < b,
               "<=": lambda a, b: a <= b, ">": lambda a, b: a > b, ">=": lambda a, b: a >= b}[op]
    # SQL: a comparison with null is not true, so the row is left out
    return f"{column} {op} {literal(column, v)}", lambda r: r[column] is not None and compare(r[column], v)


def combined(children: st.SearchStrategy[tuple[str, Test]]) -> st.SearchStrategy[tuple[str, Test]]:
    def join(word: str, parts: list[tuple[str, Test]]) -> tuple[str, Test]:
        text = f" {word} ".join(f"({t})" for t, _ in parts)
        tests = [f for _, f in parts]
        return text, ((lambda r: all(f(r) for f in tests)) if word == "AND" else (lambda r: any(f(r) for f in tests)))
    return st.tuples(st.sampled_from(["AND", "OR"]), st.lists(children, min_size=2, max_size=3)).map(
        lambda wp: join(*wp))


predicates = st.recursive(terms(), combined, max_leaves=5)


def key(r: Row) -> tuple[Any, ...]:
    return tuple((v is None, v if v is not None else 0) for v in (r["id"], r["dt"], r["n"], r["s"]))


ROWS = table_rows()


@pytest.fixture(scope="module")
def warehouse(tmp_path_factory: pytest.TempPathFactory) -> Path:
    wh = tmp_path_factory.mktemp("where") / "warehouse"
    create_table(wh, "db.t", ROWS)
    return wh


@settings(max_examples=60, deadline=None)
@given(predicate=predicates)
def test_scan_where_gives_the_rows_of_a_python_filter(warehouse: Path, predicate: tuple[str, Test]) -> None:
    text, test = predicate
    assert jsonl(run(warehouse, "scan", "db.t", "--where", text)) == expected(ROWS, test), text


@settings(max_examples=20, deadline=None)
@given(first=predicates, second=predicates)
def test_several_wheres_are_anded(warehouse: Path, first: tuple[str, Test], second: tuple[str, Test]) -> None:
    got = jsonl(run(warehouse, "scan", "db.t", "--where", first[0], "--where", second[0]))
    assert got == expected(ROWS, lambda r: first[1](r) and second[1](r))


def test_where_with_partition_columns_and_projection(warehouse: Path) -> None:
    text = "dt = 'b' AND (id < 3 OR id IS NULL)"
    got = jsonl(run(warehouse, "scan", "db.t", "--where", text, "--partition", "dt=b"))
    assert got == expected(ROWS, lambda r: r["dt"] == "b" and (r["id"] is None or r["id"] < 3))
    ids = [json.loads(x) for x in run(warehouse, "scan", "db.t", "--where", "s = 'it''s'", "--columns", "id")
           .splitlines()]
    assert sorted(ids, key=lambda r: (r["id"] is None, r["id"] or 0)) == sorted(
        ({"id": r["id"]} for r in ROWS if r["s"] == "it's"), key=lambda r: (r["id"] is None, r["id"] or 0))


def test_a_bad_where_names_the_problem(lake: Lake, tmp_path: Path) -> None:
    create_table(lake.warehouse, "db.u", ROWS[:5])
    assert "--where 'nope = 1'" in lake.fails("scan", "db.u", "--where", "nope = 1")
    assert "--where 'id <'" in lake.fails("scan", "db.u", "--where", "id <")


def test_through_a_catalog_service_the_catalog_plans_with_the_predicate(warehouse: Path) -> None:
    text = "(dt = 'a' OR dt = 'c') AND n >= 1"
    with local_server(str(warehouse)) as cat:
        got = jsonl(run(warehouse, "--catalog-service", f"127.0.0.1:{cat.server.port}", "scan", "db.t",
                        "--where", text, "--where", "id IS NOT NULL"))
    assert got == expected(ROWS, lambda r: r["dt"] in ("a", "c") and r["n"] is not None and r["n"] >= 1
                           and r["id"] is not None)
    assert got  # the filter keeps some rows: the comparison means something


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(predicate=predicates)
def test_delete_where_deletes_the_rows_of_a_python_filter(tmp_path_factory: pytest.TempPathFactory,
                                                          predicate: tuple[str, Test]) -> None:
    text, test = predicate
    wh = tmp_path_factory.mktemp("delete") / "warehouse"
    create_table(wh, "db.d", ROWS, "--option", "deletion-vectors.enabled=true")
    run(wh, "delete", "db.d", "--where", text)
    left = sorted(FileSystemCatalog(str(wh)).get_table("db.d").to_arrow().to_pylist(), key=key)
    assert left == expected(ROWS, lambda r: not test(r)), text
