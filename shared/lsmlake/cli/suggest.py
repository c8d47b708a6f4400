""""Did you mean ...?": the closest known names to a mistyped flag or table option (difflib), for usage errors."""

from __future__ import annotations

import argparse
import difflib
import re
from collections.abc import Iterable, Sequence


def did_you_mean(word: str, known: Iterable[str]) -> str:
    """` (did you mean --limit?)` for the closest known names, or "" when none is close."""
    close = difflib.get_close_matches(word, sorted(set(known)), n=3, cutoff=0.6)
    if not close:
        return ""
    return f" (did you mean {' or '.join(close)}?)"


def unknown_flags(parser: argparse.ArgumentParser, extras: Sequence[str]) -> str:
    """The usage error of arguments the parser did not recognise, each flag with its closest known flags."""
    flags = [o for o in parser._option_string_actions if o.startswith("--")]  # argparse keeps them only here
    hints = "".join(did_you_mean(e.split("=", 1)[0], flags) for e in extras if e.startswith("-"))
    return f"unrecognized arguments: {' '.join(extras)}{hints}"


def unknown_option(key: str) -> str:
    """The error of a table option the registry does not know, with the closest keys it does."""
    from lsmlake.format import options as opts

    return f"unknown table option {key!r}{did_you_mean(key, opts.REGISTRY)} (the options: docs/options.md)"


_INVALID_CHOICE = re.compile(r"invalid choice: '(?P<word>[^']*)' \(choose from (?P<choices>.*)\)$")


def invalid_choice(message: str) -> str:
    """argparse's "invalid choice: 'scna' (choose from ...)" with the closest choices; other messages as they are."""
    m = _INVALID_CHOICE.search(message)
    if m is None:
        return message
    choices = re.findall(r"'([^']*)'", m.group("choices"))
    return message + did_you_mean(m.group("word"), choices)
