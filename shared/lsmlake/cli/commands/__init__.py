"""The commands of `lake`, by concept: each takes the parsed arguments and returns the exit code.

The parser names a command by its module and function (`Command`); the module is imported when the command
runs, so that parsing the arguments, `lake --help` included, loads none of the commands' dependencies (gRPC,
Spark, Arrow) and a command loads only its own.
"""

from __future__ import annotations

import argparse
import importlib
from dataclasses import dataclass


@dataclass(frozen=True)
class Command:
    """`function` of the module `lsmlake.cli.commands.<module>`, imported on the first call."""

    module: str
    function: str

    def __call__(self, args: argparse.Namespace) -> int:
        run = getattr(importlib.import_module(f"{__name__}.{self.module}"), self.function)
        code: int = run(args)
        return code
