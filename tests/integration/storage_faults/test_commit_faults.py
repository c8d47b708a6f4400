"""Every write of a commit fails in turn (a full disk): the commit fails cleanly, a retry applies it once.

For each action (an append with a changelog, a compaction that writes deletion vectors, a delete by
deletion vectors) the test first runs it with a counting fault filesystem to enumerate its write points
(data files, changelog files, deletion-vector index files, manifests, manifest lists, index manifests,
the snapshot's temp file and hard link, the LATEST hint's temp file and rename). Then, on a fresh copy
of the table, it fails each point in turn, once by failing that operation and once by a byte budget that
runs out in the middle of it (a torn file, as a full disk leaves), and checks:

* the action raises StorageError naming the disk problem, and the table as lsmlake and pypaimon read it is
  exactly the previous snapshot; no temp file and no torn file is left behind (unless the failure came
  after publication, at the LATEST hint: then the action succeeded and the hint is only stale);
* after space comes back, retrying the action succeeds and its rows appear exactly once;
* orphan cleanup then removes every unreferenced file, and the table still reads the same.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pytest

from lsmlake.catalog.expire import remove_orphan_files
from lsmlake.catalog.filesystem import FileSystemCatalog
from lsmlake.catalog.reachability import referenced_files
from lsmlake.errors import StorageError
from lsmlake.table.compact import compact_table
from lsmlake.table.file_store_table import FileStoreTable
from tests.integration.interop.test_interop_pypaimon import pypaimon_read
from tests.support.fault_fs import RENAME, FaultInjector, FaultyFileIO, installed

SPEC = "on"  # the injector every FileIO of this module shares; each step arms its own faults


@pytest.fixture
def injector() -> Iterator[FaultInjector]:
    with installed(SPEC) as inj:
        inj.arm("")
        yield inj
        inj.arm("")


@dataclass
class Case:
    """A table set-up, the action under test, and the model of the rows before and after it."""

    setup: Callable[[FileSystemCatalog], FileStoreTable]
    action: Callable[[FileStoreTable], object]
    before: dict
    after: dict
    key: str = "k"


def _rows(t: FileStoreTable, key: str) -> dict:
    return {r[key]: r for r in t.to_arrow().to_pylist()}


def _theirs(warehouse: str, ident: str, key: str) -> dict:
    return {r[key]: r for r in pypaimon_read(warehouse, ident).to_pylist()}


def _model(rows: list[dict], key: str) -> dict:
    return {r[key]: r for r in rows}


# -- the cases ------------------------------------------------------------------------------------

def _pk_rows(keys: range, v: int) -> list[dict]:
    return [{"k": k, "dt": "a" if k % 2 else "b", "v": v * 1000 + k} for k in keys]


def _pk_table(cat: FileSystemCatalog, options: dict[str, str]) -> FileStoreTable:
    return cat.create_table("db.t", "k INT NOT NULL, dt STRING NOT NULL, v BIGINT", partition_keys=["dt"],
                            primary_keys=["k", "dt"], options={"bucket": "2", **options})


def _append_case() -> Case:
    first, second = _pk_rows(range(0, 40), 1), _pk_rows(range(30, 60), 2)

    def setup(cat: FileSystemCatalog) -> FileStoreTable:
        t = _pk_table(cat, {"changelog-producer": "input"})
        t.write_arrow(pa.Table.from_pylist(first))
        return t

    return Case(setup, lambda t: t.write_arrow(pa.Table.from_pylist(second)),
                _model(first, "k"), _model(first + second, "k"))


def _compaction_case() -> Case:
    first, second = _pk_rows(range(0, 40), 1), _pk_rows(range(20, 50), 2)

    def setup(cat: FileSystemCatalog) -> FileStoreTable:
        t = _pk_table(cat, {"deletion-vectors.enabled": "true", "write-only": "true"})
        t.write_arrow(pa.Table.from_pylist(first))
        compact_table(t, full=True)  # the first rows on the top level
        t.write_arrow(pa.Table.from_pylist(second))  # level 0, hidden from readers until compacted
        return t

    def action(t: FileStoreTable) -> object:
        result = compact_table(t)
        assert result.snapshot_id is not None
        return result

    return Case(setup, action, _model(first, "k"), _model(first + second, "k"))


def _delete_case() -> Case:
    rows = [{"k": k, "v": k * 10} for k in range(50)]

    def setup(cat: FileSystemCatalog) -> FileStoreTable:
        t = cat.create_table("db.t", "k INT NOT NULL, v BIGINT", options={"bucket": "-1",
                                                                         "deletion-vectors.enabled": "true"})
        t.write_arrow(pa.Table.from_pylist(rows))
        return t

    return Case(setup, lambda t: t.delete_where([("k", ">=", 35)]), _model(rows, "k"),
                _model([r for r in rows if r["k"] < 35], "k"))


CASES = {"append": _append_case, "compaction": _compaction_case, "delete": _delete_case}


# -- the property -----------------------------------------------------------------------------------

def _files(root: str) -> set[str]:
    return {os.path.join(d, f) for d, _, fs in os.walk(root) for f in fs}


def _fresh(base: Path, name: str, case: Case, injector: FaultInjector) -> tuple[str, FileStoreTable]:
    warehouse = str(base / name)
    cat = FileSystemCatalog(warehouse)
    assert isinstance(cat.io, FaultyFileIO)
    injector.arm("")
    cat.create_database("db")
    return warehouse, case.setup(cat)


def _after_publication(op: tuple[str, str, int]) -> bool:
    """The LATEST hint's temp file and rename come after the snapshot is published."""
    name = os.path.basename(op[1])
    return name == "LATEST" or name.startswith(".LATEST.")


def _check_point(base: Path, label: str, spec: str, late: bool, case: Case, injector: FaultInjector) -> None:
    warehouse, t = _fresh(base, label, case, injector)
    before_id = t.snapshots.latest_id()
    files_before = _files(t.path)
    injector.arm(spec)
    try:
        case.action(t)
        error = None
    except StorageError as e:
        error = e
    finally:
        failures = injector.failures
        injector.arm("")
    assert failures >= 1, f"{label}: the fault ({spec}) never fired"
    t = FileSystemCatalog(warehouse).get_table("db.t")
    if late:
        assert error is None, f"{label}: a failed LATEST hint must not fail a published commit: {error}"
        assert t.snapshots.latest_id() == before_id + 1
        assert _rows(t, case.key) == case.after
        assert _theirs(warehouse, "db.t", case.key) == case.after
        return
    assert error is not None, f"{label}: the action succeeded although write point {spec} failed"
    assert "No space left on device" in str(error), str(error)
    assert t.snapshots.latest_id() == before_id, f"{label}: a snapshot was published"
    assert _rows(t, case.key) == case.before
    assert _theirs(warehouse, "db.t", case.key) == case.before
    new = _files(t.path) - files_before
    assert not [f for f in new if f.endswith(".tmp")], f"{label}: temp files left: {new}"
    assert not [f for f in new if "/snapshot/" in f], f"{label}: snapshot files left: {new}"
    assert not [f for f in new if "/manifest/" in f], f"{label}: the failed commit left metadata: {new}"
    # space is back: the same action again applies its rows once
    case.action(t)
    assert t.snapshots.latest_id() == before_id + 1
    assert _rows(t, case.key) == case.after
    assert _theirs(warehouse, "db.t", case.key) == case.after
    remove_orphan_files(t, older_than_ms=0)
    keep = referenced_files(t, t.snapshots.snapshots())
    left = {f for f in _files(t.path) - keep if "/schema/" not in f and not f.endswith(("/LATEST", "/EARLIEST"))}
    assert not left, f"{label}: orphan cleanup left {left}"
    assert _rows(t, case.key) == case.after
    assert _theirs(warehouse, "db.t", case.key) == case.after


@pytest.mark.parametrize("name", list(CASES))
def test_every_write_point_of_a_commit_fails_cleanly_and_a_retry_applies_it_once(tmp_path, injector, name) -> None:
    case = CASES[name]()
    _, t = _fresh(tmp_path, "count", case, injector)
    injector.arm("")
    case.action(t)
    ops = list(injector.ops)
    kinds = {os.path.basename(os.path.dirname(p)) if k != RENAME else "rename" for k, p, _ in ops}
    assert ops and "snapshot" in kinds and "manifest" in kinds, ops
    if name == "append":
        assert any("/bucket-" in p and os.path.basename(p).startswith("changelog-") for _, p, _ in ops)
    if name in ("compaction", "delete"):
        assert any("/index/" in p for _, p, _ in ops), f"no deletion-vector index file written: {ops}"
    print(f"\n{name}: {len(ops)} write points: " + ", ".join(f"{k} {os.path.basename(p)[:24]}" for k, p, _ in ops))
    written = 0
    for i, op in enumerate(ops, start=1):
        late = _after_publication(op)
        _check_point(tmp_path, f"op{i}", f"fail-op={i}", late, case, injector)
        if op[0] != RENAME and op[2] > 1:
            # the budget runs out in the middle of this write: a torn file, and every later write fails
            _check_point(tmp_path, f"bytes{i}", f"enospc-after-bytes={written + op[2] // 2}", late, case, injector)
        written += op[2]


def test_fault_spec_errors_name_the_problem() -> None:
    from lsmlake.errors import InvalidInputError
    from tests.support.fault_fs import FaultSpec

    assert FaultSpec.parse("enospc-after-bytes=10,latency-ms=5,errno=EIO").latency_s == 0.005
    with pytest.raises(InvalidInputError, match="unknown key 'bogus'"):
        FaultSpec.parse("bogus=1")
    with pytest.raises(InvalidInputError, match="bad value 'x' for 'fail-op'"):
        FaultSpec.parse("fail-op=x")


def test_without_an_installed_injector_a_plain_fileio_is_used(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("LSMLAKE_FAULT_FS", "enospc-after-bytes=0")  # the variable that once switched faults on
    cat = FileSystemCatalog(str(tmp_path / "w"))
    assert type(cat.io).__name__ == "FileIO"


def test_slow_storage_only_slows_concurrent_commits_down(tmp_path, injector) -> None:
    """With 15 ms added to every write and rename and 2 ms to every read, four writers racing for snapshot
    ids still commit every batch exactly once (the race takes longer, nothing times out or tears)."""
    import threading

    cat = FileSystemCatalog(str(tmp_path / "w"))
    cat.create_database("db")
    t = cat.create_table("db.t", "k INT NOT NULL, v BIGINT", options={"bucket": "-1", "commit.max-retries": "50"})
    injector.arm("latency-ms=15,read-latency-ms=2")
    errors: list[BaseException] = []

    def writer(w: int) -> None:
        table = FileSystemCatalog(str(tmp_path / "w")).get_table("db.t")
        try:
            for i in range(3):
                table.write_arrow(pa.Table.from_pylist([{"k": w * 100 + i * 10 + j, "v": w} for j in range(10)]))
        except BaseException as e:
            errors.append(e)

    threads = [threading.Thread(target=writer, args=(w,)) for w in range(4)]
    for th in threads:
        th.start()
    for th in threads:
        th.join(300)
    assert injector.writes > 0 and not errors, errors
    injector.arm("")
    keys = sorted(r["k"] for r in t.to_arrow().to_pylist())
    assert keys == sorted(w * 100 + i * 10 + j for w in range(4) for i in range(3) for j in range(10))
    assert t.snapshots.latest_id() == 12
