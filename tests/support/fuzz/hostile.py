"""Hostile values for every field of every protobuf message, and the hypothesis settings of the fuzz tests.

`message_of(descriptor)` builds any message of the lsmlake API from its descriptor, so a field added to a
proto is fuzzed without anyone writing a strategy for it. Strings are path-like names (`../x`, `a/b`),
NUL bytes, 100k-char text, unicode, SQL types nested a thousand deep; integers sit on the edges of their
range (negative buckets, huge snapshot ids); enums take unknown numbers; bytes are garbage.
"""

from __future__ import annotations

import os
from typing import Any

from google.protobuf.descriptor import Descriptor, FieldDescriptor
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

# more examples on a developer's machine; CI keeps the suite short (never fewer assertions per example)
settings.register_profile("fuzz-ci", max_examples=15, deadline=None, derandomize=True,
                          suppress_health_check=list(HealthCheck))
settings.register_profile("fuzz-dev", max_examples=120, deadline=None,
                          suppress_health_check=list(HealthCheck))
FUZZ = settings(settings.get_profile("fuzz-ci" if os.environ.get("CI") == "true" else "fuzz-dev"))

#: names of the seeded warehouse, so that many requests get past "not found" to the deeper checks
DATABASES = ("db",)
TABLES = ("pk", "log")
COLUMNS = ("id", "dt", "v", "n")

HUGE = 100_000
PATH_LIKE = ("../x", "..", ".", "a/b", "/etc", "db/../../x", "..\\x", "x\\y", "db.t", "~", "x\x00y", "\x00",
             " ", "a b", "*", "%2e%2e", "$HOME", "-", "_")
SQL_TYPES = ("BIGINT", "BIGINT NOT NULL", "STRING", "INT", "DECIMAL(10, 2)", "DECIMAL(40, 2)", "DECIMAL(-1, 2)",
             "VARCHAR(-5)", "CHAR(0)", "TIMESTAMP(99)", "ARRAY<STRING>", "MAP<STRING, INT>", "ROW<a INT, a INT>",
             "STRANGE", "", "BIGINT NOT NULL NOT NULL", "ARRAY<", "ROW<>", "MAP<INT>", "DOUBLE PRECISION",
             "ARRAY<" * 100 + "INT" + ">" * 100, "ARRAY<" * 2000 + "INT" + ">" * 2000,
             "ROW<a " * 1000 + "INT" + ">" * 1000)

texts = st.one_of(
    st.sampled_from((*DATABASES, *TABLES, *COLUMNS, *PATH_LIKE, *SQL_TYPES, "", "1", "-1", "0", "+I", "-D", "now",
                     "bucket", "merge-engine", "colour", "99999999999999999999")),
    st.text(max_size=40),
    st.builds(lambda c, n: c * n, st.sampled_from("x/.é\x00{["), st.sampled_from((255, 256, 5_000, HUGE))),
)
INT32_EDGES = (0, 1, 2, -1, -2, -3, 7, 2**31 - 1, -(2**31))
INT64_EDGES = (*INT32_EDGES, 2**31, 2**63 - 1, -(2**63), 10**15)
int32s = st.one_of(st.sampled_from(INT32_EDGES), st.integers(-(2**31), 2**31 - 1))
int64s = st.one_of(st.sampled_from(INT64_EDGES), st.integers(-(2**63), 2**63 - 1))
uint_like = {FieldDescriptor.TYPE_UINT32: st.integers(0, 2**32 - 1),
             FieldDescriptor.TYPE_UINT64: st.integers(0, 2**64 - 1)}
garbage_bytes = st.one_of(st.binary(max_size=64), st.sampled_from((b"", b"\x00" * 8, b"\xff" * 4096, b"{" * 1000)))


def identifiers() -> st.SearchStrategy[dict[str, str]]:
    """Mostly a real table (so the checks after the lookup run), sometimes a hostile name."""
    real = st.builds(lambda d, t: {"database": d, "table": t}, st.sampled_from(DATABASES), st.sampled_from(TABLES))
    return st.one_of(real, real, real, st.builds(lambda d, t: {"database": d, "table": t}, texts, texts))


def _scalar(f: FieldDescriptor) -> st.SearchStrategy[Any]:
    t = f.type
    if t == FieldDescriptor.TYPE_STRING:
        return texts
    if t == FieldDescriptor.TYPE_BYTES:
        return garbage_bytes
    if t == FieldDescriptor.TYPE_BOOL:
        return st.booleans()
    if t == FieldDescriptor.TYPE_ENUM:
        known = [v.number for v in f.enum_type.values]
        return st.one_of(st.sampled_from(known), st.sampled_from((-1, 99, 2**31 - 1)))  # unknown numbers too
    if t in uint_like:
        return uint_like[t]
    if t in (FieldDescriptor.TYPE_INT64, FieldDescriptor.TYPE_SINT64, FieldDescriptor.TYPE_SFIXED64):
        return int64s
    if t in (FieldDescriptor.TYPE_INT32, FieldDescriptor.TYPE_SINT32, FieldDescriptor.TYPE_SFIXED32):
        return int32s
    if t in (FieldDescriptor.TYPE_DOUBLE, FieldDescriptor.TYPE_FLOAT):
        return st.floats(allow_nan=True, width=32)
    raise AssertionError(f"no hostile values for field {f.full_name} of type {t}")


def _is_map(f: FieldDescriptor) -> bool:
    return f.type == FieldDescriptor.TYPE_MESSAGE and f.message_type.GetOptions().map_entry


def fields_of(d: Descriptor, depth: int, overrides: dict[str, st.SearchStrategy[Any]]) -> st.SearchStrategy[dict]:
    """Keyword arguments for the message `d`: each field set or left out, one member of each oneof."""
    parts: dict[str, st.SearchStrategy[Any]] = {}
    required: dict[str, st.SearchStrategy[Any]] = {}
    for f in d.fields:
        if f.containing_oneof is not None and not f.containing_oneof.name.startswith("_"):
            continue  # a real oneof: one member, chosen below
        # the table is always named: without it every request stops at the first check
        is_table = f.type == FieldDescriptor.TYPE_MESSAGE and f.message_type.full_name == "lsmlake.v1.TableIdentifier"
        (required if is_table else parts)[f.name] = _field(f, depth, overrides)
    chosen = st.fixed_dictionaries(required, optional=parts)
    for oneof in d.oneofs:
        if oneof.name.startswith("_"):  # proto3 `optional`: a synthetic oneof of one field
            continue
        members = st.one_of(*[st.tuples(st.just(f.name), _field(f, depth, overrides)) for f in oneof.fields])
        chosen = st.builds(lambda kw, m: {**kw, m[0]: m[1]}, chosen, members) | chosen
    return chosen


def _field(f: FieldDescriptor, depth: int, overrides: dict[str, st.SearchStrategy[Any]]) -> st.SearchStrategy[Any]:
    if f.full_name in overrides:
        return overrides[f.full_name]
    if _is_map(f):
        key, value = f.message_type.fields_by_name["key"], f.message_type.fields_by_name["value"]
        return st.dictionaries(_field(key, depth, overrides), _field(value, depth, overrides), max_size=3)
    if f.type == FieldDescriptor.TYPE_MESSAGE:
        if f.message_type.full_name in overrides:
            one = overrides[f.message_type.full_name]
        elif depth <= 0:
            one = st.just({})
        else:
            one = fields_of(f.message_type, depth - 1, overrides)
    else:
        one = _scalar(f)
    if f.is_repeated:
        return st.lists(one, max_size=3)
    return one


def message_of(cls: Any, depth: int = 4, **overrides: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """Messages of class `cls` with hostile values in every field.

    `overrides` maps a field's or a message type's full name (dots as `__`) to a strategy of its values
    (a dict of keyword arguments for a message type).
    """
    table = {"lsmlake.v1.TableIdentifier": identifiers(), **{k.replace("__", "."): v for k, v in overrides.items()}}
    return fields_of(cls.DESCRIPTOR, depth, table).map(lambda kw: _build(cls, kw))


def _build(cls: Any, kw: dict[str, Any]) -> Any:
    msg = cls()
    _fill(msg, kw)
    return msg


def _fill(msg: Any, kw: dict[str, Any]) -> None:
    for name, value in kw.items():
        f = msg.DESCRIPTOR.fields_by_name[name]
        if _is_map(f):
            target = getattr(msg, name)
            value_field = f.message_type.fields_by_name["value"]
            for k, v in value.items():
                if value_field.type == FieldDescriptor.TYPE_MESSAGE:
                    _fill(target[k], v)
                else:
                    target[k] = v
        elif f.type == FieldDescriptor.TYPE_MESSAGE:
            if f.is_repeated:
                for item in value:
                    _fill(getattr(msg, name).add(), item)
            else:
                getattr(msg, name).SetInParent()
                _fill(getattr(msg, name), value)
        elif f.is_repeated:
            getattr(msg, name).extend(value)
        else:
            setattr(msg, name, value)


def _leaves(msg: Any) -> list[tuple[Any, FieldDescriptor]]:
    """(message, field) of every scalar field reachable through the set sub-messages of `msg`."""
    out: list[tuple[Any, FieldDescriptor]] = []
    for f in msg.DESCRIPTOR.fields:
        if _is_map(f):
            continue
        if f.type != FieldDescriptor.TYPE_MESSAGE:
            out.append((msg, f))
        elif f.is_repeated:
            for item in getattr(msg, f.name):
                out += _leaves(item)
        elif msg.HasField(f.name):
            out += _leaves(getattr(msg, f.name))
    return out


def mutate(draw: Any, msg: Any, max_mutations: int = 2) -> list[str]:
    """Set one or two scalar fields somewhere inside a valid message to hostile values; what was changed."""
    changed = []
    for _ in range(draw(st.integers(1, max_mutations))):
        leaves = _leaves(msg)
        target, f = leaves[draw(st.integers(0, 2**16)) % len(leaves)]
        value = draw(st.lists(_scalar(f), max_size=3) if f.is_repeated else _scalar(f))
        if f.is_repeated:
            del getattr(target, f.name)[:]
            getattr(target, f.name).extend(value)
        else:
            setattr(target, f.name, value)
        changed.append(f"{f.full_name}={str(value)[:60]!r}")
    return changed
