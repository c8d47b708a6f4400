"""What the compaction job takes to a cluster without starting one: the package it ships (the same code as the
one imported here, found by its digest when imported from the zip), the environment check's report, the workers'
interpreter and the executors' storage settings in the Spark conf."""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile

import pytest

from lsmlake.spark import workers
from lsmlake.spark.compaction_job import SparkCompactor


def test_the_shipped_zip_holds_the_package_and_imports_as_the_same_code(tmp_path, monkeypatch) -> None:
    # a copy of the package, so that edits to the working tree meanwhile change neither side
    copy = tmp_path / "copy" / "lsmlake"
    shutil.copytree(workers._package_dir(), copy, ignore=shutil.ignore_patterns("__pycache__"))
    monkeypatch.setattr(workers, "_package_dir", lambda: str(copy))
    workers.package_zip.cache_clear()
    path = workers.package_zip()
    workers.package_zip.cache_clear()  # the next caller zips the real package again
    with zipfile.ZipFile(path) as z:
        names = set(z.namelist())
    assert {"lsmlake/__init__.py", "lsmlake/spark/compaction_job.py", "lsmlake/spark/workers.py"} <= names
    assert not [n for n in names if "__pycache__" in n or n.endswith(".pyc")]
    # a Python that imports lsmlake from the zip (as a worker does after addPyFile) finds the same digest
    code = ("import sys; sys.path.insert(0, sys.argv[1]); import lsmlake, lsmlake.spark.workers as w; "
            "print(lsmlake.__file__); print(w.package_digest())")
    out = subprocess.run([sys.executable, "-c", code, path], capture_output=True, text=True, cwd=tmp_path,
                         timeout=120, check=True).stdout.split()
    assert out[0].startswith(path + "/")
    assert out[1] == workers.package_digest() == workers.package_digest(path)


def test_the_digest_changes_with_the_code(tmp_path, monkeypatch) -> None:
    before = workers.package_digest()
    copy = tmp_path / "lsmlake"
    copy.mkdir()
    (copy / "__init__.py").write_text("")
    monkeypatch.setattr(workers, "_package_dir", lambda: str(copy))
    one = workers.package_digest()
    (copy / "__init__.py").write_text("X = 1\n")
    assert workers.package_digest() != one != before


def test_differences_name_what_differs_and_where() -> None:
    driver = {"python": "3.11", "lsmlake": "abc", "pyarrow": "19.0.1", "numpy": "2.1.0"}
    same = ("w1", "/usr/bin/python3", dict(driver))
    old_arrow = ("w2", "/opt/py/bin/python", {**driver, "pyarrow": "18.0.0"})
    no_numpy = ("w3", "/opt/py/bin/python", {**driver, "pyarrow": "18.0.0", "numpy": "missing"})
    assert workers.differences(driver, [same]) == []
    assert workers.differences(driver, [same, old_arrow, no_numpy]) == [
        "numpy missing on w3 (/opt/py/bin/python), 2.1.0 on the driver",
        "pyarrow 18.0.0 on w2 (/opt/py/bin/python), w3 (/opt/py/bin/python), 19.0.1 on the driver",
    ]


def test_the_environment_names_python_lsmlake_and_the_dependencies() -> None:
    env = workers.environment()
    assert env["python"] == f"{sys.version_info.major}.{sys.version_info.minor}"
    assert env["lsmlake"] == workers.package_digest()
    import pyarrow

    assert env["pyarrow"] == pyarrow.__version__ and set(workers.DEPENDENCIES) <= set(env)


@pytest.mark.parametrize(("master", "local"), [("local", True), ("local[4,3]", True), ("spark://h:7077", False),
                                               ("k8s://https://h", False), ("yarn", False)])
def test_which_masters_are_local(master: str, local: bool) -> None:
    assert workers.is_local(master) is local


def test_spark_pyspark_python_in_the_conf_wins(monkeypatch) -> None:
    monkeypatch.setenv("PYSPARK_PYTHON", "/from/env/python")
    assert SparkCompactor("spark://h:7077", conf={"spark.pyspark.python": "/opt/py/bin/python"}).python == \
        "/opt/py/bin/python"
    assert SparkCompactor("spark://h:7077").python == "/from/env/python"
    monkeypatch.delenv("PYSPARK_PYTHON")
    assert SparkCompactor("spark://h:7077").python == sys.executable


def test_no_storage_secret_goes_into_the_spark_conf_and_executors_get_the_drivers_settings(monkeypatch) -> None:
    """PySpark starts its JVM with every conf entry on the command line (`ps` shows it): the warehouse's credentials
    travel with the tasks instead, as the settings the driver resolved."""
    for k in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3", "AWS_REGION",
              "AWS_DEFAULT_REGION", "AWS_SESSION_TOKEN"):
        monkeypatch.delenv(k, raising=False)
    monkeypatch.setenv("AWS_REGION", "eu-west-3")
    monkeypatch.setenv("AWS_SESSION_TOKEN", "env-token-secret")
    wh = "s3://lake/wh?endpoint_override=127.0.0.1:9000&scheme=http"
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "env-key")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "env-secret")
    compactor = SparkCompactor("spark://h:7077", warehouse=wh)
    shown = " ".join(f"{k}={v}" for k, v in compactor.conf.items())
    assert "env-secret" not in shown and "env-token-secret" not in shown
    settings = compactor.executor_storage(wh)
    assert settings is not None
    assert (settings.access_key_id, settings.secret_access_key, settings.session_token) == \
        ("env-key", "env-secret", "env-token-secret")
    assert settings.endpoint == "http://127.0.0.1:9000" and settings.region == "eu-west-3"
    assert "env-secret" not in repr(settings)
    assert compactor.executor_storage("/data/wh") is None
