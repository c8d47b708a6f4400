"""The layout the design card names holds: light imports, small modules, imports only downward.

`.ci/run` also runs `make check` (ruff, mypy, lint-imports); these tests keep the same promises inside
`make test`, so that a developer running only the tests sees a broken layout too.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

from tests.support.paths import ROOT, TESTS

CODE = [ROOT / "shared" / "lsmlake", ROOT / "catalog_svc", ROOT / "writer_svc", ROOT / "compactor_svc"]
#: one concept per module: past this many lines a module is reported (a warning), to be split by concept
SOFT_LINES = 500
#: past this many lines the module holds more than one concept for certain: the test fails
HARD_LINES = 800

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


def _module_lines() -> dict[str, int]:
    return {str(path.relative_to(ROOT)): len(path.read_text().splitlines())
            for top in CODE for path in top.rglob("*.py") if "proto_gen" not in path.parts}


def test_modules_hold_one_concept_each() -> None:
    """The line count is a prompt to look, not a rule to satisfy: a long module is reported as a warning (split it
    by concept, never into base classes that exist only to be short); only a very long one fails."""
    lines = _module_lines()
    assert len(lines) > 100  # the walk found the code
    long = {path: n for path, n in sorted(lines.items()) if n > SOFT_LINES}
    for path, n in long.items():
        warnings.warn(f"{path} has {n} lines: does it still hold one concept?", stacklevel=1)
    assert {path: n for path, n in long.items() if n > HARD_LINES} == {}


def test_the_import_contracts_hold() -> None:
    lint = shutil.which("lint-imports", path=str(Path(sys.executable).parent))
    if lint is None:
        pytest.fail("lint-imports is not installed beside this Python: `make venv` installs it (pyproject [test])")
    out = subprocess.run([lint, "--no-cache"], cwd=ROOT, capture_output=True, text=True)
    assert out.returncode == 0, out.stdout[-4000:] + out.stderr[-2000:]
    assert "BROKEN" not in out.stdout and " KEPT" in out.stdout


LIBRARY = ROOT / "shared" / "lsmlake"
SERVICES = ("catalog_svc", "writer_svc", "compactor_svc")
#: the folders of tests/ that mirror no package, and what each holds
OTHER_FOLDERS = {
    "integration": "tests over several processes or services, end to end, and the suites that cut across packages",
    "support": "helpers and fixtures the tests share; no test files",
    "helm": "the chart in helm/",
    "proto": "the definitions in proto/",
    "data": "test input (the golden warehouse)",
}


def _library_packages() -> list[Path]:
    return sorted(p.parent.relative_to(LIBRARY) for p in LIBRARY.rglob("__init__.py")
                  if "proto_gen" not in p.parts and p.parent != LIBRARY)


def _misplaced(rel: Path) -> str | None:
    """Why a file of tests/ (relative to it) is not where the layout puts it, or None."""
    top, name = rel.parts[0], rel.name
    if name in ("__init__.py", "conftest.py") or top == "data":
        return None
    if not name.startswith("test_"):
        return None if top == "support" else "a helper outside tests/support/"
    if len(rel.parts) == 1:
        return None if name == "test_layout.py" else "a test file at the top of tests/"
    if top == "lsmlake":
        package = LIBRARY.joinpath(*rel.parts[1:-1])
        return None if (package / "__init__.py").exists() else f"no library package {package.relative_to(ROOT)}"
    if top in SERVICES:
        return None if len(rel.parts) == 2 else "a sub-folder of a service's tests"
    if top == "support":
        return "a test file among the helpers"
    if top in OTHER_FOLDERS:
        return None
    return f"tests/{top}/ mirrors nothing (library: tests/lsmlake/<package>/, services: tests/<service>/)"


def test_every_test_file_sits_where_the_code_it_tests_is() -> None:
    wrong = {str(p.relative_to(TESTS)): why for p in TESTS.rglob("*.py")
             if "__pycache__" not in p.parts and (why := _misplaced(p.relative_to(TESTS))) is not None}
    assert wrong == {}


def test_every_library_package_and_service_has_its_tests() -> None:
    tops = [p for p in _library_packages() if len(p.parts) == 1]
    assert len(tops) >= 10, tops  # the walk found the library
    missing = [f"tests/lsmlake/{p}/" for p in tops if not any((TESTS / "lsmlake" / p).rglob("test_*.py"))]
    missing += [f"tests/{s}/" for s in SERVICES if not any((TESTS / s).glob("test_*.py"))]
    assert missing == []


def test_the_layout_rules_catch_a_misplaced_file() -> None:
    assert _misplaced(Path("test_bucket.py")) == "a test file at the top of tests/"
    assert _misplaced(Path("lsmlake/nowhere/test_x.py")) == "no library package shared/lsmlake/nowhere"
    assert _misplaced(Path("lsmlake/format/helpers.py")) == "a helper outside tests/support/"
    assert _misplaced(Path("merge/test_engines.py")) is not None
    assert _misplaced(Path("lsmlake/mergetree/compact/test_universal.py")) is None


def _layer_table_packages(text: str) -> set[str]:
    """The packages a markdown table of layers names in its rows (`lsmlake.x` or `x`, in backticks)."""
    names: set[str] = set()
    for line in text.splitlines():
        if line.startswith("|") and not line.startswith("|---"):
            cells = [c.strip() for c in line.strip("|").split("|")]
            package_cell = cells[1] if cells[0].isdigit() else cells[0]
            names.update(n.removeprefix("lsmlake.") for n in re.findall(r"`([\w.]+)`", package_cell))
    return names


def test_both_maps_name_every_package_and_service_module() -> None:
    """docs/architecture.md and the README's architecture section list every package of the library, and the
    architecture page every module of every service: a package or module added without its place on the map
    fails here."""
    packages = {p.parts[0] for p in _library_packages()} | {"errors"}
    architecture = (ROOT / "docs" / "architecture.md").read_text()
    readme = (ROOT / "README.md").read_text()
    readme_section = readme[readme.index("## Architecture"):readme.index("## Development")]
    layers = architecture[architecture.index("## The library's layers"):architecture.index("The contracts are")]
    assert packages - _layer_table_packages(layers) == set(), "missing from docs/architecture.md's layers"
    assert packages - _layer_table_packages(readme_section) == set(), "missing from the README's layers"
    services = architecture[architecture.index("## The services, module by module"):
                            architecture.index("## Where things live")]
    modules = {f"{s}/{p.name}" for s in SERVICES for p in (ROOT / s).glob("*.py") if p.name != "__init__.py"}
    parts = re.split(r"\*\*`(\w+)/`\*\*", services)  # [before, service, its table, service, its table, ...]
    named = {f"{service}/{m}" for service, block in zip(parts[1::2], parts[2::2], strict=True)
             for m in re.findall(r"^\| `(\w+\.py)` \|", block, re.M)}
    assert modules - named == set(), "service modules missing from docs/architecture.md"
    assert named - modules == set(), "docs/architecture.md names service modules that do not exist"
