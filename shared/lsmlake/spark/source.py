"""`LakeDataSource`: the `lsmlake` format of `spark.read`, `spark.readStream` and `df.write`."""

from __future__ import annotations

import pyarrow as pa
from pyspark.sql.datasource import DataSource, DataSourceReader, DataSourceStreamReader, DataSourceWriter
from pyspark.sql.types import StringType, StructField, StructType

from lsmlake.errors import InvalidInputError
from lsmlake.spark.arrow_types import arrow_target, check_columns, spark_schema
from lsmlake.spark.batch_read import LakeBatchReader
from lsmlake.spark.batch_write import LakeBatchWriter
from lsmlake.spark.read_options import ReadOptions
from lsmlake.spark.stream_read import ROW_KIND, LakeStreamReader
from lsmlake.table import features


class LakeDataSource(DataSource):
    """Reads (batch and streaming) and writes lsmlake tables; options in `read_options.KEYS`."""

    base_dir: str | None = None  # where a relative `warehouse` option is; set by `bound_to`
    parallelism: int | None = None  # the session's cores, how many partitions a read spreads over; set by `bound_to`

    def __init__(self, options: dict[str, str]) -> None:
        super().__init__(options)
        self.parsed = ReadOptions.parse(options, self.base_dir, self.parallelism)

    @classmethod
    def bound_to(cls, base_dir: str, parallelism: int | None = None) -> type[LakeDataSource]:
        """This source with relative warehouse paths resolved against `base_dir`, and reads spread over
        `parallelism` partitions (by default the running session's default parallelism: the planning runs
        in a Python worker, which has no session to ask). A class made here is not importable by name, so
        Spark ships it to its Python workers by value, these values included."""
        if parallelism is None:
            parallelism = _session_parallelism()
        return type(cls.__name__, (cls,), {"base_dir": base_dir, "parallelism": parallelism,
                                           "__qualname__": f"{cls.__qualname__}.bound", "__module__": cls.__module__})

    @classmethod
    def name(cls) -> str:
        return "lsmlake"

    def schema(self) -> StructType:
        """The table's columns (or those of option `columns`), plus `_row_kind` with option `row-kind`."""
        access = self.parsed.access()
        try:
            arrow = access.table.schema.arrow_schema
        finally:
            access.close()
        if self.parsed.columns is not None:
            check_columns(StructType([StructField(c, StringType()) for c in self.parsed.columns]), arrow.names,
                          "option 'columns'")
            arrow = pa.schema([arrow.field(c) for c in self.parsed.columns])
        out = spark_schema(arrow)
        if self.parsed.row_kind:
            out = out.add(ROW_KIND, StringType(), True)
        return out

    def reader(self, schema: StructType) -> DataSourceReader:
        target = arrow_target(schema)
        if ROW_KIND in schema.names:
            return _RowKindReader(self.parsed, target)
        return LakeBatchReader(self.parsed, target)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        access = self.parsed.access()
        try:
            pk = access.table.schema.is_primary_key_table
        finally:
            access.close()
        if pk and ROW_KIND not in schema.names:
            raise InvalidInputError(f"streaming primary-key table {self.parsed.identifier} needs "
                                    "option('row-kind', 'true'): its changes include updates and deletes")
        return LakeStreamReader(self.parsed, arrow_target(schema))

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        access = self.parsed.access()
        try:
            features.check(access.table.schema, self.parsed.identifier, for_write=True)
            ref = access.ref()
        finally:
            access.close()
        return LakeBatchWriter(self.parsed, ref, overwrite)


def _session_parallelism() -> int | None:
    """The default parallelism of this process's running Spark session (its cores), None without one."""
    from pyspark import SparkContext

    sc = SparkContext._active_spark_context
    return int(sc.defaultParallelism) if sc is not None else None


class _RowKindReader(LakeBatchReader):
    """A batch read with a `_row_kind` column: the merged rows of a snapshot are all `+I`."""

    def __init__(self, options: ReadOptions, target: pa.Schema) -> None:
        super().__init__(options, pa.schema([f for f in target if f.name != ROW_KIND]))
        self.outer = target

    def read(self, partition):  # type: ignore[no-untyped-def]
        from lsmlake.spark.stream_read import _with_insert_kind

        yield from _with_insert_kind(super().read(partition), self.outer)
