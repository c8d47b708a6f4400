"""The text form of a predicate, as every layer takes it (Spark's `filter` option, `Client.scan`, `lake --where`,
the catalog's `PlanScan`): `dt = '2024-01-02' AND id >= 100`. Each term is
`column OP literal` (OP one of = != <> < <= > >=), `column IN (lit, ...)`, `column IS NULL` or
`column IS NOT NULL`; literals are numbers, `true`/`false` or quoted text, parsed by the column's type.

Where it is safe (the deletion-vector rules): partition terms skip partitions, key terms skip files
by their key statistics, and every term filters rows only after the merge, so a filtered read
returns exactly the rows of an unfiltered read that pass.
"""

from __future__ import annotations

import re
from typing import Any

import pyarrow as pa

from lsmlake.errors import InvalidInputError
from lsmlake.format.predicate import Predicate, Term

_TOKEN = re.compile(r"""\s*(?:(?P<str>'(?:[^']|'')*')|(?P<op><=|>=|!=|<>|=|<|>)|(?P<punct>[(),])"""
                    r"""|(?P<word>[^\s(),=<>!']+))""")
_OPS = {"=": "=", "!=": "!=", "<>": "!=", "<": "<", "<=": "<=", ">": ">", ">=": ">="}


def _tokens(text: str) -> list[tuple[str, str]]:
    out = []
    pos = 0
    text = text.rstrip()
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if m is None or m.end() == pos:
            raise InvalidInputError(f"filter {text!r}: cannot read from {text[pos:]!r}")
        kind = m.lastgroup
        assert kind is not None
        out.append((kind, m.group(kind)))
        pos = m.end()
    return out


def _literal(token: tuple[str, str], column: str, arrow_type: pa.DataType) -> Any:
    kind, raw = token
    if kind == "str":
        text = raw[1:-1].replace("''", "'")
    elif kind == "word":
        text = raw
    else:
        raise InvalidInputError(f"filter on {column!r}: expected a value, found {raw!r}")
    try:
        return pa.scalar(text).cast(arrow_type).as_py()
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        raise InvalidInputError(f"filter on {column!r}: {text!r} is not a valid {arrow_type}") from None


def parse_filter(text: str, schema: pa.Schema) -> Predicate:
    """The predicate of a `filter` option, with literals typed like their columns; an empty text accepts all."""
    toks = _tokens(text)
    terms: list[Term] = []
    i = 0

    def take() -> tuple[str, str]:
        nonlocal i
        if i >= len(toks):
            raise InvalidInputError(f"filter {text!r} ends too early")
        i += 1
        return toks[i - 1]

    while i < len(toks):
        kind, column = take()
        if kind != "word" or column not in schema.names:
            raise InvalidInputError(f"filter {text!r}: {column!r} is not a column (columns: {schema.names})")
        typ = schema.field(column).type
        kind, op = take()
        if kind == "op":
            terms.append(Term(column, _OPS[op], _literal(take(), column, typ)))
        elif kind == "word" and op.upper() == "IN":
            if take() != ("punct", "("):
                raise InvalidInputError(f"filter {text!r}: IN needs a parenthesised list")
            values = [_literal(take(), column, typ)]
            while (tok := take()) == ("punct", ","):
                values.append(_literal(take(), column, typ))
            if tok != ("punct", ")"):
                raise InvalidInputError(f"filter {text!r}: unclosed IN list")
            terms.append(Term(column, "in", values))
        elif kind == "word" and op.upper() == "IS":
            nxt = take()[1].upper()
            if nxt == "NOT" and take()[1].upper() == "NULL":
                terms.append(Term(column, "is_not_null"))
            elif nxt == "NULL":
                terms.append(Term(column, "is_null"))
            else:
                raise InvalidInputError(f"filter {text!r}: expected IS NULL or IS NOT NULL after {column!r}")
        else:
            raise InvalidInputError(f"filter {text!r}: unknown operator {op!r} after {column!r}")
        if i < len(toks):
            kind, word = take()
            if kind != "word" or word.upper() != "AND":
                raise InvalidInputError(f"filter {text!r}: terms must be joined by AND, found {word!r}")
            if i == len(toks):
                raise InvalidInputError(f"filter {text!r} ends with AND")
    return Predicate(tuple(terms))
