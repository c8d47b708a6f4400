"""`python -m tests.support.faulty_service SPEC MODULE [ARGS...]`: run `python -m MODULE ARGS...` with storage faults.

The service's FileIOs inject the faults of SPEC (usually `@<control file>`, which the test rewrites while the
service runs; see `tests.support.fault_fs`). The service itself runs unchanged, as `-m` would run it.
"""

from __future__ import annotations

import runpy
import sys

from tests.support.fault_fs import installed


def main(argv: list[str]) -> None:
    if len(argv) < 2:
        raise SystemExit(f"usage: python -m tests.support.faulty_service SPEC MODULE [ARGS...]; got {argv}")
    spec, module, *args = argv
    with installed(spec):
        sys.argv = [module, *args]
        runpy.run_module(module, run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main(sys.argv[1:])
