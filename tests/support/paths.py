"""Where the repository is, for tests that read its files (docs, scripts, charts) wherever they sit in tests/."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TESTS = ROOT / "tests"
