"""One local[2] Spark session for all Spark data-source tests (a JVM start costs tens of seconds here)."""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Iterator

import pytest


def start_session(master: str = "local[2]"):  # type: ignore[no-untyped-def]
    """A session with the lsmlake format registered; a failed JVM launch (transient on this box) is retried."""
    from pyspark.sql import SparkSession

    import lsmlake.spark

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    last: Exception | None = None
    for attempt in range(3):
        try:
            spark = (SparkSession.builder.master(master).appName("lsmlake-spark-tests")
                     .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
                     .config("spark.sql.shuffle.partitions", "4").config("spark.pyspark.python", sys.executable)
                     .config("spark.driver.memory", "1g").config("spark.python.worker.reuse", "true")
                     .config("spark.sql.session.timeZone", "UTC")
                     .getOrCreate())
            spark.sparkContext.setLogLevel("ERROR")
            lsmlake.spark.register(spark)
            return spark
        except Exception as e:  # noqa: BLE001 - retried, then raised
            last = e
            time.sleep(2 * (attempt + 1))
    assert last is not None
    raise last


@pytest.fixture(scope="package")
def spark() -> Iterator[object]:
    session = start_session()
    yield session
    session.stop()
