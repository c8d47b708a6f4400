"""Property: `Client.scan(where=...)` with a random predicate, in a random one of its forms (text, Predicate,
(column, op, value) tuples, a {column: value} mapping), gives exactly the rows a plain-Python filter of the table
keeps, with SQL's NULL rules (a comparison with NULL is false). The table has two partitions, four buckets and
updated keys, so the catalog's pruning and the reader's merge are both on the path."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lsmlake import Client
from lsmlake.format.predicate import Predicate, Term
from tests.support.client_services import client_services

STRINGS = ["", "a", "ab", "b", "it's", "z"]
FIRST: list[dict[str, Any]] = [{"id": i, "p": "xy"[i % 2], "v": None if i % 4 == 0 else (i * 7) % 23 - 5,
          "s": None if i % 5 == 0 else STRINGS[i % len(STRINGS)]} for i in range(60)]
UPDATES = [dict(r, v=None if r["v"] is None else r["v"] + 1, s="b") for r in FIRST[::3]]
VALUES: dict[str, st.SearchStrategy[Any]] = {
    "id": st.integers(-2, 62), "p": st.sampled_from(["x", "y", "w"]), "v": st.integers(-6, 20),
    "s": st.sampled_from(STRINGS)}
COMPARE = ["=", "!=", "<", "<=", ">", ">="]

# a filter as a tree: ("term", column, op, value) or ("and" | "or", [children])
Tree = tuple[Any, ...]


@pytest.fixture(scope="module")
def lake(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Client, list[dict[str, Any]]]]:
    with client_services(str(tmp_path_factory.mktemp("wh"))) as services, \
            Client(services.catalog, writer=services.writer, timeout_s=30) as c:
        c.create_table("db.t", "id BIGINT NOT NULL, p STRING NOT NULL, v INT, s STRING", primary_keys=["id", "p"],
                       partition_keys=["p"], options={"bucket": 4})
        c.write("db.t", FIRST, commit_now=True)
        c.write("db.t", UPDATES, commit_now=True)
        rows = {(r["id"], r["p"]): r for r in FIRST + UPDATES}  # the newest row of each key
        yield c, list(rows.values())


@st.composite
def terms(draw: st.DrawFn) -> Tree:
    column = draw(st.sampled_from(sorted(VALUES)))
    op = draw(st.sampled_from([*COMPARE, "in", "is_null", "is_not_null"]))
    if op == "in":
        return ("term", column, op, draw(st.lists(VALUES[column], min_size=1, max_size=3)))
    return ("term", column, op, None if op.startswith("is_") else draw(VALUES[column]))


trees = st.recursive(terms(), lambda inner: st.tuples(st.sampled_from(["and", "or"]),
                                                      st.lists(inner, min_size=1, max_size=3)), max_leaves=6)


def passes(tree: Tree, row: dict[str, Any]) -> bool:
    """The plain-Python filter (no NOT in the language, so NULL as false gives SQL's answer)."""
    if tree[0] == "and":
        return all(passes(c, row) for c in tree[1])
    if tree[0] == "or":
        return any(passes(c, row) for c in tree[1])
    _, column, op, value = tree
    v = row[column]
    if op in ("is_null", "is_not_null"):
        return (v is None) == (op == "is_null")
    if v is None:
        return False
    if op == "in":
        return v in value
    return {"=": v == value, "!=": v != value, "<": v < value, "<=": v <= value, ">": v > value,
            ">=": v >= value}[op]


def literal(v: Any) -> str:
    return str(v) if isinstance(v, int) else "'" + v.replace("'", "''") + "'"


def text(tree: Tree) -> str:
    if tree[0] in ("and", "or"):
        return f" {tree[0].upper()} ".join(f"({text(c)})" for c in tree[1])
    _, column, op, value = tree
    if op == "in":
        return f"{column} IN ({', '.join(map(literal, value))})"
    if op.startswith("is_"):
        return f"{column} {op.replace('_', ' ').upper()}"
    return f"{column} {op} {literal(value)}"


def predicate(tree: Tree) -> Predicate:
    if tree[0] in ("and", "or"):
        return Predicate(tuple(predicate(c) for c in tree[1]), any=tree[0] == "or")
    _, column, op, value = tree
    return Predicate((Term(column, op, value),))


def flat_terms(tree: Tree) -> list[Tree] | None:
    """The terms of a tree that is a plain AND of terms (what tuples and mappings can say), else None."""
    if tree[0] == "term":
        return [tree]
    if tree[0] == "and" or len(tree[1]) == 1:
        out: list[Tree] = []
        for c in tree[1]:
            sub = flat_terms(c)
            if sub is None:
                return None
            out += sub
        return out
    return None


def spec(tree: Tree, form: str) -> Any:
    """The filter in the form asked for, or as text when that form cannot say it."""
    flat = flat_terms(tree)
    if form == "tuples" and flat is not None:
        return [(c, op) if op.startswith("is_") else (c, op, v) for _, c, op, v in flat]
    if form == "mapping" and flat is not None and all(op in ("=", "is_null") for _, _, op, _ in flat) \
            and len({c for _, c, _, _ in flat}) == len(flat):
        return {c: v for _, c, _, v in flat}
    if form == "predicate":
        return predicate(tree)
    return text(tree)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(tree=trees, form=st.sampled_from(["text", "predicate", "tuples", "mapping"]))
def test_scan_where_gives_the_rows_of_a_python_filter(lake: tuple[Client, list[dict[str, Any]]], tree: Tree,
                                                      form: str) -> None:
    client, rows = lake
    got = client.scan("db.t", where=spec(tree, form))
    expected = sorted((r["id"], r["p"], r["v"], r["s"]) for r in rows if passes(tree, r))
    assert sorted((r["id"], r["p"], r["v"], r["s"]) for r in got.to_pylist()) == expected
