"""`make demo` at the reduced CI size: the whole cluster end to end; it exits non-zero when the readers disagree."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

pytestmark = pytest.mark.integration


def test_demo_runs_and_both_readers_agree() -> None:
    proc = subprocess.run([sys.executable, "-m", "lsmlake.cli.demo"], capture_output=True, text=True, timeout=600,
                          env={**os.environ, "CI": "true"})
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    out = proc.stdout
    assert "pypaimon 2.1.0" in out and "the same rows" in out
    assert "everything agrees" in out and "cluster stopped" in out
    assert "freshness" in out and "rows/s" in out
    assert "through the REST catalog" in out and "as written" in out  # pypaimon's postponed rows, placed
    assert "each key once, in its last tier" in out and "pypaimon too" in out  # the dynamic-bucket table
