"""lsmlake tables in Spark: `register(spark)` adds the `lsmlake` format (PySpark 4 Python data source).

    import lsmlake.spark
    lsmlake.spark.register(spark)
    df = spark.read.format("lsmlake").option("catalog", "127.0.0.1:50051").load("db.t")
    lsmlake.spark.by_bucket(df, "db.t", catalog="127.0.0.1:50051").write.format("lsmlake") \\
        .option("catalog", "127.0.0.1:50051").mode("append").save("db.t")

On a cluster master (`spark://`, `k8s://`, `yarn`) `register` ships lsmlake to the workers with the session's jobs
and checks, with one small job, that their Python has the dependencies (pyarrow, numpy, ...) at the driver's
versions; in local mode the workers run this interpreter's lsmlake (`PYSPARK_PYTHON`).
"""

from __future__ import annotations

import logging
import os
import sys
from typing import TYPE_CHECKING

from lsmlake.spark.shuffle import by_bucket
from lsmlake.spark.source import LakeDataSource

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["LakeDataSource", "by_bucket", "register"]

_log = logging.getLogger(__name__)


def register(spark: SparkSession, check_timeout_s: float = 120.0) -> None:
    """Make `format("lsmlake")` available in this session (reads, streaming reads and writes).

    A relative `warehouse` option is taken relative to the current folder at this call. On a cluster master the
    lsmlake package is shipped to the workers (`SparkContext.addPyFile`) and their Python checked against this
    one's: InvalidInputError names what differs, ServiceUnavailableError says no executor answered within
    `check_timeout_s`. Warns when the session's Python workers may run another interpreter than this one (one
    without lsmlake's dependencies): set PYSPARK_PYTHON (or `spark.pyspark.python` on a cluster).
    """
    from lsmlake.spark.workers import check_workers, is_local, package_zip

    sc = spark.sparkContext
    if not is_local(sc.master or "local"):
        shipped = package_zip()
        sc.addPyFile(shipped)
        check_workers(sc, check_timeout_s, shipped)
    # relative warehouse paths mean this process's folder, wherever Spark's Python workers run
    spark.dataSource.register(LakeDataSource.bound_to(os.getcwd()))
    conf = sc.getConf()
    if not conf.get("spark.pyspark.python") and not os.environ.get("PYSPARK_PYTHON"):
        _log.warning("PYSPARK_PYTHON is not set: Spark's Python workers run %r, which must import lsmlake "
                     "(for this interpreter: os.environ['PYSPARK_PYTHON'] = %r before the session starts)",
                     "python3", sys.executable)
