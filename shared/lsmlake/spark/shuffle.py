"""`by_bucket`: a DataFrame shuffled so that each (partition, bucket) of a table is written by one Spark task.

Spark's Python data sources cannot ask for a distribution of their input, so a job asks for it before
`write`: the rows get the table's bucket by Paimon's bucket hash (lsmlake's vectorised MurmurHash3 of
the bucket-key BinaryRow, in an Arrow UDF), are hash-partitioned by partition keys and bucket, and the
bucket column is dropped again. Each task then writes one set of level-0 files per bucket it owns.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING

import pyarrow as pa

from lsmlake.format.bucket import bucket_ids
from lsmlake.spark.access import open_access
from lsmlake.table.input_rows import conform

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

BUCKET_COLUMN = "__lsmlake_bucket"


def by_bucket(df: DataFrame, table: str, *, catalog: str | None = None, warehouse: str | None = None,
              storage: Mapping[str, str] | None = None, num_partitions: int | None = None) -> DataFrame:
    """`df` repartitioned by the table's (partition keys, bucket); unchanged for tables without fixed buckets.

    `storage`: S3 settings under Paimon's or pypaimon's keys, as the data source takes them (docs/storage.md); an
    unknown key is refused with InvalidInputError naming it, as the data source's options refuse it.
    `num_partitions` defaults to the number of buckets for an unpartitioned table, else to
    `spark.sql.shuffle.partitions`.
    """
    from pyspark.sql.types import IntegerType, StructField, StructType

    access = open_access({"catalog": catalog or "", "warehouse": warehouse or ""}, table, storage)
    try:
        schema = access.table.schema
    finally:
        access.close()
    buckets = schema.num_buckets
    if buckets <= 0:
        return df
    keys = list(schema.bucket_keys)
    types = schema.types_of(keys)

    def tag(batches: Iterable[pa.RecordBatch]) -> Iterable[pa.RecordBatch]:
        for b in batches:
            rows, _ = conform(schema, b)
            ids = bucket_ids([rows.column(k) for k in keys], types, buckets)
            yield pa.RecordBatch.from_arrays([*b.columns, pa.array(ids, pa.int32())],
                                             names=[*b.schema.names, BUCKET_COLUMN])

    out = StructType([*df.schema.fields, StructField(BUCKET_COLUMN, IntegerType(), False)])
    tagged = df.mapInArrow(tag, out)
    if num_partitions is None and not schema.partition_keys:
        num_partitions = buckets
    cols = [*schema.partition_keys, BUCKET_COLUMN]
    shuffled = tagged.repartition(num_partitions, *cols) if num_partitions else tagged.repartition(*cols)
    return shuffled.drop(BUCKET_COLUMN)
