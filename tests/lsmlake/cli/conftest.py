"""The `lake` command run in-process (`Lake`), shared by the CLI's test modules."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from lsmlake.catalog.filesystem import FileSystemCatalog
from lsmlake.cli import main as cli
from lsmlake.table.file_store_table import FileStoreTable


class Lake:
    """Runs `lake --warehouse WH ...` in-process and captures its output."""

    def __init__(self, warehouse: Path, capsys: pytest.CaptureFixture[str]) -> None:
        self.warehouse = warehouse
        self.capsys = capsys

    def __call__(self, *args: str) -> tuple[int, str, str]:
        self.capsys.readouterr()
        code = cli.main(["--warehouse", str(self.warehouse), *args])
        out, err = self.capsys.readouterr()
        assert "Traceback" not in err
        return code, out, err

    def ok(self, *args: str) -> str:
        code, out, err = self(*args)
        assert code == 0, err
        assert err == ""
        return out

    def fails(self, *args: str, code: int = 1) -> str:
        got, out, err = self(*args)
        assert got == code, (got, out, err)
        assert err.strip().splitlines()[-1].startswith("lake: error: "), err
        return err

    def jsonl(self, *args: str) -> list[dict[str, Any]]:
        return [json.loads(line) for line in self.ok(*args).splitlines()]

    def table(self, identifier: str) -> FileStoreTable:
        return FileSystemCatalog(str(self.warehouse)).get_table(identifier)

    def snapshot_ids(self, identifier: str) -> list[int]:
        return self.table(identifier).snapshots.ids()

    def listing(self, identifier: str) -> list[str]:
        root = Path(self.table(identifier).path)
        return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


@pytest.fixture
def lake(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> Lake:
    return Lake(tmp_path / "warehouse", capsys)


_SIZE = re.compile(r"\b\d+(\.\d)? (B|KB|MB|GB|TB)\b")
_TIME = re.compile(r"\b(\d+\.\d s|\d+m\d\ds|\d+h\d\dm)\b")


def untimed(text: str) -> str:
    """Output with its byte sizes as SIZE and durations as TIME: what varies from run to run."""
    return _TIME.sub("TIME", _SIZE.sub("SIZE", text))
