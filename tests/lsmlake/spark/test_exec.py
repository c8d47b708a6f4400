"""Bucket compactions on a real local Spark: one job, one task per bucket, failures kept to their bucket."""

from __future__ import annotations

import itertools
import shutil
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from lsmlake.catalog.filesystem import FileSystemCatalog
from lsmlake.errors import InvalidInputError
from lsmlake.mergetree.compact.rewriter import MergeTreeCompactRewriter, changelog_prefix
from lsmlake.spark import compaction_job as spark_exec
from lsmlake.spark.bucket_task import with_bucket_files
from lsmlake.spark.compaction_job import (
    BucketTask,
    SparkCompactor,
    TaskOutcome,
    check_prefix,
    local_master_with_retries,
    run_bucket_task,
    run_with_retries,
    task_prefix,
)
from lsmlake.table.compact import commit_compaction, plan_bucket, split_dir
from tests.integration.interop.test_interop_pypaimon import pypaimon_read

pytest.importorskip("pyspark")
if shutil.which("java") is None:
    pytest.skip("Spark needs java", allow_module_level=True)

_n = itertools.count()
BUCKETS = 4


def _pk_table(warehouse: str, name: str = "t", buckets: int = BUCKETS, **extra: str):
    cat = FileSystemCatalog(warehouse)
    cat.create_database("db", ignore_if_exists=True)
    options = {"bucket": str(buckets), "write-only": "true"}
    options.update(extra)
    return cat.create_table(f"db.{name}", "k BIGINT NOT NULL, v BIGINT, s STRING", primary_keys=["k"],
                            options=options)


def _write(t, keys: np.ndarray, v: int) -> None:
    t.write_arrow(pa.table({"k": pa.array(keys, pa.int64()), "v": pa.array(np.full(len(keys), v), pa.int64()),
                            "s": pa.array([f"s{k}-{v}" for k in keys])}))


def _filled(warehouse: str, name: str = "t"):
    """A table whose 4 buckets each hold several overlapping level-0 files."""
    t = _pk_table(warehouse, name)
    rng = np.random.default_rng(11)
    for v in range(4):
        _write(t, rng.choice(400, 150, replace=False), v)
    _write(t, np.array([1, 2, 3]), 9)
    return t


def _tasks(t, prefix: str) -> list[BucketTask]:
    tasks = []
    for split in t.plan():
        unit = plan_bucket(t, split, full=True)
        if unit is not None:
            tasks.append(BucketTask.of(t.identifier, split, unit, True, prefix))
    return tasks


def _sorted(table: pa.Table) -> list[dict]:
    return sorted(table.select(["k", "v", "s"]).to_pylist(), key=lambda r: r["k"])


def _prefixed(t, task: BucketTask) -> list[str]:
    split = next(s for s in t.plan() if s.bucket == task.bucket)
    return [i.name for i in t.io.list(split_dir(t, split))
            if i.name.startswith((task.file_prefix, changelog_prefix(task.file_prefix)))]


@pytest.fixture(scope="module")
def compactor(spark):
    """A compactor on the package's Spark session (one JVM for all of tests/lsmlake/spark/): stopping a session
    of its own here would stop the package's too, under the data-source tests that run after this module."""
    c = SparkCompactor("local[2]")
    assert c.start() is spark
    yield c


@pytest.mark.integration
def test_all_buckets_compact_as_one_job_with_one_task_each(tmp_path, compactor) -> None:
    warehouse = str(tmp_path / "wh")
    t = _filled(warehouse)
    before = _sorted(t.to_arrow())
    splits = t.plan()
    assert len(splits) == BUCKETS and all(len(s.files) >= 3 for s in splits)
    tasks = _tasks(t, task_prefix("job1"))
    assert len(tasks) == BUCKETS

    outcomes = compactor.run(warehouse, tasks, job_group="one-job")
    assert compactor.last_job_task_count() == BUCKETS
    assert [o.task for o in outcomes] == tasks
    assert all(o.error is None and o.changes is not None and o.attempts == 1 for o in outcomes), outcomes
    assert all(o.bytes_read > 0 and o.bytes_written > 0 for o in outcomes)

    messages = [m for o in outcomes if (m := o.message()) is not None]
    assert all(f.file_name.startswith("data-compact-job1-") for m in messages for f in m.new_files)
    commit_compaction(t, messages)
    after = t.plan()
    assert all(len(s.files) == 1 and s.files[0].level == t.options.num_levels() - 1 for s in after)
    assert _sorted(t.to_arrow()) == before
    assert _sorted(pypaimon_read(warehouse, "db.t")) == before


@pytest.mark.integration
def test_a_failing_bucket_does_not_fail_the_others(tmp_path, compactor) -> None:
    warehouse = str(tmp_path / "wh")
    t = _filled(warehouse)
    before = _sorted(t.to_arrow())
    tasks = _tasks(t, task_prefix("job2"))
    # a unit naming a file that is not there: the plan is stale, nothing to retry
    missing = BucketTask(t.identifier, tasks[0].snapshot_id, tasks[0].partition, tasks[0].bucket,
                         (*tasks[0].unit_files, "data-gone-0.parquet"), tasks[0].output_level, True,
                         task_prefix("job2-missing"))
    # a unit whose last input is corrupt: it fails after writing the merge of the first section
    bad = _half_corrupt(warehouse)
    outcomes = compactor.run(warehouse, [missing, *tasks[1:], bad])
    assert compactor.last_job_task_count() == len(tasks) + 1
    by_task = {o.task: o for o in outcomes}
    assert by_task[missing].error is not None and "NotFoundError" in by_task[missing].error
    assert by_task[missing].changes is None and by_task[missing].attempts == 1
    assert by_task[bad].error is not None and by_task[bad].changes is None
    ok = [by_task[task] for task in tasks[1:]]
    assert all(o.error is None and o.changes is not None for o in ok)
    bad_table = FileSystemCatalog(warehouse).get_table(bad.table_id)
    assert _prefixed(bad_table, bad) == [], "the failed attempt's files are gone"
    assert _prefixed(t, missing) == []

    messages = [m for o in ok if (m := o.message()) is not None]
    commit_compaction(t, messages)
    assert _sorted(t.to_arrow()) == before == _sorted(pypaimon_read(warehouse, "db.t"))


@pytest.mark.integration
def test_executors_read_no_manifest(tmp_path, compactor) -> None:
    """Tasks made from a plan get their buckets' files on the driver; the executors then run without the
    table's manifests."""
    warehouse = str(tmp_path / "wh")
    t = _filled(warehouse)
    before = _sorted(t.to_arrow())
    planned = [BucketTask(t.identifier, task.snapshot_id, task.partition, task.bucket, task.unit_files,
                          task.output_level, task.full, task.file_prefix) for task in _tasks(t, task_prefix("job3"))]
    tasks = with_bucket_files(warehouse, planned)
    manifests = Path(t.path) / "manifest"
    shutil.move(manifests, manifests.with_name("manifest-away"))
    try:
        outcomes = compactor.run(warehouse, tasks)
    finally:
        shutil.move(manifests.with_name("manifest-away"), manifests)
    assert [o.task for o in outcomes] == tasks
    assert all(o.error is None and o.changes is not None for o in outcomes), outcomes
    commit_compaction(t, [m for o in outcomes if (m := o.message()) is not None])
    assert _sorted(t.to_arrow()) == before


def _half_corrupt(warehouse: str) -> BucketTask:
    """A one-bucket table whose unit rewrites keys 0..9 first, then meets a corrupt file of keys 50..59.

    Every file counts as big (tiny target size), so the lone file of keys 50..59 flushes the rewrite
    of the overlapping files before it; being on level 0 it is then rewritten into the max level too.
    """
    t = _pk_table(warehouse, f"bad{next(_n)}", buckets=1, **{"target-file-size": "1 kb"})
    _write(t, np.arange(10), 0)
    _write(t, np.arange(10), 1)
    _write(t, np.arange(50, 60), 2)
    split = t.plan()[0]
    unit = plan_bucket(t, split, full=True)
    assert unit is not None
    newest = max(split.files, key=lambda f: f.max_sequence_number)
    t.io.write_bytes(f"{split_dir(t, split)}/{newest.file_name}", b"not parquet")
    return BucketTask.of(t.identifier, split, unit, True, task_prefix(f"bad{next(_n)}"))


def test_a_failed_attempt_deletes_what_it_wrote(tmp_path, monkeypatch) -> None:
    warehouse = str(tmp_path / "wh")
    task = _half_corrupt(warehouse)
    written: list[str] = []
    rewrite = MergeTreeCompactRewriter.rewrite

    def spy(self, *args, **kwargs):
        result = rewrite(self, *args, **kwargs)
        written.extend(f.file_name for f in result.after)
        return result

    monkeypatch.setattr(MergeTreeCompactRewriter, "rewrite", spy)
    with pytest.raises(Exception, match="(?i)parquet"):
        run_bucket_task(warehouse, task)
    assert written and all(n.startswith(task.file_prefix) for n in written), "it wrote before failing"
    t = FileSystemCatalog(warehouse).get_table(task.table_id)
    assert _prefixed(t, task) == []
    outcome = run_with_retries(warehouse, task)
    assert outcome.error is not None and outcome.attempts == 1, "a corrupt file is not retried"


def test_transient_errors_are_retried_in_the_task(tmp_path, monkeypatch) -> None:
    calls = []
    task = BucketTask("db.t", 1, b"", 0, ("f",), 5, True, task_prefix("r"))
    done = TaskOutcome(task, b"x", None, 1, 0.0, 1, 2)

    def flaky(warehouse: str, t: BucketTask, storage: object = None) -> TaskOutcome:
        calls.append(t)
        if len(calls) < 3:
            raise OSError("connection reset")
        return done

    monkeypatch.setattr(spark_exec, "run_bucket_task", flaky)
    monkeypatch.setattr(spark_exec, "_RETRY_BACKOFF_S", 0.0)
    out = run_with_retries(str(tmp_path), task, attempts=3)
    assert out.error is None and out.changes == b"x" and out.attempts == 3
    calls.clear()
    out = run_with_retries(str(tmp_path), task, attempts=2)
    assert out.error == "OSError: connection reset" and out.attempts == 2


def test_local_masters_get_task_retries() -> None:
    assert local_master_with_retries("local[*]", 3) == "local[*,3]"
    assert local_master_with_retries("local[2]", 4) == "local[2,4]"
    assert local_master_with_retries("local", 3) == "local[1,3]"
    assert local_master_with_retries("local[2,5]", 3) == "local[2,5]"
    assert local_master_with_retries("spark://h:7077", 3) == "spark://h:7077"
    assert SparkCompactor().master == "local[*,3]"
    assert SparkCompactor(conf={"spark.task.maxFailures": "5"}).master == "local[*,5]"


@pytest.mark.parametrize("prefix", ["data-", "data-0a1b-", "", "data-x/y-", "data-abc"])
def test_prefixes_that_could_match_other_files_are_refused(prefix) -> None:
    with pytest.raises(InvalidInputError):
        check_prefix(prefix)


def test_unique_prefixes_are_accepted() -> None:
    check_prefix(task_prefix())
    check_prefix("data-job7-")
