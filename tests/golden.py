"""Where the golden warehouse (tables written by pypaimon 2.1.0, see tests/data/README.md) lives."""

from __future__ import annotations

import os
from pathlib import Path

GOLDEN_WAREHOUSE = Path(os.environ.get("LSMLAKE_GOLDEN",
                                       Path(__file__).parent / "data" / "golden" / "pypaimon-2.1.0"))
