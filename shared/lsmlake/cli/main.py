"""`lake`: the command line of lsmlake (the console script `lake = lsmlake.cli.main:main`).

    lake --warehouse DIR table create|list|describe|alter|drop ...
    lake --warehouse DIR write DB.TABLE FILE...
    lake --warehouse DIR scan DB.TABLE [--snapshot N] [--format jsonl|csv|parquet|table] ...
    lake --warehouse DIR snapshots DB.TABLE
    lake --warehouse DIR files DB.TABLE
    lake --warehouse DIR compact DB.TABLE [--full] [--partition KEY=VALUE ...]
    lake --warehouse DIR levels DB.TABLE [--snapshot N] [--format table|jsonl]
    lake up --warehouse DIR|s3://BUCKET/PREFIX | lake up --s3

DIR may be an object-store URI throughout. Errors go to stderr as `lake: error: <message>`; the exit code is 2
for bad usage and 1 for any other error. The parser is in `parser`, the commands in `commands`, what they
change goes through a `backend` (the warehouse directly, or the services of a cluster: with a catalog service,
every change goes through the services or is refused with the reason). CSV and JSON input go through the
conversion the writer service and Kafka ingestion use (`lsmlake.ingest`); output is in `output`.
"""

from __future__ import annotations

import contextlib
import os
import sys
import traceback
from collections.abc import Sequence

from lsmlake.cli.errors import CliError, UsageError, arrow_errors
from lsmlake.cli.parser import PROG, build_parser
from lsmlake.errors import LakeError

ENV_DEBUG = "LAKE_DEBUG"  # set to 1 to see the traceback of an unexpected error


def _report(message: str) -> None:
    print(f"{PROG}: error: {message}", file=sys.stderr, flush=True)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit code (never raises, never prints a traceback)."""
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as e:  # --help, --version or a usage error (already printed)
        return e.code if isinstance(e.code, int) else (0 if e.code is None else 2)
    try:
        code: int = args.func(args)
        sys.stdout.flush()
        return code
    except UsageError as e:
        _report(str(e))
        return 2
    except (CliError, LakeError) as e:
        _report(str(e) or type(e).__name__)
        return 1
    except BrokenPipeError:
        # The reader of stdout went away (`lake scan ... | head`): stop quietly.
        with contextlib.suppress(Exception):
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
        return 1
    except KeyboardInterrupt:
        _report("interrupted")
        return 130
    except OSError as e:
        what = f"{e.strerror or e}: {e.filename}" if e.filename else str(e)
        _report(what)
        return 1
    except arrow_errors() as e:
        _report(str(e))
        return 1
    except Exception as e:  # a bug: still no traceback unless asked for
        if os.environ.get(ENV_DEBUG):
            traceback.print_exc()
        _report(f"unexpected {type(e).__name__}: {e} (set {ENV_DEBUG}=1 for a traceback)")
        return 1


if __name__ == "__main__":
    sys.exit(main())
