"""A bucket task carries its bucket's files: the driver scans once per partition, the executor reads no manifest.

The executor's side runs in this process (`run_bucket_task`, no Spark): a task given its files on the driver
then runs with the table's manifest folder moved away, so any manifest read would fail.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from lsmlake.catalog.filesystem import FileSystemCatalog
from lsmlake.errors import InvalidInputError, NotFoundError
from lsmlake.spark.bucket_task import with_bucket_files
from lsmlake.spark.compaction_job import BucketTask, SparkCompactor, run_bucket_task, task_prefix
from lsmlake.table.compact import commit_compaction, plan_bucket
from lsmlake.table.file_store import FileStore
from lsmlake.table.file_store_table import FileStoreTable
from lsmlake.table.schema_change import RenameColumn


def _table(warehouse: str, name: str, options: dict[str, str], pk: bool = True,
           partitioned: bool = False) -> FileStoreTable:
    cat = FileSystemCatalog(warehouse)
    cat.create_database("db", ignore_if_exists=True)
    return cat.create_table(f"db.{name}", "k BIGINT NOT NULL, dt STRING NOT NULL, v BIGINT",
                            primary_keys=["k", "dt"] if pk else (), partition_keys=["dt"] if partitioned else (),
                            options={"bucket": "2", "bucket-key": "k", "write-only": "true", **options})


def _write(t: FileStoreTable, keys: range, v: int) -> None:
    t.write_arrow(pa.table({"k": pa.array(np.array(keys), pa.int64()),
                            "dt": pa.array(["a" if k % 2 else "b" for k in keys]),
                            "v": pa.array(np.full(len(keys), v), pa.int64())}))


def _rows(t: FileStoreTable) -> list[dict]:
    return sorted(t.to_arrow().to_pylist(), key=lambda r: (r["k"], r["dt"]))


def _plan_tasks(t: FileStoreTable, full: bool, prefix: str) -> list[BucketTask]:
    """The tasks as the compactor makes them from a plan: the unit's file names, no bucket files."""
    tasks = []
    for split in t.new_scan(None, None, all_levels=True).plan():
        unit = plan_bucket(t, split, full)
        if unit is not None:
            tasks.append(BucketTask(t.identifier, split.snapshot_id, split.partition, split.bucket,
                                    tuple(f.file_name for f in unit.files), unit.output_level,
                                    full or unit.file_rewrite, prefix))
    return tasks


@contextmanager
def _manifests_away(t: FileStoreTable) -> Iterator[None]:
    folder = Path(t.path) / "manifest"
    away = folder.with_name("manifest-away")
    shutil.move(folder, away)
    try:
        yield
    finally:
        shutil.move(away, folder)


def _compact_without_manifests(warehouse: str, t: FileStoreTable, full: bool) -> list[BucketTask]:
    tasks = with_bucket_files(warehouse, _plan_tasks(t, full, task_prefix("carried")))
    assert tasks and all(task.bucket_files for task in tasks)
    with _manifests_away(t):
        outcomes = [run_bucket_task(warehouse, task) for task in tasks]
    commit_compaction(t, [m for o in outcomes for m in o.messages()])
    return tasks


@pytest.mark.parametrize("kind", ["primary-key", "lookup-changelog", "deletion-vectors", "append"])
def test_a_task_given_its_files_on_the_driver_runs_without_reading_a_manifest(tmp_path: Path, kind: str) -> None:
    warehouse = str(tmp_path / "wh")
    options = {"lookup-changelog": {"changelog-producer": "lookup"},
               "deletion-vectors": {"deletion-vectors.enabled": "true"}}.get(kind, {})
    t = _table(warehouse, "t", options, pk=kind != "append", partitioned=True)
    _write(t, range(0, 60), 0)
    if kind != "append":
        _compact_without_manifests(warehouse, t, full=True)  # every bucket now has a file on the highest level
    _write(t, range(20, 80), 1)
    _write(t, range(40, 100), 2)
    writes = [range(0, 60), range(20, 80), range(40, 100)]
    if kind == "deletion-vectors":
        for v in (3, 4):  # lookup compactions mark the rows they replace on the levels below: an index file
            _compact_without_manifests(warehouse, t, full=False)
            writes.append(range(40 + v * 5, 70 + v * 5))
            _write(t, writes[-1], v)
    expected = {(k, "a" if k % 2 else "b"): v for v, keys in enumerate(writes) for k in keys}

    tasks = _compact_without_manifests(warehouse, t, full=kind in ("primary-key", "append"))

    if kind == "deletion-vectors":
        assert any(task.dv_index is not None for task in tasks), "no task carried a deletion-vector index"
    if kind == "append":
        assert len(_rows(t)) == 60 + 60 + 60
    else:
        assert {(r["k"], r["dt"]): r["v"] for r in _rows(t)} == expected


def test_the_driver_scans_once_per_partition_and_the_task_carries_the_whole_bucket(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    warehouse = str(tmp_path / "wh")
    t = _table(warehouse, "t", {}, partitioned=True)
    for v in range(3):
        _write(t, range(v * 10, v * 10 + 40), v)
    splits = t.new_scan(None, None, all_levels=True).plan()
    assert len(splits) == 4 and len({s.partition for s in splits}) == 2
    planned = _plan_tasks(t, True, task_prefix("once"))
    scans = []
    new_scan = FileStore.new_scan
    monkeypatch.setattr(FileStore, "new_scan", lambda self, *a, **kw: scans.append(a) or new_scan(self, *a, **kw))

    given = with_bucket_files(warehouse, planned)

    assert len(scans) == 2, "one scan per partition, not one per bucket"
    expected = [BucketTask.of(t.identifier, s, u, True, task_prefix("once"))
                for s in splits if (u := plan_bucket(t, s, True)) is not None]
    assert given == expected
    assert with_bucket_files(warehouse, given) == given and len(scans) == 2, "tasks with files are kept as they are"
    split = given[0].split(FileSystemCatalog(warehouse).get_table("db.t"))
    assert split == splits[0], "the executor's split is the scan's, every level and file of the bucket"


def test_an_older_file_is_read_with_its_own_schema_without_the_manifests(tmp_path: Path) -> None:
    warehouse = str(tmp_path / "wh")
    t = _table(warehouse, "t", {})
    _write(t, range(0, 30), 0)
    _write(t, range(10, 40), 1)
    t = FileSystemCatalog(warehouse).alter_table("db.t", [RenameColumn("v", "value")])
    before = sorted(t.to_arrow().to_pylist(), key=lambda r: r["k"])
    assert before and "value" in before[0]

    _compact_without_manifests(warehouse, t, full=True)

    after = FileSystemCatalog(warehouse).get_table("db.t")
    assert sorted(after.to_arrow().to_pylist(), key=lambda r: r["k"]) == before
    assert all(f.schema_id == after.schema.id for s in after.plan() for f in s.files)


def test_a_bucket_without_files_and_a_unit_file_not_in_the_bucket_are_named(tmp_path: Path) -> None:
    warehouse = str(tmp_path / "wh")
    t = _table(warehouse, "t", {})
    _write(t, range(0, 40), 0)
    _write(t, range(0, 40), 1)
    task = _plan_tasks(t, True, task_prefix("named"))[0]
    gone = BucketTask(task.table_id, task.snapshot_id, task.partition, 7, task.unit_files, task.output_level, True,
                      task.file_prefix)
    stale = BucketTask(task.table_id, task.snapshot_id, task.partition, task.bucket,
                       (*task.unit_files, "data-gone-0.parquet"), task.output_level, True, task.file_prefix)
    gone, stale = with_bucket_files(warehouse, [gone, stale])
    assert gone.bucket_files == ()
    with _manifests_away(t):
        with pytest.raises(NotFoundError, match=f"bucket 7 of db.t has no files at snapshot {task.snapshot_id}"):
            run_bucket_task(warehouse, gone)
        with pytest.raises(NotFoundError, match="data-gone-0.parquet"):
            run_bucket_task(warehouse, stale)
        with pytest.raises(InvalidInputError, match="carries no files of its bucket"):
            run_bucket_task(warehouse, task)


def test_a_bucket_the_driver_cannot_read_fails_without_running(tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """As it failed in its executor: a missing table at once, an I/O error after every attempt; no Spark job."""
    import lsmlake.spark.compaction_job as job

    warehouse = str(tmp_path / "wh")
    t = _table(warehouse, "t", {})
    _write(t, range(0, 40), 0)
    _write(t, range(0, 40), 1)
    task = _plan_tasks(t, True, task_prefix("unread"))[0]
    dropped = BucketTask("db.dropped", 1, b"", 0, ("f",), 5, True, task_prefix("unread"))
    compactor = SparkCompactor("local[1]", task_attempts=3)
    monkeypatch.setattr(job, "_RETRY_BACKOFF_S", 0.0)

    [out] = compactor.run(warehouse, [dropped])
    assert out.task == dropped and out.changes is None and out.attempts == 1
    assert out.error is not None and out.error.startswith("NotFoundError"), out.error

    def unreadable(warehouse: str, tasks: list[BucketTask]) -> list[BucketTask]:
        raise OSError("connection reset")

    monkeypatch.setattr(job, "with_bucket_files", unreadable)
    [out] = compactor.run(warehouse, [task])
    assert out.task == task and out.error == "OSError: connection reset" and out.attempts == 3
    assert compactor.last_job_task_count() == 0 and compactor._spark is None
