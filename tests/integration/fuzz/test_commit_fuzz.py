"""Valid commits and compaction requests with one or two fields changed to hostile values.

A message built from nothing stops at the first check; one that is valid but for a field or two reaches
the deep ones (file names, sizes, levels, partitions, sequence numbers). Besides the oracle of every
fuzzed call, a commit the catalog accepts must leave a table that still reads.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa
from hypothesis import given
from hypothesis import strategies as st

from lsmlake.catalog.filesystem import FileSystemCatalog
from lsmlake.proto_gen.lsmlake.v1 import catalog_pb2, common_pb2
from lsmlake.rpc.convert import changes_to_proto
from tests.support.fuzz.hostile import FUZZ, mutate
from tests.support.fuzz.lake import CALL_TIMEOUT_S, OUTCOMES, Lake, fuzz_call

PK = common_pb2.TableIdentifier(database="db", table="pk")
KINDS = (common_pb2.COMMIT_KIND_APPEND, common_pb2.COMMIT_KIND_COMPACT, common_pb2.COMMIT_KIND_OVERWRITE)


def _fresh_files(lake: Lake, n: int) -> list[common_pb2.FileChanges]:
    """Level-0 files written with the library and not committed: the content of a valid commit (the same
    keys every time, so every commit has the same shape and hypothesis can replay its draws)."""
    w = FileSystemCatalog(str(lake.warehouse)).get_table("db.pk").new_write()
    w.write(pa.table({"id": pa.array(range(1000, 1010), pa.int64()),
                      "dt": ["2024-01-01", "2024-01-02"] * 5, "v": [f"f{n}"] * 10,
                      "n": pa.array([n] * 10, pa.int32())}))
    return [changes_to_proto(m) for m in w.prepare_commit()]


def _still_reads(lake: Lake) -> None:
    table = FileSystemCatalog(str(lake.warehouse)).get_table("db.pk")
    table.to_arrow()
    lake.catalog.PlanScan(catalog_pb2.PlanScanRequest(table=PK), timeout=CALL_TIMEOUT_S)


def test_mutated_commits(lake: Lake) -> None:
    method = "/lsmlake.v1.CatalogService/Commit"
    counter = iter(range(1, 1_000_000))

    @FUZZ
    @given(data=st.data(), kind=st.sampled_from(KINDS))
    def run(data: Any, kind: int) -> None:
        n = next(counter)
        request = catalog_pb2.CommitRequest(table=PK, commit_user="fuzz-commit", commit_identifier=n, kind=kind,
                                            changes=_fresh_files(lake, n))
        changed = mutate(data.draw, request)
        if fuzz_call(lake, method, lambda: lake.catalog.Commit(request, timeout=CALL_TIMEOUT_S)) is not None:
            try:
                _still_reads(lake)
            except Exception as e:
                raise AssertionError(f"the catalog accepted a commit ({changed}) that broke the table: {e}") from e

    run()
    print(f"\n{method} (mutated):", dict(OUTCOMES.get(method, {}).most_common()))


def test_mutated_compaction_requests(lake: Lake) -> None:
    method = "/lsmlake.v1.CatalogService/RequestCompaction"
    splits = lake.catalog.PlanScan(catalog_pb2.PlanScanRequest(table=PK, all_levels=True),
                                   timeout=CALL_TIMEOUT_S).splits

    @FUZZ
    @given(data=st.data(), full=st.booleans())
    def run(data: Any, full: bool) -> None:
        s = data.draw(st.sampled_from(list(splits)))
        request = catalog_pb2.RequestCompactionRequest(table=PK, full=full, units=[catalog_pb2.CompactionUnit(
            partition=s.partition, bucket=s.bucket, total_buckets=s.total_buckets, input_files=s.files,
            output_level=5)])
        mutate(data.draw, request)
        fuzz_call(lake, method, lambda: lake.catalog.RequestCompaction(request, timeout=CALL_TIMEOUT_S))

    run()
    print(f"\n{method} (mutated):", dict(OUTCOMES.get(method, {}).most_common()))
