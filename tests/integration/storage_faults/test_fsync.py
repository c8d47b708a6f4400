"""Durability on a local disk: every file a commit names is synced, with its directory, before the commit publishes it.

A recorder wraps `os.fsync`, `os.link` and `os.replace` and logs, in order, which file or directory
(path and inode, read from the descriptor) was synced and which name was linked or renamed into place.
For a real commit it then checks, for every file that the new snapshot reaches and the previous one did
not (data and changelog files, deletion-vector index files, manifests, manifest lists, the index
manifest, the snapshot file itself):

* the file's content was synced before the snapshot's own content, which was synced before the
  snapshot was linked into place;
* the directory of each such file was synced after the file was written and before the publication;
* the `snapshot/` directory was synced after the link (and before the LATEST hint moved);
* a bucket directory is synced once per batch of files, not once per file.

Object stores need no sync (a completed PUT is durable) and the write buffer's spill files are
private scratch files: neither makes an fsync.
"""

from __future__ import annotations

import errno
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pytest
from pyarrow.fs import _MockFileSystem

from lsmlake.catalog.filesystem import FileSystemCatalog
from lsmlake.catalog.reachability import referenced_files
from lsmlake.errors import CommitStateUnknownError, StorageError
from lsmlake.table.compact import compact_table
from lsmlake.table.file_store_table import FileStoreTable
from lsmlake.table.write_buffer import BufferedTableWrite

FSYNC = "fsync"
LINK = "link"
RENAME = "rename"


@dataclass(frozen=True)
class Event:
    """One recorded operation: an fsync of `path`, or a link or rename whose target is `path`."""

    kind: str
    path: str
    inode: int
    is_dir: bool


class Recorder:
    """The ordered log of syncs, links and renames of this process, with the queries the tests ask."""

    def __init__(self) -> None:
        self.events: list[Event] = []

    def clear(self) -> None:
        self.events = []

    def file_sync(self, path: str) -> int:
        """Index of the content sync of the file now at `path` (it may have been synced under a temp name)."""
        st = os.stat(path)
        found = [i for i, e in enumerate(self.events)
                 if e.kind == FSYNC and not e.is_dir and e.inode == st.st_ino
                 and os.path.dirname(e.path) == os.path.dirname(path)]
        assert found, f"{path} was never synced"
        return found[0]

    def dir_syncs(self, path: str) -> list[int]:
        return [i for i, e in enumerate(self.events) if e.kind == FSYNC and e.is_dir and e.path == path]

    def placed(self, kind: str, path: str) -> int:
        """Index of the link or rename that put a name at `path` (the last one)."""
        found = [i for i, e in enumerate(self.events) if e.kind == kind and e.path == path]
        assert found, f"nothing was {kind}ed to {path}"
        return found[-1]


@pytest.fixture
def recorder(monkeypatch: pytest.MonkeyPatch) -> Iterator[Recorder]:
    rec = Recorder()
    real_fsync, real_link, real_replace = os.fsync, os.link, os.replace

    def fsync(fd: int) -> None:
        path = os.readlink(f"/proc/self/fd/{fd}")
        st = os.fstat(fd)
        real_fsync(fd)
        rec.events.append(Event(FSYNC, path, st.st_ino, os.path.isdir(path)))

    def link(src: str, dst: str, *args: object, **kwargs: object) -> None:
        real_link(src, dst, *args, **kwargs)  # type: ignore[arg-type]
        rec.events.append(Event(LINK, os.fspath(dst), os.stat(dst).st_ino, False))

    def replace(src: str, dst: str, *args: object, **kwargs: object) -> None:
        real_replace(src, dst, *args, **kwargs)  # type: ignore[arg-type]
        rec.events.append(Event(RENAME, os.fspath(dst), os.stat(dst).st_ino, False))

    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(os, "link", link)
    monkeypatch.setattr(os, "replace", replace)
    yield rec


# -- the commits under test -------------------------------------------------------------------------

def _rows(keys: range, v: int) -> pa.Table:
    return pa.Table.from_pylist([{"k": k, "dt": "a" if k % 2 else "b", "v": v * 1000 + k} for k in keys])


def _pk_table(cat: FileSystemCatalog, options: dict[str, str]) -> FileStoreTable:
    # a tiny target file size: every write rolls several files per bucket
    return cat.create_table("db.t", "k INT NOT NULL, dt STRING NOT NULL, v BIGINT", partition_keys=["dt"],
                            primary_keys=["k", "dt"], options={"bucket": "2", "target-file-size": "300 b", **options})


def _append(cat: FileSystemCatalog) -> tuple[FileStoreTable, Callable[[FileStoreTable], object]]:
    t = _pk_table(cat, {"changelog-producer": "input"})
    t.write_arrow(_rows(range(0, 40), 1))
    return t, lambda t: t.write_arrow(_rows(range(30, 90), 2))


def _dv_compaction(cat: FileSystemCatalog) -> tuple[FileStoreTable, Callable[[FileStoreTable], object]]:
    t = _pk_table(cat, {"deletion-vectors.enabled": "true", "write-only": "true"})
    t.write_arrow(_rows(range(0, 40), 1))
    compact_table(t, full=True)
    t.write_arrow(_rows(range(20, 50), 2))
    return t, lambda t: compact_table(t)


def _dv_delete(cat: FileSystemCatalog) -> tuple[FileStoreTable, Callable[[FileStoreTable], object]]:
    t = cat.create_table("db.t", "k INT NOT NULL, v BIGINT", options={"bucket": "-1",
                                                                     "deletion-vectors.enabled": "true"})
    t.write_arrow(pa.Table.from_pylist([{"k": k, "v": k} for k in range(50)]))
    return t, lambda t: t.delete_where([("k", ">=", 35)])


CASES = {"append-with-changelog": _append, "deletion-vector-compaction": _dv_compaction,
         "deletion-vector-delete": _dv_delete}


def _catalog(tmp_path: Path) -> FileSystemCatalog:
    cat = FileSystemCatalog(str(tmp_path / "wh"))
    cat.create_database("db")
    return cat


# -- the properties -----------------------------------------------------------------------------------

@pytest.mark.parametrize("case", list(CASES))
def test_every_file_a_snapshot_names_is_synced_before_it_is_published(tmp_path: Path, recorder: Recorder,
                                                                      case: str) -> None:
    t, action = CASES[case](_catalog(tmp_path))
    before = t.snapshots.latest()
    assert before is not None
    recorder.clear()
    action(t)
    snap = t.snapshots.latest()
    assert snap is not None and snap.id == before.id + 1
    snapshot_path = t.snapshots.path(snap.id)
    new = referenced_files(t, [snap]) - referenced_files(t, [before]) - {snapshot_path}
    assert any("/manifest/manifest-list-" in p for p in new)
    if case != "deletion-vector-delete":
        assert any("/bucket-" in p for p in new)
    if case != "append-with-changelog":
        assert any("/index/index-" in p for p in new) and any("/manifest/index-manifest-" in p for p in new)

    published = recorder.placed(LINK, snapshot_path)
    snapshot_synced = recorder.file_sync(snapshot_path)
    for path in sorted(new):
        assert recorder.file_sync(path) < snapshot_synced, f"{path} was synced after the snapshot naming it"
    assert snapshot_synced < published, "the snapshot was published before its content was synced"

    # each directory that got a new name was synced after its last new file and before the publication
    for directory in sorted({os.path.dirname(p) for p in new}):
        last_file = max(recorder.file_sync(p) for p in new if os.path.dirname(p) == directory)
        assert [i for i in recorder.dir_syncs(directory) if last_file < i < published], \
            f"directory {directory} was not synced between its files and the snapshot's publication"

    # the snapshot directory is synced after the link, before anything else happens to it (the LATEST hint)
    hint = recorder.placed(RENAME, f"{t.snapshots.dir}/LATEST")
    assert [i for i in recorder.dir_syncs(t.snapshots.dir) if published < i < hint], \
        "the snapshot directory was not synced after the snapshot was linked into it"
    assert recorder.file_sync(f"{t.snapshots.dir}/LATEST") < hint
    assert [i for i in recorder.dir_syncs(t.snapshots.dir) if i > hint], "the LATEST rename was not synced"


def test_a_bucket_directory_is_synced_once_per_batch_of_files(tmp_path: Path, recorder: Recorder) -> None:
    t = _pk_table(_catalog(tmp_path), {})
    recorder.clear()
    t.write_arrow(_rows(range(0, 200), 1))
    snap = t.snapshots.latest()
    assert snap is not None
    data = [p for p in referenced_files(t, [snap]) if "/bucket-" in p]
    for directory in sorted({os.path.dirname(p) for p in data}):
        files = [p for p in data if os.path.dirname(p) == directory]
        assert len(files) >= 3, "the test needs several files per bucket"
        for p in files:
            recorder.file_sync(p)
        assert len(recorder.dir_syncs(directory)) == 1, f"{directory}: one sync for the batch of {len(files)} files"
    # one sync for the manifest directory, whatever the number of manifests the commit wrote
    assert len(recorder.dir_syncs(t.manifests.dir)) == 1


def test_a_new_table_survives_a_power_cut(tmp_path: Path, recorder: Recorder) -> None:
    """The schema file is synced before it is linked, and every new directory entry up to the warehouse."""
    cat = _catalog(tmp_path)
    recorder.clear()
    t = _pk_table(cat, {})
    schema = f"{t.path}/schema/schema-0"
    published = recorder.placed(LINK, schema)
    assert recorder.file_sync(schema) < published
    assert [i for i in recorder.dir_syncs(f"{t.path}/schema") if i > published]
    # the new table and schema directories are entries of their parents: those were synced too
    assert recorder.dir_syncs(os.path.dirname(t.path)) and recorder.dir_syncs(t.path)


# -- failing syncs ---------------------------------------------------------------------------------

def _fail_fsync(monkeypatch: pytest.MonkeyPatch, when: Callable[[str], bool]) -> list[str]:
    """Make os.fsync fail with EIO for the paths `when` accepts; the failed paths are returned as they fail."""
    real = os.fsync
    failed: list[str] = []

    def fsync(fd: int) -> None:
        path = os.readlink(f"/proc/self/fd/{fd}")
        if when(path):
            failed.append(path)
            raise OSError(errno.EIO, os.strerror(errno.EIO))
        real(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    return failed


def test_a_data_file_batch_whose_directory_cannot_be_synced_is_deleted(tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    t = _pk_table(_catalog(tmp_path), {})
    failed = _fail_fsync(monkeypatch, lambda p: os.path.basename(p).startswith("bucket-"))
    with pytest.raises(StorageError, match="Input/output error"):
        t.write_arrow(_rows(range(0, 50), 1))
    assert failed
    assert t.snapshots.latest() is None
    leftovers = [f for d, _, fs in os.walk(t.path) if "bucket-" in d for f in fs]
    assert leftovers == []


def test_a_commit_whose_manifests_cannot_be_synced_publishes_nothing(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    t = _pk_table(_catalog(tmp_path), {})
    t.write_arrow(_rows(range(0, 10), 1))
    manifests = set(os.listdir(t.manifests.dir))
    failed = _fail_fsync(monkeypatch, lambda p: p == t.manifests.dir)
    with pytest.raises(StorageError, match="was not applied"):
        t.write_arrow(_rows(range(10, 20), 2))
    assert failed
    assert t.snapshots.latest_id() == 1
    assert set(os.listdir(t.manifests.dir)) == manifests  # the manifests it wrote were deleted


def test_a_snapshot_published_but_not_synced_is_an_unknown_outcome(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """Visible but maybe not durable: neither a success (it could be lost) nor a failure (it may stay)."""
    t = _pk_table(_catalog(tmp_path), {})
    t.write_arrow(_rows(range(0, 10), 1))
    failed = _fail_fsync(monkeypatch, lambda p: p == t.snapshots.dir)
    with pytest.raises(CommitStateUnknownError, match="may not survive a power cut"):
        t.write_arrow(_rows(range(10, 20), 2))
    assert failed
    assert t.snapshots.latest_id() == 2
    assert sorted(r["k"] for r in t.to_arrow().to_pylist()) == list(range(20))  # its files were kept


# -- what needs no sync ----------------------------------------------------------------------------

def test_an_object_store_commit_makes_no_fsync(recorder: Recorder) -> None:
    cat = FileSystemCatalog("bucket/wh", filesystem=_MockFileSystem())
    assert not cat.io.local
    cat.create_database("db")
    t = _pk_table(cat, {"changelog-producer": "input"})
    t.write_arrow(_rows(range(0, 40), 1))
    t.write_arrow(_rows(range(30, 60), 2))
    assert sorted(r["k"] for r in cat.get_table("db.t").to_arrow().to_pylist()) == list(range(60))
    assert t.snapshots.latest_id() == 2
    assert [e for e in recorder.events if e.kind == FSYNC] == []


def test_spill_files_of_the_write_buffer_are_not_synced(tmp_path: Path, recorder: Recorder) -> None:
    t = _catalog(tmp_path).create_table("db.t", "k INT NOT NULL, a BIGINT", primary_keys=["k"],
                                        options={"bucket": "1", "write-buffer-size": "600 b",
                                                 "write-buffer-spillable": "true"})
    spill_root = str(tmp_path / "spill")
    with BufferedTableWrite(t, spill_root=spill_root) as bw:
        for i in range(20):
            bw.write(pa.table({"k": pa.array(range(i * 10, i * 10 + 10), pa.int32()), "a": [i] * 10}))
        assert bw.stats().spill_count > 0
        t.commit_messages(bw.prepare_commit())
    assert t.snapshots.latest_id() == 1
    synced = [e.path for e in recorder.events if e.kind == FSYNC]
    assert synced and not [p for p in synced if p.startswith(spill_root)]
