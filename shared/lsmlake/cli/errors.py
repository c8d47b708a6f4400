"""The errors the CLI reports as `lake: error: <message>`."""

from __future__ import annotations

import pyarrow as pa

#: what Arrow raises for input it cannot read or convert: reported as errors, not as bugs
ARROW_ERRORS = (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError)


class CliError(Exception):
    """An error the CLI reports as `lake: error: <message>` with exit code 1."""


class UsageError(CliError):
    """Bad usage: exit code 2."""
