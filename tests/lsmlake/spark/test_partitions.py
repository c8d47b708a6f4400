"""How a batch read spreads its splits over Spark partitions, and that cut splits read the same rows (no Spark:
the reader's `partitions` and `read` run in this process, as they do in Spark's Python workers)."""

from __future__ import annotations

import pyarrow as pa
import pytest

from lsmlake.catalog.filesystem import FileSystemCatalog
from lsmlake.format.data_file_meta import DataFileMeta
from lsmlake.spark import batch_read
from lsmlake.spark.arrow_types import arrow_target
from lsmlake.spark.batch_read import LakeBatchReader, SplitsPartition, plan_partitions
from lsmlake.spark.read_options import ReadOptions
from lsmlake.spark.source import LakeDataSource
from lsmlake.table.scan import Split
from tests.support.spark_tables import IDENTS, MATRIX, rows

MB = 1 << 20


def _file(name: str, size: int) -> DataFileMeta:
    return DataFileMeta(file_name=name, file_size=size, row_count=1, min_key=b"", max_key=b"", key_stats=None,
                        value_stats=None, min_sequence_number=0, max_sequence_number=0, schema_id=0, level=5)


def _split(bucket: int, sizes: list[int], raw: bool = True) -> Split:
    files = tuple(_file(f"b{bucket}-{i}", s) for i, s in enumerate(sizes))
    return Split(b"", (), bucket, 8, files, 1, raw_convertible=raw)


def _buckets(groups: list[list[Split]]) -> list[list[tuple[int, int]]]:
    return [[(s.bucket, len(s.files)) for s in g] for g in groups]


def test_equal_buckets_spread_over_the_cores_not_one_partition_each() -> None:
    splits = [_split(b, [11 * MB]) for b in range(8)]
    groups = plan_partitions(splits, 128 * MB, parallelism=2)
    assert _buckets(groups) == [[(0, 1), (2, 1), (4, 1), (6, 1)], [(1, 1), (3, 1), (5, 1), (7, 1)]]


def test_a_small_read_is_one_partition_whatever_the_cores() -> None:
    splits = [_split(b, [MB]) for b in range(8)]
    assert len(plan_partitions(splits, 128 * MB, parallelism=8)) == 1


def test_target_size_caps_a_partition_and_one_byte_means_one_split_each() -> None:
    splits = [_split(b, [40 * MB]) for b in range(6)]
    assert [len(g) for g in plan_partitions(splits, 100 * MB, parallelism=1)] == [2, 2, 2]
    small = [_split(b, [1000, 2000]) for b in range(5)]
    assert _buckets(plan_partitions(small, 1, parallelism=2)) == [[(b, 2)] for b in range(5)]


def test_a_big_raw_split_is_cut_by_files_a_merged_one_stays_whole() -> None:
    raw = _split(0, [20 * MB] * 10)
    groups = plan_partitions([raw], 128 * MB, parallelism=4)
    assert len(groups) == 4
    cut = [f.file_name for g in groups for s in g for f in s.files]
    assert sorted(cut) == sorted(f.file_name for f in raw.files)  # every file once
    assert all(s.raw_convertible and s.bucket == 0 for g in groups for s in g)
    merged = _split(1, [20 * MB] * 10, raw=False)
    assert _buckets(plan_partitions([merged], 128 * MB, parallelism=4)) == [[(1, 10)]]


def test_no_splits_no_partitions() -> None:
    assert plan_partitions([], 128 * MB, parallelism=2) == []


def test_parallelism_option_and_bound_default() -> None:
    base = {"path": "db.t", "warehouse": "/w"}
    assert ReadOptions.parse(base, parallelism=6).parallelism == 6
    assert ReadOptions.parse({**base, "split.parallelism": "3"}, parallelism=6).parallelism == 3
    with pytest.raises(Exception, match="split.parallelism"):
        ReadOptions.parse({**base, "split.parallelism": "0"})
    bound = LakeDataSource.bound_to("/somewhere", parallelism=5)
    assert bound(base).parsed.parallelism == 5


@pytest.fixture(scope="module")
def warehouse(tmp_path_factory):
    wh = str(tmp_path_factory.mktemp("wh"))
    cat = FileSystemCatalog(wh)
    cat.create_database("db")
    for build in MATRIX.values():
        build(cat)
    return wh


@pytest.mark.parametrize("name", list(MATRIX))
def test_reads_cut_into_files_equal_the_table(warehouse, name, monkeypatch) -> None:
    """Every raw split cut into single files, each its own partition: merge-on-read, deletion vectors and
    the filter still give exactly the table's rows."""
    monkeypatch.setattr(batch_read, "MIN_CUT_BYTES", 1)
    monkeypatch.setattr(batch_read, "MIN_PARTITION_BYTES", 1)
    ident = IDENTS[name]
    table = FileSystemCatalog(warehouse).get_table(ident)
    expected = table.to_arrow()
    source = LakeDataSource({"path": ident, "warehouse": warehouse, "split.target-size": "1"})
    reader = source.reader(source.schema())
    parts = reader.partitions()
    assert all(isinstance(p, SplitsPartition) for p in parts)
    splits = table.new_scan().plan()
    assert len(parts) == sum(len(s.files) if s.raw_convertible else 1 for s in splits)
    got = pa.Table.from_batches([b for p in parts for b in reader.read(p)], reader.target)
    assert rows(got, expected.column_names) == rows(expected)


def test_cut_reads_apply_deletion_vectors(warehouse) -> None:
    """The deletion-vector table has a bucket of several files with vectors, so the cut above is exercised."""
    table = FileSystemCatalog(warehouse).get_table(IDENTS["deletion_vectors"])
    assert any(s.dv_index is not None and len(s.files) > 1 and s.raw_convertible for s in table.new_scan().plan())


@pytest.mark.parametrize("name", list(MATRIX))
def test_a_small_table_is_one_partition_read_split_after_split(warehouse, name) -> None:
    """A few KiB of files make one partition, not one per core; its splits, each read while the previous one's
    batches are taken, give the table's rows; a consumer that stops after one batch stops the read."""
    ident = IDENTS[name]
    table = FileSystemCatalog(warehouse).get_table(ident)
    assert len(table.new_scan().plan()) > 1
    opts = ReadOptions.parse({"path": ident, "warehouse": warehouse}, parallelism=2)
    schema = LakeDataSource({"path": ident, "warehouse": warehouse}).schema()
    reader = LakeBatchReader(opts, arrow_target(schema))
    (part,) = reader.partitions()
    got = pa.Table.from_batches(list(reader.read(part)), reader.target)
    expected = table.to_arrow()
    assert rows(got, expected.column_names) == rows(expected)
    batches = reader.read(part)
    assert next(batches).num_rows > 0
    batches.close()  # type: ignore[attr-defined]
