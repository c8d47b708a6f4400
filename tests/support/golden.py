"""Where the golden warehouse (tables written by pypaimon 2.1.0, see tests/data/README.md) lives."""

from __future__ import annotations

import os
from pathlib import Path

from tests.support.paths import TESTS

GOLDEN_WAREHOUSE = Path(os.environ.get("LSMLAKE_GOLDEN",
                                       TESTS / "data" / "golden" / "pypaimon-2.1.0"))
