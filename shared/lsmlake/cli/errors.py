"""The errors the CLI reports as `lake: error: <message>`."""

from __future__ import annotations

import sys


class CliError(Exception):
    """An error the CLI reports as `lake: error: <message>` with exit code 1."""


class UsageError(CliError):
    """Bad usage: exit code 2."""


def arrow_errors() -> tuple[type[Exception], ...]:
    """What Arrow raises for input it cannot read or convert: reported as errors, not as bugs.

    None while pyarrow is not imported: then nothing can have raised one, and `lake --help` need not import it.
    """
    pa = sys.modules.get("pyarrow")
    if pa is None:
        return ()
    return (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError)
