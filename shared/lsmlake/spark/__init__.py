"""lsmlake tables in Spark: `register(spark)` adds the `lsmlake` format (PySpark 4 Python data source).

    import lsmlake.spark
    lsmlake.spark.register(spark)
    df = spark.read.format("lsmlake").option("catalog", "127.0.0.1:50051").load("db.t")
    lsmlake.spark.by_bucket(df, "db.t", catalog="127.0.0.1:50051").write.format("lsmlake") \\
        .option("catalog", "127.0.0.1:50051").mode("append").save("db.t")

Executors import `lsmlake`: install the package (with its dependencies) on every worker's Python.
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


def register(spark: SparkSession) -> None:
    """Make `format("lsmlake")` available in this session (reads, streaming reads and writes).

    A relative `warehouse` option is taken relative to the current folder at this call. Warns when the
    session's Python workers may run another interpreter than this one (one without lsmlake): set
    PYSPARK_PYTHON (or `spark.pyspark.python` on a cluster) to an interpreter that has it.
    """
    # relative warehouse paths mean this process's folder, wherever Spark's Python workers run
    spark.dataSource.register(LakeDataSource.bound_to(os.getcwd()))
    conf = spark.sparkContext.getConf()
    if not conf.get("spark.pyspark.python") and not os.environ.get("PYSPARK_PYTHON"):
        _log.warning("PYSPARK_PYTHON is not set: Spark's Python workers run %r, which must import lsmlake "
                     "(for this interpreter: os.environ['PYSPARK_PYTHON'] = %r before the session starts)",
                     "python3", sys.executable)
