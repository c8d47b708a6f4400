"""The values of `lake`'s options: parsed by argparse (`type=`), errors reported as usage errors.

The schema changes of `lake table alter` are made from the table layer, imported when such a flag is given, not
when the parser is built.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from lsmlake.table.schema_change import AddColumn, RemoveOption, RenameColumn, SetOption


def key_value(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    return key.strip(), value.strip()


def table_option(text: str) -> tuple[str, str]:
    """`--option KEY=VALUE` of a table: KEY must be an option the registry knows (else the closest ones it does)."""
    key, value = key_value(text)
    _known_option(key)
    return key, value


def _known_option(key: str) -> None:
    from lsmlake.cli.suggest import unknown_option
    from lsmlake.format import options as opts

    if not opts.is_known(key):
        raise argparse.ArgumentTypeError(unknown_option(key))


def positive(text: str) -> int:
    """An argparse type: a whole number of at least 1."""
    value = non_negative(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number of at least 1")
    return value


def positive_seconds(text: str) -> float:
    """An argparse type: a number of seconds above 0 (fractions allowed)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of seconds, got {text!r}") from None
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"expected a number of seconds above 0, got {text!r}")
    return value


def non_negative(text: str) -> int:
    try:
        n = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if n < 0:
        raise argparse.ArgumentTypeError(f"expected a number >= 0, got {n}")
    return n


def names(values: Sequence[str] | None) -> list[str]:
    """`--x a,b --x c` -> [a, b, c]."""
    found: list[str] = []
    for v in values or ():
        found.extend(p.strip() for p in v.split(",") if p.strip())
    return found


class ChangeAction(argparse.Action):
    """Collects schema changes of all alter flags into one list, in command-line order."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any,
                 option_string: str | None = None) -> None:
        changes = list(getattr(namespace, self.dest, None) or [])
        changes.append(values)
        setattr(namespace, self.dest, changes)


def add_column(text: str) -> AddColumn:
    from lsmlake.table.schema_change import AddColumn

    parts = text.strip().split(None, 1)
    if len(parts) != 2:
        raise argparse.ArgumentTypeError(f"expected 'NAME TYPE', got {text!r}")
    return AddColumn(parts[0].strip("`"), parts[1])


def rename_column(text: str) -> RenameColumn:
    from lsmlake.table.schema_change import RenameColumn

    old, new = key_value(text)
    if not new:
        raise argparse.ArgumentTypeError(f"expected OLD=NEW, got {text!r}")
    return RenameColumn(old, new)


def set_option(text: str) -> SetOption:
    from lsmlake.table.schema_change import SetOption

    return SetOption(*table_option(text))


def remove_option(text: str) -> RemoveOption:
    from lsmlake.table.schema_change import RemoveOption

    if not text.strip():
        raise argparse.ArgumentTypeError("expected an option key")
    _known_option(text.strip())
    return RemoveOption(text.strip())
