"""Running planned bucket compactions on Spark: one job per plan, one task per bucket.

The driver plans (`plan_bucket`) and commits; a Spark task only runs one bucket's unit
(`run_planned`) and ships the file changes back as serialized `FileChanges`. The driver reads the
manifests, executors never do: a task carries the metadata of its bucket's files (`BucketTask`).

Retries happen in two layers, each for what it can see:
1. in the task, `run_with_retries` retries an attempt that raised a transient I/O error (after
   deleting that attempt's files), and turns a failure that is final - a deterministic error or the
   last attempt - into a `TaskOutcome` with `error` set. Spark never sees an application error, so
   one bad bucket cannot abort the job and lose the other buckets' results;
2. Spark's task retry (`spark.task.maxFailures`) covers what no Python code can catch: a Python
   worker that crashed or was killed, a lost executor. A retried Spark attempt first deletes what a
   crashed attempt left behind (by file prefix). When even those retries run out, Spark aborts the
   job; `SparkCompactor.run` then deletes every task's files and reports every task as failed.
"""

from __future__ import annotations

import contextlib
import functools
import os
import re
import sys
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from lsmlake.catalog.filesystem import FileSystemCatalog
from lsmlake.errors import InvalidInputError, NotFoundError
from lsmlake.format.bucket import POSTPONE_BUCKET
from lsmlake.format.data_file_writer import bucket_dir
from lsmlake.fs.storage_settings import StorageSettings
from lsmlake.mergetree.compact.rewriter import DATA_PREFIX, changelog_prefix
from lsmlake.proto_gen.lsmlake.v1 import common_pb2
from lsmlake.rpc.convert import changes_from_proto, changes_to_proto
from lsmlake.spark.bucket_task import BucketTask, with_bucket_files
from lsmlake.spark.workers import check_workers, is_local, package_zip
from lsmlake.table.compact import run_planned, written_files
from lsmlake.table.file_store_table import FileStoreTable
from lsmlake.table.postpone import place_partition, postponed
from lsmlake.table.write import CommitMessage

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

DEFAULT_TASK_MAX_FAILURES = 3
DEFAULT_TASK_ATTEMPTS = 3
_RETRY_BACKOFF_S = 0.5
DEFAULT_START_CHECK_S = 120.0
PROGRESS_POLL_S = 1.0  # how often a running job's progress is looked at (its heartbeat, and its deadline)
# Writers name data files `data-<uuid4>-0.parquet`: a prefix whose run-specific part holds a character
# that is not hex or '-' can never match one of them, so deleting by such a prefix is safe.
_UUID_CHARS = re.compile(r"[0-9a-f-]*")


@dataclass(frozen=True)
class TaskOutcome:
    """What one bucket task did: its serialized `FileChanges` (None when nothing changed) or its error.

    `attempts` counts the in-task attempts of the Spark attempt that reported; `bytes_read` is the
    size of the input files that were rewritten (not the ones moved up a level unchanged);
    `bytes_written` the size of the new data, changelog and index files.
    """

    task: BucketTask
    changes: bytes | None
    error: str | None
    attempts: int
    seconds: float
    bytes_read: int
    bytes_written: int
    more: tuple[bytes, ...] = ()  # the changes of other buckets: placing postponed rows fills several
    expired: bool = False  # the job passed its deadline and was cancelled

    def message(self) -> CommitMessage | None:
        """The file changes as a commit message for `commit_compaction` (the first bucket's: see `messages`)."""
        if self.changes is None:
            return None
        return changes_from_proto(common_pb2.FileChanges.FromString(self.changes))

    def serialized(self) -> list[bytes]:
        """Every bucket's serialized `FileChanges`."""
        return [*([self.changes] if self.changes is not None else []), *self.more]

    def messages(self) -> list[CommitMessage]:
        """Every bucket's file changes, for `commit_compaction`."""
        return [changes_from_proto(common_pb2.FileChanges.FromString(c)) for c in self.serialized()]


def task_prefix(run_id: str | None = None) -> str:
    """A data-file prefix unique to one compaction run, safe to delete by (`data-compact-<run>-`)."""
    return f"{DATA_PREFIX}compact-{run_id or uuid.uuid4().hex}-"


def check_prefix(file_prefix: str) -> None:
    """Refuse a prefix that could match files other writers name (deleting by it would lose data)."""
    own = file_prefix.removeprefix(DATA_PREFIX)
    if not own or "/" in file_prefix or _UUID_CHARS.fullmatch(own):
        raise InvalidInputError(f"file_prefix {file_prefix!r} could match other files: it needs a part of "
                                f"its own after {DATA_PREFIX!r} with a character that is not hex or '-'")


def delete_outputs(table: FileStoreTable, task: BucketTask) -> int:
    """Delete the data and changelog files a run of `task` wrote in its bucket (found by prefix)."""
    check_prefix(task.file_prefix)
    partition_dir = table.schema.partition_dir(table.partition_values(task.partition))
    directories = [bucket_dir(table.path, partition_dir, task.bucket)]
    if task.bucket == POSTPONE_BUCKET:  # placing postponed rows writes into the partition's real buckets
        root = f"{table.path}/{partition_dir}" if partition_dir else table.path
        directories = [i.path for i in table.io.list(root) if i.is_dir and i.name.startswith("bucket-")]
    prefixes = (task.file_prefix, changelog_prefix(task.file_prefix))
    deleted = 0
    for directory in directories:
        for info in table.io.list(directory):
            if not info.is_dir and info.name.startswith(prefixes):
                deleted += table.io.delete_quietly(info.path)
    return deleted


def run_bucket_task(warehouse: str, task: BucketTask, storage: StorageSettings | None = None) -> TaskOutcome:
    """One attempt at one bucket's unit, in a Spark Python worker; raises on failure.

    Opens the table, runs the unit on the bucket's files the task carries (it reads no manifest) and
    returns the changes as serialized `FileChanges`. On a failure it deletes the files it wrote (by
    prefix, plus a deletion-vector index file already named in its changes) before re-raising, so the
    next attempt starts clean.

    Memory: the unit is merged in Arrow, in the Python worker (outside the JVM heap). The engine reads
    each sorted run a file at a time, merges key-range chunks and writes whole target-size files as they
    fill, so a task needs about one input file per sorted run plus two output files, whatever the
    bucket's size.
    """
    check_prefix(task.file_prefix)
    start = time.perf_counter()
    table = FileSystemCatalog(warehouse, storage=storage).get_table(task.table_id)
    msgs: list[CommitMessage] = []
    try:
        if task.bucket == POSTPONE_BUCKET:
            msgs = place_task(table, task)
        else:
            msg = run_planned(table, task.split(table), task.unit_files, task.output_level, task.full,
                              task.file_prefix)
            msgs = [msg] if msg is not None else []
        serialized = [changes_to_proto(m).SerializeToString() for m in msgs]
    except BaseException:
        # best effort: a failing cleanup must not hide the error (orphan cleanup finds leftovers by prefix)
        with contextlib.suppress(Exception):
            for path in written_files(table, msgs):
                table.io.delete_quietly(path)
            delete_outputs(table, task)
        raise
    finally:
        # Spark reuses its Python workers: hand the task's freed Arrow buffers back to the system now,
        # instead of letting each worker keep the high-water mark of the largest bucket it ever merged
        pa.default_memory_pool().release_unused()
    read = written = 0
    for msg in msgs:
        old = {f.file_name for f in msg.deleted_files}
        new = {f.file_name for f in msg.new_files}
        read += sum(f.file_size for f in msg.deleted_files if f.file_name not in new)
        written += (sum(f.file_size for f in msg.new_files if f.file_name not in old)
                    + sum(f.file_size for f in msg.changelog_files)
                    + sum(e.file_size for e in msg.new_index_files))
    return TaskOutcome(task, serialized[0] if serialized else None, None, 1, time.perf_counter() - start, read,
                       written, tuple(serialized[1:]))


def place_task(table: FileStoreTable, task: BucketTask) -> list[CommitMessage]:
    """Place a partition's postponed rows (the task's files, at its snapshot) in the partition's buckets."""
    snap = table.snapshots.snapshot(task.snapshot_id)
    waiting, counts = postponed(table, snap)
    files = {f.file_name: f for f in waiting.get(task.partition, [])}
    missing = [n for n in task.unit_files if n not in files]
    if missing:
        raise NotFoundError(f"postpone file(s) {', '.join(missing[:3])} of {table.identifier} are not live at "
                            f"snapshot {task.snapshot_id}")
    known = counts.get(task.partition)
    ordered = sorted((files[n] for n in task.unit_files), key=lambda f: (f.creation_time_ms or 0, f.file_name))
    return place_partition(table, task.partition, ordered, known, task.file_prefix)


def _transient(e: BaseException) -> bool:
    """An error another attempt may not meet: I/O trouble, but not a missing or forbidden file."""
    return isinstance(e, OSError) and not isinstance(e, (FileNotFoundError, PermissionError))


def run_with_retries(warehouse: str, task: BucketTask, attempts: int = DEFAULT_TASK_ATTEMPTS,
                     storage: StorageSettings | None = None) -> TaskOutcome:
    """Run a bucket task, retrying transient errors in the task; a final failure becomes the outcome's error.

    Never raises for an `Exception`: the caller's other buckets must not fail with this one.
    """
    from pyspark import TaskContext

    start = time.perf_counter()
    ctx = TaskContext.get()
    if ctx is not None and ctx.attemptNumber() > 0:
        # Spark retries after a crash that left no chance to clean up
        try:
            delete_outputs(FileSystemCatalog(warehouse, storage=storage).get_table(task.table_id), task)
        except Exception:  # noqa: BLE001 - the attempt below reports the real problem
            pass
    attempt = 0
    while True:
        attempt += 1
        try:
            out = run_bucket_task(warehouse, task, storage)
            return TaskOutcome(task, out.changes, None, attempt, time.perf_counter() - start, out.bytes_read,
                               out.bytes_written, out.more)
        except Exception as e:  # noqa: BLE001 - reported in the outcome
            if attempt >= attempts or not _transient(e):
                return TaskOutcome(task, None, f"{type(e).__name__}: {e}", attempt, time.perf_counter() - start,
                                   0, 0)
        time.sleep(_RETRY_BACKOFF_S * attempt)


def local_master_with_retries(master: str, max_failures: int) -> str:
    """`local[N]` as `local[N,F]`: Spark's local mode retries a failed task only when F is given."""
    if master == "local":
        return f"local[1,{max_failures}]"
    m = re.fullmatch(r"local\[([^,\]]+)\]", master)
    return f"local[{m.group(1)},{max_failures}]" if m else master


@dataclass(frozen=True)
class JobProgress:
    """The tasks of a running job: finished (successfully or not), running now, and in all."""

    done: int
    active: int
    total: int


class _Watch:
    """Watches one running job: reports its progress as it changes and cancels it at its deadline."""

    def __init__(self, compactor: SparkCompactor, group: str, deadline_s: float | None,
                 on_progress: Callable[[JobProgress], None] | None) -> None:
        self.compactor = compactor
        self.group = group
        self.deadline_s = deadline_s
        self.on_progress = on_progress
        self.expired = False
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._last: JobProgress | None = None

    def start(self) -> None:
        if self.deadline_s is None and self.on_progress is None:
            return
        self._thread = threading.Thread(target=self._watch, name=f"watch-{self.group}", daemon=True)
        self._thread.start()

    def _watch(self) -> None:
        until = None if self.deadline_s is None else time.monotonic() + self.deadline_s
        while True:
            wait = PROGRESS_POLL_S if until is None else min(PROGRESS_POLL_S, max(0.0, until - time.monotonic()))
            if self._stop.wait(wait):
                return
            self._report()
            if until is not None and time.monotonic() >= until:
                # again at every poll until the job ends: a cancel that came just before the job was submitted
                # would otherwise cancel nothing
                self.expired = True
                self.compactor.cancel(self.group)
                until = time.monotonic() + PROGRESS_POLL_S  # the next cancel a poll later, not at once

    def _report(self) -> None:
        if self.on_progress is None:
            return
        try:
            now = self.compactor.progress(self.group)
        except Exception:  # noqa: BLE001 - a heartbeat missed is not the job's failure
            return
        if now != self._last:
            self._last = now
            self.on_progress(now)

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join()
            self._thread = None
            self._report()  # the last word: how the job ended


class SparkCompactor:
    """Runs bucket tasks as one Spark job per call, on one long-lived SparkSession.

    Several callers may run jobs at once (one per thread; Spark schedules them side by side), each with its own
    deadline: a job still running at its deadline is cancelled (its job group) and its outputs deleted, so a lost
    worker or a hung task never holds the caller longer. Only one SparkCompactor should be started per process
    (Spark allows one active SparkContext).

    On a cluster master (`spark://...`, `k8s://...`, `yarn`) lsmlake ships itself with the jobs and checks at start
    that the workers' Python can run them (`lsmlake.spark.workers`); the executors get the warehouse's storage
    settings this process resolved (its AWS environment, overridden by the URI's parameters) with their tasks,
    never in the Spark conf (which the JVM's command line shows).
    """

    def __init__(self, master: str = "local[*]", app_name: str = "lsmlake-compactor",
                 conf: dict[str, str] | None = None, *, task_attempts: int = DEFAULT_TASK_ATTEMPTS,
                 warehouse: str | None = None, start_check_timeout_s: float = DEFAULT_START_CHECK_S) -> None:
        """`conf` overrides the defaults below; `task_attempts` bounds the in-task retries of one bucket.

        In local mode Spark does not retry a failed task unless the master says so (`local[N,F]`), so
        `local`, `local[N]` and `local[*]` become `local[...,F]` with F = `spark.task.maxFailures`.
        The Python of the workers is `spark.pyspark.python` from `conf`, else `PYSPARK_PYTHON`, else this
        process's interpreter.
        `start_check_timeout_s`: how long the start check on a cluster waits for an executor.
        `warehouse`: unused since the storage settings travel with each job's tasks (`executor_storage`); kept
        for callers that name it.
        """
        user = dict(conf or {})
        max_failures = int(user.get("spark.task.maxFailures", DEFAULT_TASK_MAX_FAILURES))
        self.master = local_master_with_retries(master, max_failures)
        self.app_name = app_name
        self.task_attempts = task_attempts
        self.start_check_timeout_s = start_check_timeout_s
        python = user.get("spark.pyspark.python") or os.environ.get("PYSPARK_PYTHON") or sys.executable
        self.conf = {
            "spark.ui.enabled": "false",
            "spark.ui.showConsoleProgress": "false",
            "spark.task.maxFailures": str(max_failures),
            # a retried attempt deletes its predecessor's files by prefix: never run two at once
            "spark.speculation": "false",
            "spark.python.worker.reuse": "true",
            "spark.pyspark.python": python,
            "spark.pyspark.driver.python": sys.executable,
            # the JVM only schedules; merges run in Python workers
            "spark.driver.memory": "512m",
            "spark.executor.memory": "512m",
            "spark.sql.shuffle.partitions": "4",
            # jobs of several plans run at once: share the executors instead of queueing behind the first
            "spark.scheduler.mode": "FAIR",
        }
        # no storage setting goes into the conf: PySpark starts the JVM with every entry on its command line, which
        # `ps` shows to every local user; the settings travel with the tasks (`executor_storage`)
        self.conf.update(user)
        self._lock = threading.Lock()  # starting and stopping the session
        self._jobs = threading.Condition()  # the job groups running now
        self._running: set[str] = set()
        self._spark: SparkSession | None = None
        self._last_task_count: int | None = None

    @property
    def python(self) -> str:
        """The interpreter the Python workers run."""
        return self.conf["spark.pyspark.python"]

    def start(self) -> SparkSession:
        """The session, started on first use."""
        with self._lock:
            return self._start()

    def _start(self) -> SparkSession:
        if self._spark is None:
            from pyspark.sql import SparkSession

            builder = SparkSession.builder.master(self.master).appName(self.app_name)
            for k, v in self.conf.items():
                builder = builder.config(k, v)
            # PySpark takes the workers' interpreter from the environment when the context starts, not from
            # spark.pyspark.python; the environment is put back after, so that child processes do not inherit it
            previous = os.environ.get("PYSPARK_PYTHON")
            os.environ["PYSPARK_PYTHON"] = self.python
            try:
                spark = builder.getOrCreate()
            finally:
                if previous is None:
                    os.environ.pop("PYSPARK_PYTHON", None)
                else:
                    os.environ["PYSPARK_PYTHON"] = previous
            if not is_local(self.master):
                try:
                    shipped = package_zip()
                    spark.sparkContext.addPyFile(shipped)
                    check_workers(spark.sparkContext, self.start_check_timeout_s, shipped)
                except BaseException:
                    spark.stop()
                    raise
            self._spark = spark
        return self._spark

    def run(self, warehouse: str, tasks: Sequence[BucketTask], job_group: str | None = None,
            deadline_s: float | None = None,
            on_progress: Callable[[JobProgress], None] | None = None) -> list[TaskOutcome]:
        """Run the tasks as one Spark job, one task per bucket; outcomes in the order of `tasks`.

        A bucket that fails is reported in its outcome; the others still succeed. Only when Spark
        aborts the job (a task kept crashing its worker) or the job passes `deadline_s` (then it is cancelled) do
        all outcomes carry the error (with `expired` set for the deadline), after every task's files were deleted.
        Tasks get the files of their buckets here, on the driver; a task whose bucket cannot be read fails with
        that error without running. Each outcome has its task as given. `on_progress` hears the job's tasks
        finishing (the plan's heartbeat), at most about once a second and at the end.
        """
        tasks = list(tasks)
        if not tasks:
            return []
        prepared = self._with_bucket_files(warehouse, tasks)
        ready = [t for t in prepared if isinstance(t, BucketTask)]
        if not ready:
            self._last_task_count = 0
            return [o for o in prepared if isinstance(o, TaskOutcome)]
        with self._lock:
            sc = self._start().sparkContext
        group = job_group or f"lsmlake-compact-{uuid.uuid4().hex}"
        with self._jobs:
            self._running.add(group)
        watch = _Watch(self, group, deadline_s, on_progress)
        start = time.perf_counter()
        try:
            # the job group is a property of this thread (PySpark pins each Python thread to a JVM thread)
            sc.setJobGroup(group, f"lsmlake compaction of {len(tasks)} buckets", interruptOnCancel=True)
            # a pool of its own: jobs of one pool run first in, first out even under FAIR scheduling, while pools
            # share the executors, so a big or stuck plan does not hold the others' tasks back
            sc.setLocalProperty("spark.scheduler.pool", group)
            watch.start()
            fn = functools.partial(run_with_retries, warehouse, attempts=self.task_attempts,
                                   storage=self.executor_storage(warehouse))
            ran: list[TaskOutcome] = sc.parallelize(ready, numSlices=len(ready)).map(fn).collect()
        except Exception as e:  # noqa: BLE001 - the job was aborted or cancelled: no task's output may survive
            watch.stop()
            seconds = time.perf_counter() - start
            if watch.expired:
                error = f"deadline of {deadline_s:g} s passed: the Spark job was cancelled"
            else:
                error = f"spark job aborted: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
            for t in tasks:
                self._delete_outputs(warehouse, t)
            ran = [TaskOutcome(t, None, error, 0, seconds, 0, 0, expired=watch.expired) for t in ready]
        finally:
            watch.stop()
            sc.setLocalProperty("spark.jobGroup.id", None)  # type: ignore[arg-type]
            sc.setLocalProperty("spark.scheduler.pool", None)  # type: ignore[arg-type]
            self._last_task_count = self._count_tasks(group)
            with self._jobs:
                self._running.discard(group)
                self._jobs.notify_all()
        outcomes = iter(ran)
        # the task as given, not as shipped: callers look their tasks up, and the files need not come back
        return [replace(next(outcomes), task=t) if isinstance(p, BucketTask) else p
                for t, p in zip(tasks, prepared, strict=True)]

    def progress(self, group: str) -> JobProgress:
        """The tasks of a job group's jobs: finished, running and in all (from Spark's status tracker)."""
        spark = self._spark
        if spark is None:
            return JobProgress(0, 0, 0)
        tracker = spark.sparkContext.statusTracker()
        done = active = total = 0
        for job_id in tracker.getJobIdsForGroup(group):
            job = tracker.getJobInfo(job_id)
            if job is None:
                continue
            for stage_id in list(job.stageIds):
                stage = tracker.getStageInfo(stage_id)
                if stage is not None:
                    done += stage.numCompletedTasks
                    active += stage.numActiveTasks
                    total += stage.numTasks
        return JobProgress(done, active, total)

    def cancel_all(self) -> None:
        """Cancel every job running now (at shutdown: `run` then reports their buckets failed)."""
        with self._jobs:
            groups = list(self._running)
        for group in groups:
            self.cancel(group)

    def cancel(self, group: str) -> None:
        """Cancel the jobs of a group (their tasks are interrupted; `run` then reports the buckets failed)."""
        if self._spark is not None:
            self._spark.sparkContext.cancelJobGroup(group)

    def _with_bucket_files(self, warehouse: str, tasks: list[BucketTask]) -> list[BucketTask | TaskOutcome]:
        """Each task carrying its bucket's files, or the outcome of one whose bucket could not be read: the
        error its executor would have met, after as many attempts (transient errors are retried)."""
        groups: dict[tuple[str, int, bytes], list[int]] = {}
        for i, t in enumerate(tasks):
            groups.setdefault((t.table_id, t.snapshot_id, t.partition), []).append(i)
        out: list[BucketTask | TaskOutcome] = list(tasks)
        for indexes in groups.values():
            start = time.perf_counter()
            attempt = 0
            while True:
                attempt += 1
                try:
                    for i, task in zip(indexes, with_bucket_files(warehouse, [tasks[i] for i in indexes]),
                                       strict=True):
                        out[i] = task
                    break
                except Exception as e:  # noqa: BLE001 - reported in the outcomes
                    if attempt >= self.task_attempts or not _transient(e):
                        error = f"{type(e).__name__}: {e}"
                        for i in indexes:
                            out[i] = TaskOutcome(tasks[i], None, error, attempt, time.perf_counter() - start, 0, 0)
                        break
                time.sleep(_RETRY_BACKOFF_S * attempt)
        return out

    @staticmethod
    def executor_storage(warehouse: str) -> StorageSettings | None:
        """The S3 settings the executors open `warehouse` with: this process's, so that workers need none of their
        own (None for a warehouse that is not on S3: a local path or another store's URI is opened as it is)."""
        if not warehouse.startswith(("s3://", "s3a://")):
            return None
        return StorageSettings.resolve(warehouse)

    @staticmethod
    def _delete_outputs(warehouse: str, task: BucketTask) -> None:
        try:
            delete_outputs(FileSystemCatalog(warehouse).get_table(task.table_id), task)
        except Exception:  # noqa: BLE001 - best effort; orphan cleanup finds the rest by prefix
            pass

    def _count_tasks(self, group: str) -> int | None:
        if self._spark is None:
            return None
        tracker = self._spark.sparkContext.statusTracker()
        # the tracker learns of jobs from Spark's listener bus, asynchronously: wait briefly for it
        deadline = time.monotonic() + 2.0
        while not tracker.getJobIdsForGroup(group) and time.monotonic() < deadline:
            time.sleep(0.05)
        return self.progress(group).total

    def last_job_task_count(self) -> int | None:
        """How many Spark tasks the last `run` scheduled (None before the first run)."""
        return self._last_task_count

    def stop(self, timeout: float | None = None) -> None:
        """Stop the session once the running jobs are done; after `timeout` seconds, cancel them first."""
        with self._jobs:
            if not self._jobs.wait_for(lambda: not self._running, timeout):
                for group in list(self._running):
                    self.cancel(group)
                self._jobs.wait_for(lambda: not self._running)
        with self._lock:
            if self._spark is not None:
                self._spark.stop()
                self._spark = None

    def __enter__(self) -> SparkCompactor:
        self.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop()
