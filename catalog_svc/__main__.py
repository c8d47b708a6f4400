"""`python -m catalog_svc --warehouse DIR [--metastore URL] [--port N] [--kafka HOST:PORT]`."""

from __future__ import annotations

import sys

from catalog_svc.server import main

if __name__ == "__main__":
    sys.exit(main())
