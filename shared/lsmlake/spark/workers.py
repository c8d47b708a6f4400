"""Reaching the workers of a Spark cluster: lsmlake shipped with the job, and a check that their Python agrees.

On `local[...]` the Python workers are children of this process's JVM and import what this process imports. On a
cluster they run the interpreter `spark.pyspark.python` names on other machines: lsmlake's own code goes with the
job (`package_zip`, added with `SparkContext.addPyFile`), but its compiled dependencies (pyarrow, numpy, protobuf)
and the Python version must be installed there. `check_workers` runs one tiny job at start and fails with a message
naming every difference, instead of letting the first compaction fail with an import error deep in a task.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.metadata
import os
import socket
import sys
import tempfile
import threading
import uuid
import zipfile
from typing import TYPE_CHECKING

from lsmlake.errors import InvalidInputError, ServiceUnavailableError

if TYPE_CHECKING:
    from pyspark import SparkContext

# the distributions a bucket task imports besides lsmlake; a different pyarrow may write other Parquet
DEPENDENCIES = ("pyarrow", "numpy", "protobuf", "pyspark")
_zip_lock = threading.Lock()


def is_local(master: str) -> bool:
    """Whether the master runs the executors inside this process's JVM."""
    return master == "local" or master.startswith("local[")


def _package_dir() -> str:
    import lsmlake

    return os.path.dirname(os.path.abspath(lsmlake.__file__))


def _sources(root: str) -> list[tuple[str, str]]:
    """(path inside the package, file path) of every file a task may import or read, in a stable order."""
    out = []
    for folder, dirs, files in os.walk(root):
        dirs[:] = sorted(d for d in dirs if d != "__pycache__")
        for name in sorted(files):
            if not name.endswith((".pyc", ".pyo")):
                full = os.path.join(folder, name)
                out.append((os.path.relpath(full, root).replace(os.sep, "/"), full))
    return sorted(out)  # by path, as a zip's names are sorted


@functools.cache
def package_zip() -> str:
    """A zip of the lsmlake package this process imports (`lsmlake/...`), built once per process."""
    with _zip_lock:
        path = os.path.join(tempfile.mkdtemp(prefix="lsmlake-ship-"), "lsmlake.zip")
        with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
            for rel, full in _sources(_package_dir()):
                z.write(full, f"lsmlake/{rel}")
        return path


def package_digest(archive: str | None = None) -> str:
    """A digest of the code of the lsmlake package imported here (from a folder or a shipped zip), or of the one
    in `archive` (a zip of `package_zip`)."""
    h = hashlib.sha256()
    inner = "lsmlake"
    if archive is None:
        root = _package_dir()
        head, sep, inner = root.partition(".zip" + os.sep)
        if not sep:
            for rel, full in _sources(root):
                with open(full, "rb") as f:
                    h.update(rel.encode() + b"\0" + f.read() + b"\0")
            return h.hexdigest()[:16]
        archive = head + ".zip"  # imported from a zip that addPyFile put on sys.path
    with zipfile.ZipFile(archive) as z:
        prefix = inner.replace(os.sep, "/") + "/"
        for name in sorted(n for n in z.namelist() if n.startswith(prefix) and not n.endswith("/")
                           and "__pycache__/" not in n and not n.endswith((".pyc", ".pyo"))):
            h.update(name[len(prefix):].encode() + b"\0" + z.read(name) + b"\0")
    return h.hexdigest()[:16]


def environment(shipped: str | None = None) -> dict[str, str]:
    """What decides whether a task runs here as it would on the driver: Python, lsmlake's code (`shipped`: the code
    in that zip instead of the imported one), dependencies."""
    out = {"python": f"{sys.version_info.major}.{sys.version_info.minor}", "lsmlake": package_digest(shipped)}
    for dist in DEPENDENCIES:
        try:
            out[dist] = importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            out[dist] = "missing"
    return out


def _worker_environment(_: object) -> tuple[str, str, dict[str, str]]:
    return socket.gethostname(), sys.executable, environment()


def differences(driver: dict[str, str], workers: list[tuple[str, str, dict[str, str]]]) -> list[str]:
    """Each way a worker's environment differs from the driver's, once per (what, value) pair."""
    seen: dict[tuple[str, str], list[str]] = {}
    for host, python, env in workers:
        for what, want in driver.items():
            got = env.get(what, "missing")
            if got != want:
                seen.setdefault((what, got), []).append(f"{host} ({python})")
    return [f"{what} {got} on {', '.join(sorted(set(hosts)))}, {driver[what]} on the driver"
            for (what, got), hosts in sorted(seen.items())]


def check_workers(sc: SparkContext, timeout_s: float, shipped: str | None = None) -> None:
    """Run one task per default slot on the executors and compare their environment with this process's (with the
    lsmlake code of the zip `shipped` with the jobs, when one is: the code the workers are to import).

    Raises InvalidInputError naming every difference, or ServiceUnavailableError when no executor ran the check
    within `timeout_s` (no worker registered, or none with the resources asked for).
    """
    group = f"lsmlake-check-{uuid.uuid4().hex}"
    sc.setJobGroup(group, "lsmlake: do the workers' Python and lsmlake agree with the driver's?",
                   interruptOnCancel=True)
    timer = threading.Timer(timeout_s, sc.cancelJobGroup, [group])
    timer.daemon = True
    timer.start()
    n = max(1, sc.defaultParallelism)
    try:
        found: list[tuple[str, str, dict[str, str]]] = (
            sc.parallelize(range(n), n).map(_worker_environment).collect())
    except Exception as e:
        if not timer.is_alive():
            raise ServiceUnavailableError(
                f"no Spark executor of {sc.master} ran lsmlake's start check within {timeout_s:g} s: are workers "
                "registered with the master, with the cores and memory the job asks for?") from None
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise InvalidInputError(f"the Spark workers of {sc.master} cannot run lsmlake's tasks: {first} (their "
                                "Python is `spark.pyspark.python`; it needs pyarrow, numpy and protobuf as the "
                                "driver has them)") from e
    finally:
        timer.cancel()
        sc.setLocalProperty("spark.jobGroup.id", None)  # type: ignore[arg-type]
    problems = differences(environment(shipped), found)
    if problems:
        raise InvalidInputError("the Spark workers' Python differs from the compactor's: " + "; ".join(problems)
                                + f" (the workers run spark.pyspark.python = {sc.pythonExec}: set it to an "
                                "interpreter with the same versions)")
