"""The layout the design card names holds: light imports, small modules, imports only downward.

`.ci/run` also runs `make check` (ruff, mypy, lint-imports); these tests keep the same promises inside
`make test`, so that a developer running only the tests sees a broken layout too.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.paths import ROOT

CODE = [ROOT / "shared" / "lsmlake", ROOT / "catalog_svc", ROOT / "writer_svc", ROOT / "compactor_svc"]
#: "no hand-written module over ~500 lines"
MAX_LINES = 520

_LOADED = """
import importlib, json, sys
importlib.import_module(sys.argv[1])
print(json.dumps(sorted(m for m in sys.modules if m.split(".")[0] in ("grpc", "google", "grpc_health")
                        or m.startswith("lsmlake.proto_gen") or m.startswith("lsmlake.rpc"))))
"""


@pytest.mark.parametrize("module", ["lsmlake", "lsmlake.format.row_kind", "lsmlake.table.file_store_table",
                                    "lsmlake.catalog.filesystem", "lsmlake.ingest"])
def test_the_library_below_rpc_loads_no_grpc(module: str) -> None:
    out = subprocess.run([sys.executable, "-c", _LOADED, module], capture_output=True, text=True, check=True)
    assert json.loads(out.stdout) == [], f"importing {module} loaded gRPC or protobuf modules"


def test_the_client_is_still_one_import_away() -> None:
    out = subprocess.run([sys.executable, "-c", "import lsmlake; print(lsmlake.Client.__name__)"],
                         capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "Client"


def test_no_hand_written_module_is_over_500_lines() -> None:
    big = {}
    for top in CODE:
        for path in top.rglob("*.py"):
            if "proto_gen" in path.parts:
                continue
            n = len(path.read_text().splitlines())
            if n > MAX_LINES:
                big[str(path.relative_to(ROOT))] = n
    assert big == {}


def test_the_import_contracts_hold() -> None:
    lint = shutil.which("lint-imports", path=str(Path(sys.executable).parent))
    if lint is None:
        pytest.fail("lint-imports is not installed beside this Python: `make venv` installs it (pyproject [test])")
    out = subprocess.run([lint, "--no-cache"], cwd=ROOT, capture_output=True, text=True)
    assert out.returncode == 0, out.stdout[-4000:] + out.stderr[-2000:]
    assert "BROKEN" not in out.stdout and " KEPT" in out.stdout
