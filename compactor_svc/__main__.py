"""`python -m compactor_svc --warehouse DIR --catalog HOST:PORT --kafka HOST:PORT [--spark-master M]`."""

from __future__ import annotations

import sys

from compactor_svc.server import main

if __name__ == "__main__":
    sys.exit(main())
