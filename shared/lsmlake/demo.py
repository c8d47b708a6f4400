"""`make demo`: the main job on embedded defaults, on one machine.

Creates a partitioned primary-key table, writes several batches with inserts, updates and deletes,
reads it back (latest and time travel), checks the result against a plain-Python model and, when
pypaimon is installed, against Apache Paimon's own Python reader, then prints a short summary.
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time

import numpy as np
import pyarrow as pa

from .catalog import FileSystemCatalog

KEYS = 200_000
BATCH = 200_000
BATCHES = 5


def _batch(rng: np.random.Generator, b: int) -> pa.Table:
    ids = rng.integers(0, KEYS, BATCH)
    kinds = np.where(rng.random(BATCH) < 0.05, "-D", np.where(b == 0, "+I", "+U"))
    return pa.table({
        "id": pa.array(ids, pa.int64()),
        "region": pa.array(np.array(["eu", "us", "apac"])[ids % 3]),
        "amount": pa.array(np.round(rng.random(BATCH) * 1000, 2)).cast(pa.decimal128(12, 2)),
        "note": pa.array([f"batch-{b}"] * BATCH),
        "_row_kind": pa.array(kinds),
    })


def _model(batches: list[pa.Table]) -> dict[tuple[int, str], str]:
    """The expected table, computed the slow obvious way: apply every row in order."""
    model: dict[tuple[int, str], str] = {}
    for t in batches:
        for i, r, a, k in zip(t.column("id").to_pylist(), t.column("region").to_pylist(),
                              t.column("amount").to_pylist(), t.column("_row_kind").to_pylist(), strict=True):
            if k == "-D":
                model.pop((i, r), None)
            else:
                model[(i, r)] = str(a)
    return model


def run(warehouse: str) -> None:
    cat = FileSystemCatalog(warehouse)
    cat.create_database("demo", ignore_if_exists=True)
    if cat.table_exists("demo.orders"):
        cat.drop_table("demo.orders")
    table = cat.create_table("demo.orders", "id BIGINT NOT NULL, region STRING NOT NULL, "
                             "amount DECIMAL(12, 2), note STRING",
                             partition_keys=["region"], primary_keys=["id", "region"], options={"bucket": "4"})
    print(f"warehouse {warehouse}: created demo.orders (partitioned by region, 4 buckets)")
    rng = np.random.default_rng(42)
    batches = [_batch(rng, b) for b in range(BATCHES)]
    start = time.perf_counter()
    for b, t in enumerate(batches):
        r = table.write_arrow(t)
        assert r is not None
        print(f"  batch {b}: {t.num_rows:,} rows -> snapshot {r.snapshot_id}")
    write_s = time.perf_counter() - start
    start = time.perf_counter()
    result = table.to_arrow()
    read_s = time.perf_counter() - start
    total = BATCH * BATCHES
    print(f"wrote {total:,} rows in {write_s:.2f} s ({total / write_s / 1e3:,.0f} k rows/s, {BATCHES} commits)")
    print(f"merge-on-read: {result.num_rows:,} live rows in {read_s:.2f} s")
    model = _model(batches)
    got = dict(zip(zip(result.column("id").to_pylist(), result.column("region").to_pylist(), strict=True),
                   map(str, result.column("amount").to_pylist()), strict=True))
    print(f"matches the plain-Python model: {got == model}")
    first = table.to_arrow(1)
    print(f"time travel: snapshot 1 has {first.num_rows:,} rows")
    files = sum(len(s.files) for s in table.plan())
    print(f"live data files: {files} in {len(table.plan())} (partition, bucket) splits")
    try:
        from pypaimon import CatalogFactory
    except ImportError:
        print("pypaimon is not installed: skipped the cross-check with Apache Paimon's reader")
    else:
        pt = CatalogFactory.create({"warehouse": warehouse}).get_table("demo.orders")
        rb = pt.new_read_builder()
        theirs = rb.new_read().to_arrow(rb.new_scan().plan().splits())
        same = theirs.sort_by([("id", "ascending"), ("region", "ascending")]).select(result.column_names).equals(
            result.sort_by([("id", "ascending"), ("region", "ascending")]).cast(theirs.select(
                result.column_names).schema))
        print(f"pypaimon 2.1.0 reads {theirs.num_rows:,} rows; identical to lsmlake's read: {same}")
        if not same:
            raise SystemExit("pypaimon and lsmlake disagree")
    if got != model:
        raise SystemExit("lsmlake's read differs from the model")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--warehouse", help="warehouse folder (default: a temporary folder, removed afterwards)")
    args = p.parse_args()
    if args.warehouse:
        run(args.warehouse)
        return
    tmp = tempfile.mkdtemp(prefix="lsmlake-demo-")
    try:
        run(tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
