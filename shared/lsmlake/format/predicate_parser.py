"""The grammar of the predicate text (its language is described in `predicate_text`): text to a syntax tree of
`(column, op, value)` leaves and AND/OR groups, with every literal typed by its column. `predicate` turns the tree
into a `Predicate`; this module stays below it so that every layer can build predicates from text.
"""

from __future__ import annotations

import datetime as dt
import re
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from lsmlake.errors import InvalidInputError

KEYWORDS = frozenset({"AND", "OR", "NOT", "IN", "IS", "NULL", "TRUE", "FALSE"})
Leaf = tuple[str, str, Any]  # (column, op name, typed literal or tuple of them or None)


@dataclass(frozen=True)
class Group:
    """An AND (or, with `any`, an OR) of leaves and groups as written."""

    any: bool
    children: tuple[Syntax, ...]


Syntax = Leaf | Group


def cast_literal(value: Any, arrow_type: pa.DataType, column: str) -> Any:
    """`value` as a value of the column's type (a text is parsed, a number converted where it is exact)."""
    errors = (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError, TypeError, ValueError, OverflowError)
    try:
        try:
            wanted, nanos = _temporal(value, arrow_type)
            out = pa.scalar(wanted, type=arrow_type).as_py()
            if isinstance(wanted, (dt.time, dt.datetime)) and out != wanted:
                raise ValueError("finer than the column")  # Arrow truncates: the literal would not be what was asked
            if nanos:
                # beyond Python's microseconds: added in Arrow, whose `as_py` keeps them (as pandas.Timestamp)
                out = pa.scalar(pa.scalar(wanted, type=arrow_type).cast(pa.int64()).as_py() + nanos,
                                type=arrow_type).as_py()
            return out
        except _Finer:
            raise
        except errors:
            return pa.scalar(value).cast(arrow_type).as_py()
    except _Finer:
        raise InvalidInputError(f"filter on {column!r}: {value!r} is not a valid {arrow_type}: it is finer than the "
                                "column holds") from None
    except errors:
        raise InvalidInputError(f"filter on {column!r}: {value!r} is not a valid {arrow_type}") from None


class _Finer(ValueError):
    """A text with nonzero fraction digits beyond the column's unit: no value of the column equals it."""


_FRACTION = re.compile(r"(\d:\d\d)\.(\d+)")
_UNIT_DIGITS = {"s": 0, "ms": 3, "us": 6, "ns": 9}


def _temporal(value: Any, arrow_type: pa.DataType) -> tuple[Any, int]:
    """A text read as a time or a timestamp (ISO-8601), which Arrow's casts from text do not all read, and the
    nanoseconds beyond its microseconds: Python reads at most six fraction digits (3.11 drops the rest silently),
    so the digits past six are counted here, and refused when nonzero past the column's unit."""
    if not isinstance(value, str) or not (pa.types.is_time(arrow_type) or pa.types.is_timestamp(arrow_type)):
        return value, 0
    text = value.strip()
    nanos = 0
    fraction = _FRACTION.search(text)
    if fraction is not None:
        digits = fraction.group(2)
        if digits[_UNIT_DIGITS[arrow_type.unit]:].strip("0"):
            raise _Finer(text)
        nanos = int(digits[6:9].ljust(3, "0"))
        text = text[:fraction.start(2)] + digits[:6] + text[fraction.end(2):]
    if pa.types.is_time(arrow_type):
        return dt.time.fromisoformat(text), nanos
    return dt.datetime.fromisoformat(text), nanos


_TOKEN = re.compile(r"""\s*(?:(?P<hex>[xX]'[0-9a-fA-F]*')|(?P<str>'(?:[^']|'')*')|(?P<ident>"(?:[^"]|"")*")"""
                    r"""|(?P<op><=|>=|!=|<>|==|=|<|>)|(?P<punct>[(),])|(?P<word>[^\s(),=<>!'"]+))""")
_OPS = {"=": "=", "==": "=", "!=": "!=", "<>": "!=", "<": "<", "<=": "<=", ">": ">", ">=": ">="}
Token = tuple[str, str]


def _tokens(text: str) -> list[Token]:
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


def _literal(token: Token, column: str, arrow_type: pa.DataType) -> Any:
    kind, raw = token
    if kind == "hex":
        if (len(raw) - 3) % 2:
            raise InvalidInputError(f"filter on {column!r}: {raw} needs two hex digits a byte")
        return cast_literal(bytes.fromhex(raw[2:-1]), arrow_type, column)
    if kind == "str":
        text = raw[1:-1].replace("''", "'")
    elif kind == "word" and raw.upper() == "NULL":
        raise InvalidInputError(f"filter on {column!r}: a comparison with NULL is never true; use IS [NOT] NULL")
    elif kind == "word":
        text = raw
    elif kind == "ident":
        text = raw[1:-1].replace('""', '"').replace("'", "''")
        raise InvalidInputError(f"filter on {column!r}: {raw} names a column; write text in single quotes ('{text}')")
    else:
        raise InvalidInputError(f"filter on {column!r}: expected a value, found {raw!r}")
    return cast_literal(text, arrow_type, column)


class _Parser:
    """Recursive descent over the tokens of one filter text."""

    def __init__(self, text: str, schema: pa.Schema) -> None:
        self.text = text
        self.schema = schema
        self.toks = _tokens(text)
        self.i = 0

    def fail(self, why: str) -> InvalidInputError:
        return InvalidInputError(f"filter {self.text!r}: {why}")

    def peek(self) -> Token | None:
        return self.toks[self.i] if self.i < len(self.toks) else None

    def take(self) -> Token:
        if self.i >= len(self.toks):
            raise InvalidInputError(f"filter {self.text!r} ends too early")
        self.i += 1
        return self.toks[self.i - 1]

    def keyword(self, word: str) -> bool:
        tok = self.peek()
        if tok is not None and tok[0] == "word" and tok[1].upper() == word:
            self.i += 1
            return True
        return False

    def parse(self) -> Syntax | None:
        if not self.toks:
            return None
        tree = self.disjunction()
        if self.i < len(self.toks):
            raise self.fail(f"expected AND, OR or the end, found {self.toks[self.i][1]!r}")
        return tree

    def disjunction(self) -> Syntax:
        branches = [self.conjunction()]
        while self.keyword("OR"):
            self.after("OR")
            branches.append(self.conjunction())
        return branches[0] if len(branches) == 1 else Group(True, tuple(branches))

    def conjunction(self) -> Syntax:
        parts = [self.atom()]
        while self.keyword("AND"):
            self.after("AND")
            parts.append(self.atom())
        return parts[0] if len(parts) == 1 else Group(False, tuple(parts))

    def after(self, word: str) -> None:
        if self.i == len(self.toks):
            raise self.fail(f"ends with {word}")

    def atom(self) -> Syntax:
        tok = self.take()
        if tok == ("punct", "("):
            inner = self.disjunction()
            if self.peek() != ("punct", ")"):
                raise self.fail("a '(' is not closed")
            self.i += 1
            return inner
        return self.term(tok)

    def term(self, tok: Token) -> Leaf:
        kind, raw = tok
        if kind == "ident":
            column = raw[1:-1].replace('""', '"')
        elif kind == "word":
            column = raw
        else:
            raise self.fail(f"expected a column, found {raw!r}")
        if column not in self.schema.names:
            raise self.fail(f"{column!r} is not a column (columns: {self.schema.names})")
        typ = self.schema.field(column).type
        kind, op = self.take()
        if kind == "op":
            return (column, _OPS[op], _literal(self.take(), column, typ))
        if kind == "word" and op.upper() == "IN":
            if self.take() != ("punct", "("):
                raise self.fail("IN needs a parenthesised list")
            values: list[Any] = []
            if self.peek() == ("punct", ")"):
                self.i += 1
                return (column, "in", tuple(values))
            values.append(_literal(self.take(), column, typ))
            while (nxt := self.take()) == ("punct", ","):
                values.append(_literal(self.take(), column, typ))
            if nxt != ("punct", ")"):
                raise self.fail("unclosed IN list")
            return (column, "in", tuple(values))
        if kind == "word" and op.upper() == "IS":
            if self.keyword("NOT"):
                if self.keyword("NULL"):
                    return (column, "is_not_null", None)
            elif self.keyword("NULL"):
                return (column, "is_null", None)
            raise self.fail(f"expected IS NULL or IS NOT NULL after {column!r}")
        raise self.fail(f"unknown operator {op!r} after {column!r}")




def parse_syntax(text: str, schema: pa.Schema) -> Syntax | None:
    """The syntax tree of a filter text (None for an empty one, which accepts everything)."""
    return _Parser(text, schema).parse()
