"""Argument checks of the store's methods, and the batching of long `IN (...)` lists."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

from lsmlake.errors import InvalidInputError

_CHUNK = 500  # ids or names per IN (...) list


def chunks(items: Sequence[Any]) -> Iterator[Sequence[Any]]:
    for i in range(0, len(items), _CHUNK):
        yield items[i:i + _CHUNK]


def marks(n: int) -> str:
    return ", ".join("?" * n)


def check_table_id(table_id: str) -> str:
    if not isinstance(table_id, str) or not table_id:
        raise InvalidInputError(f"table id {table_id!r} must be a non-empty string")
    return table_id


def check_int(value: int, what: str, minimum: int | None = None) -> int:
    if not isinstance(value, int) or isinstance(value, bool):
        raise InvalidInputError(f"{what} {value!r} must be an integer")
    if minimum is not None and value < minimum:
        raise InvalidInputError(f"{what} {value} must be at least {minimum}")
    return value


def check_bytes(value: bytes, what: str) -> bytes:
    if not isinstance(value, bytes | bytearray | memoryview):
        raise InvalidInputError(f"{what} must be bytes, not {type(value).__name__}")
    return bytes(value)
