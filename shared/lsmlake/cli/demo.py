"""`make demo`: the whole cluster on one machine, end to end.

1. `lake up` in the background: the embedded Kafka broker, the catalog, a writer (ingesting two Kafka
   topics) and a compactor (Spark local[*]);
2. a partitioned primary-key table with 4 buckets (`demo.orders`, publishing Iceberg metadata with every
   commit) and a partial-update table (`demo.profiles`);
3. 1,000,000 rows through the writer's gRPC API from 8 client threads;
4. 100,000 change events through Kafka: Debezium updates and deletes of orders, plain JSON partial
   updates of profiles;
5. waits until the writer has committed every event, prints each bucket's levels, asks the compactor for
   a full compaction and prints them again;
6. pypaimon writes a postpone-bucket table through the REST catalog, which the compactor places; the writer
   service writes a dynamic-bucket table whose keys move between partitions (cross-partition upsert);
7. reads the tables with lsmlake's reader, with pypaimon and (demo.orders, through its Iceberg metadata) with
   DuckDB, checks them against a plain-Python model,
   prints throughput and freshness, and stops the cluster. Exits 1 when anything disagrees.

With CI=true the sizes are a fifth (the same steps).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa

if TYPE_CHECKING:
    from lsmlake.cli.cluster import ClusterState

REDUCED = os.environ.get("CI", "").lower() == "true"
ROWS = 200_000 if REDUCED else 1_000_000
EVENTS = 20_000 if REDUCED else 100_000
THREADS = 8
BATCH = 25_000
REGIONS = ("eu", "us", "apac")
PROFILES = 5_000


def _say(text: str) -> None:
    print(text, flush=True)


def _lake_up(warehouse: str, log: Path) -> tuple[subprocess.Popen[bytes], ClusterState]:
    from lsmlake.cli.cluster import find_endpoints
    from lsmlake.kafka.broker import free_port

    args = [sys.executable, "-c", "from lsmlake.cli.main import main; raise SystemExit(main())", "up",
            "--warehouse", warehouse, "--catalog-port", str(free_port()), "--writer-port", str(free_port()),
            "--compactor-port", str(free_port()), "--commit-interval", "0.5",
            "--ingest", "demo.orders:debezium", "--ingest", "demo.profiles:json"]
    with open(log, "wb") as out:
        proc = subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    deadline = time.monotonic() + 180
    while True:
        state = find_endpoints(warehouse)
        if state is not None:
            return proc, state
        if proc.poll() is not None:
            raise SystemExit(f"lake up failed:\n{log.read_text()[-3000:]}")
        if time.monotonic() > deadline:
            proc.terminate()
            raise SystemExit(f"lake up did not come up in 180 s:\n{log.read_text()[-3000:]}")
        time.sleep(0.5)


def _levels(warehouse: str, table_id: str) -> str:
    from lsmlake.catalog.filesystem import FileSystemCatalog

    table = FileSystemCatalog(warehouse).get_table(table_id)
    lines = []
    for s in sorted(table.new_scan(None, None, all_levels=True).plan(), key=lambda s: (s.partition, s.bucket)):
        by_level: dict[int, int] = {}
        for f in s.files:
            by_level[f.level] = by_level.get(f.level, 0) + 1
        runs = by_level.get(0, 0) + sum(1 for lv in by_level if lv > 0)
        shape = "  ".join(f"L{lv}:{n}" for lv, n in sorted(by_level.items()))
        lines.append(f"    {'/'.join(map(str, s.partition_values)):>5} bucket {s.bucket}  {runs:2d} runs  {shape}")
    return "\n".join(lines)


def _postponed_through_rest(rest_uri: str | None) -> bool:
    """pypaimon writes a postpone-bucket table through the catalog's REST API; the compactor places its rows in
    buckets (nobody reads them before); pypaimon then reads what it wrote. Whether it agrees."""
    try:
        from pypaimon import CatalogFactory, Schema
    except ImportError:
        _say("pypaimon is not installed: skipping the REST catalog part")
        return True
    if not rest_uri:
        _say("the cluster serves no REST catalog: skipping that part")
        return True
    cat = CatalogFactory.create({"metastore": "rest", "uri": rest_uri, "warehouse": "demo",
                                 "token.provider": "bear", "token": "no-token-is-checked-here"})
    schema = pa.schema([pa.field("id", pa.int64(), nullable=False), pa.field("v", pa.string())])
    cat.create_table("demo.postponed", Schema.from_pyarrow_schema(schema, primary_keys=["id"], options={
        "bucket": "-2", "postpone.default-bucket-num": "2", "deletion-vectors.enabled": "true",
        "file.format": "parquet"}), False)
    model: dict[int, str] = {}
    for i in range(3):
        rows = pa.table({"id": pa.array(range(i * 100, i * 100 + 200), pa.int64()), "v": [f"p{i}"] * 200},
                        schema=schema)
        builder = cat.get_table("demo.postponed").new_batch_write_builder()
        w, c = builder.new_write(), builder.new_commit()
        w.write_arrow(rows)
        c.commit(w.prepare_commit())
        w.close()
        c.close()
        model.update(zip(rows["id"].to_pylist(), rows["v"].to_pylist(), strict=True))
    t0 = time.perf_counter()
    deadline = time.monotonic() + 120
    while True:
        rb = cat.get_table("demo.postponed").new_read_builder()
        got = {r["id"]: r["v"] for r in rb.new_read().to_arrow(rb.new_scan().plan().splits()).to_pylist()}
        if got == model or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    same = got == model
    _say(f"pypaimon wrote demo.postponed (bucket -2) through the REST catalog ({rest_uri}): 3 commits, "
         f"{len(model):,} keys; the compactor placed them in buckets, pypaimon read them "
         f"{time.perf_counter() - t0:.1f} s after the last commit: {'as written' if same else 'NOT as written'}")
    return same


def _dynamic_buckets(client: Any, warehouse: str) -> bool:
    """A dynamic-bucket table whose keys move between partitions (cross-partition upsert), written through the
    writer service: the catalog assigns each new key a bucket; lsmlake and pypaimon read each key once, in
    the partition it was last written to. Whether they agree with the model."""
    from lsmlake.catalog.filesystem import FileSystemCatalog

    client.create_table("demo.accounts", "id BIGINT NOT NULL, tier STRING NOT NULL, balance BIGINT",
                        primary_keys=["id"], partition_keys=["tier"],
                        options={"bucket": "-1", "dynamic-bucket.target-row-num": "5000"})
    rng = np.random.default_rng(7)
    tiers = np.array(["bronze", "silver", "gold"])
    model: dict[int, tuple[str, int]] = {}
    t0 = time.perf_counter()
    for r in range(6):  # new accounts, and existing ones changing tier
        ids = np.r_[np.arange(r * 4_000, (r + 1) * 4_000), rng.choice(max(r, 1) * 4_000, 2_000, replace=False)]
        batch = pa.table({"id": pa.array(ids, pa.int64()), "tier": pa.array(tiers[rng.integers(0, 3, len(ids))]),
                          "balance": pa.array(rng.integers(0, 10_000, len(ids)), pa.int64())})
        client.write("demo.accounts", batch)
        model.update(zip(batch["id"].to_pylist(), zip(batch["tier"].to_pylist(), batch["balance"].to_pylist(),
                                                      strict=True), strict=True))
    secs = time.perf_counter() - t0
    ours = {r["id"]: (r["tier"], r["balance"]) for r in client.scan("demo.accounts").to_pylist()}
    same = ours == model
    table = FileSystemCatalog(warehouse).get_table("demo.accounts")
    buckets = {(s.partition, s.bucket) for s in table.plan()}
    text = (f"demo.accounts (bucket -1, keys move between tiers): {len(model):,} accounts written in 6 batches "
            f"({secs:.1f} s), {len(buckets)} buckets the catalog assigned; lsmlake reads "
            f"{'each key once, in its last tier' if same else 'OTHER rows than the model'}")
    try:
        from pypaimon import CatalogFactory
    except ImportError:
        _say(text + " (pypaimon is not installed: not read with it)")
        return same
    rb = CatalogFactory.create({"warehouse": warehouse}).get_table("demo.accounts").new_read_builder()
    theirs_rows = rb.new_read().to_arrow(rb.new_scan().plan().splits()).to_pylist()
    theirs = {r["id"]: (r["tier"], r["balance"]) for r in theirs_rows}
    agree = theirs == model and len(theirs_rows) == len(model)
    _say(text + f", pypaimon {'too' if agree else 'DIFFERENT rows'}")
    return same and agree


def _duckdb_reads_iceberg(client: Any, model: dict[tuple[int, str], tuple[float, str]]) -> bool:
    """DuckDB reads demo.orders through the Iceberg metadata the catalog published with its commits: after the
    full compaction every row is on the highest level, which is what an Iceberg reader sees of a primary-key
    table. Whether it agrees with the model."""
    from lsmlake.iceberg.duckdb_reader import duckdb_iceberg_connection

    try:
        con = duckdb_iceberg_connection()
    except ImportError:
        _say("DuckDB or its iceberg extension package is not installed: not read through Iceberg")
        return True
    import duckdb

    where = client.sync_iceberg("demo.orders")  # already current: the catalog published with every commit
    t0 = time.perf_counter()
    rows = con.sql(f"SELECT id, region, amount, status FROM iceberg_scan('{where.metadata_location}')").fetchall()
    secs = time.perf_counter() - t0
    got = {(i, r): (a, s) for i, r, a, s in rows}
    same = got == model and len(rows) == len(got)
    _say(f"read demo.orders with DuckDB {duckdb.__version__} through its Iceberg metadata (snapshot "
         f"{where.snapshot_id}, {'published with the commits' if not where.published else 'published now'}): "
         f"{len(rows):,} rows in {secs:.2f} s; {'the same rows' if same else 'DIFFERENT rows'}")
    return same


def _order_batch(rng: np.random.Generator, lo: int, n: int) -> pa.Table:
    ids = np.arange(lo, lo + n, dtype=np.int64)
    return pa.table({"id": ids, "region": pa.array(np.array(REGIONS)[ids % 3]),
                     "amount": pa.array(np.round(rng.random(n) * 1000, 2)),
                     "status": pa.array(np.full(n, "new"))})


def main() -> int:
    from lsmlake.client.client import Client
    from lsmlake.ingest.kafka_offsets import committed_offsets
    from lsmlake.kafka.client import producer

    root = tempfile.mkdtemp(prefix="lsmlake-demo-")
    warehouse = os.path.join(root, "warehouse")
    proc = None
    ok = True
    try:
        _say(f"lake up --warehouse {warehouse}  (Kafka, catalog, writer, compactor with Spark) ...")
        t0 = time.perf_counter()
        proc, state = _lake_up(warehouse, Path(root) / "lake-up.log")
        _say(f"  cluster up in {time.perf_counter() - t0:.1f} s: catalog {state.catalog}, writer {state.writer}, "
             f"compactor {state.compactor}, kafka {state.kafka}")
        client = Client(state.catalog, writer=state.writer, compactor=state.compactor, warehouse=warehouse)
        client.create_database("demo")
        client.create_table("demo.orders", "id BIGINT NOT NULL, region STRING NOT NULL, amount DOUBLE, status STRING",
                            primary_keys=["id", "region"], partition_keys=["region"],
                            options={"bucket": "4", "metadata.iceberg.storage": "table-location"})
        client.create_table("demo.profiles", "id BIGINT NOT NULL, name STRING, city STRING, score BIGINT",
                            primary_keys=["id"], options={"bucket": "2", "merge-engine": "partial-update"})
        _say("created demo.orders (partitioned by region, 4 buckets, Iceberg metadata published with every commit) "
             "and demo.profiles (partial-update)")

        # -- 1,000,000 rows over gRPC ---------------------------------------------------------------
        model: dict[tuple[int, str], tuple[float, str]] = {}
        per_thread = ROWS // THREADS
        errors: list[BaseException] = []
        written: list[list[pa.Table]] = [[] for _ in range(THREADS)]

        def client_thread(t: int) -> None:
            rng = np.random.default_rng(t)
            try:
                with Client(state.catalog, writer=state.writer, warehouse=warehouse) as c:
                    for lo in range(t * per_thread, (t + 1) * per_thread, BATCH):
                        batch = _order_batch(rng, lo, min(BATCH, (t + 1) * per_thread - lo))
                        c.write("demo.orders", batch)
                        written[t].append(batch)  # the model is built after the clock stops: not the writer's time
            except BaseException as e:
                errors.append(e)

        t0 = time.perf_counter()
        threads = [threading.Thread(target=client_thread, args=(t,)) for t in range(THREADS)]
        for th in threads:
            th.start()
        for th in threads:
            th.join()
        if errors:
            raise errors[0]
        secs = time.perf_counter() - t0
        for batch in (b for bs in written for b in bs):  # the threads' keys are disjoint
            model.update(zip(zip(batch["id"].to_pylist(), batch["region"].to_pylist(), strict=True),
                             zip(batch["amount"].to_pylist(), batch["status"].to_pylist(), strict=True), strict=True))
        _say(f"wrote {ROWS:,} rows over gRPC from {THREADS} clients in {secs:.1f} s "
             f"({ROWS / secs:,.0f} rows/s, each reply after its commit)")

        # -- 100,000 change events through Kafka ----------------------------------------------------
        rng = np.random.default_rng(99)
        half = EVENTS // 2
        cdc: list[tuple[bytes, bytes | None]] = []
        for i in range(half):
            k = int(rng.integers(0, ROWS))
            key = (k, REGIONS[k % 3])
            old = model.get(key)
            row_old = {"id": k, "region": key[1], "amount": old[0], "status": old[1]} if old else None
            if old is not None and rng.random() < 0.2:
                cdc.append((str(k).encode(), json.dumps({"op": "d", "before": row_old, "after": None}).encode()))
                del model[key]
            else:
                amount, status = round(float(rng.random()) * 1000, 2), f"e{i}"
                new = {"id": k, "region": key[1], "amount": amount, "status": status}
                op = "u" if old is not None else "c"
                cdc.append((str(k).encode(), json.dumps({"op": op, "before": row_old, "after": new}).encode()))
                model[key] = (amount, status)
        profiles: dict[int, dict[str, Any]] = {}
        plain: list[tuple[bytes, bytes | None]] = []
        for i in range(EVENTS - half):
            k = int(rng.integers(0, PROFILES))
            field, value = [("name", f"user-{k}-{i}"), ("city", ["Oslo", "Lima", "Pune"][i % 3]),
                            ("score", int(rng.integers(0, 1000)))][i % 3]
            plain.append((str(k).encode(), json.dumps({"id": k, field: value}).encode()))
            profiles.setdefault(k, {"id": k, "name": None, "city": None, "score": None})[field] = value
        t0 = time.perf_counter()
        p = producer(state.kafka, linger_ms=20, batch_size=256 << 10)
        ends: dict[str, dict[int, int]] = {"lake.ingest.demo.orders": {}, "lake.ingest.demo.profiles": {}}
        futures = [(topic, p.send(topic, key=k, value=v)) for topic, msgs in
                   (("lake.ingest.demo.orders", cdc), ("lake.ingest.demo.profiles", plain)) for k, v in msgs]
        p.flush(timeout=120)
        for topic, f in futures:
            md = f.get(timeout=60)
            ends[topic][md.partition] = max(ends[topic].get(md.partition, 0), md.offset + 1)
        p.close(timeout=10)
        from lsmlake.catalog.filesystem import FileSystemCatalog

        cat = FileSystemCatalog(warehouse)
        deadline = time.monotonic() + 240
        for topic, table_id in (("lake.ingest.demo.orders", "demo.orders"),
                                ("lake.ingest.demo.profiles", "demo.profiles")):
            while committed_offsets(cat, table_id, topic, list(ends[topic])) != ends[topic]:
                if time.monotonic() > deadline:
                    raise SystemExit(f"the writer did not ingest {topic} in time")
                time.sleep(0.25)
        secs = time.perf_counter() - t0
        _say(f"produced {EVENTS:,} change events (Debezium for orders, JSON for profiles); all committed "
             f"exactly once after {secs:.1f} s ({EVENTS / secs:,.0f} events/s)")

        # -- compaction -----------------------------------------------------------------------------
        _say("levels of demo.orders now (the compactor has been merging in the background):")
        _say(_levels(warehouse, "demo.orders"))
        t0 = time.perf_counter()
        result = client.compact("demo.orders", full=True, wait=True, timeout_s=300)
        _say(f"full compaction through the compactor (Spark, a task per bucket) in {time.perf_counter() - t0:.1f} s: "
             f"{len(result.compacted)} of {len(result.compacted) + len(result.not_compacted)} buckets of snapshot "
             f"{result.request_snapshot_id} are one sorted run (COMPACT snapshots "
             f"{', '.join(map(str, sorted({c.snapshot_id for c in result.compacted}))) or 'none'})")
        for missed in result.not_compacted:
            ok = False
            _say(f"  NOT COMPACTED: {missed}")
        _say("levels after:")
        _say(_levels(warehouse, "demo.orders"))

        # -- freshness: a deletion-vector table's rows are visible once compacted -------------------
        client.create_table("demo.events", "id BIGINT NOT NULL, v STRING", primary_keys=["id"],
                            options={"bucket": "2", "deletion-vectors.enabled": "true", "write-only": "true"})
        events_table = cat.get_table("demo.events")
        fresh = []
        for i in range(5):
            reply = client.write("demo.events", pa.table({"id": pa.array(range(i * 100, i * 100 + 100), pa.int64()),
                                                          "v": [f"e{i}"] * 100}), commit_now=True)
            t0 = time.perf_counter()
            snap = events_table.snapshots.snapshot(reply.snapshot_id)
            mine = {e.file.file_name for m in events_table.manifests.read_list(snap.delta_manifest_list)
                    for e in events_table.manifests.read_manifest(m.file_name)}
            deadline = time.monotonic() + 60
            while any(f.file_name in mine and f.level == 0
                      for sp in events_table.new_scan(None, None, all_levels=True).plan() for f in sp.files):
                if time.monotonic() > deadline:
                    raise SystemExit("the compactor did not compact demo.events within 60 s")
                time.sleep(0.05)
            fresh.append(time.perf_counter() - t0)
        _say(f"freshness (commit -> compacted and visible, deletion-vector table): median "
             f"{sorted(fresh)[len(fresh) // 2]:.2f} s over {len(fresh)} commits")
        visible = client.scan("demo.events").num_rows
        ok = ok and visible == 500
        ok = _postponed_through_rest(state.rest) and ok
        ok = _dynamic_buckets(client, warehouse) and ok
        # -- reads ----------------------------------------------------------------------------------
        t0 = time.perf_counter()
        ours = client.scan("demo.orders")
        secs = time.perf_counter() - t0
        _say(f"read demo.orders with lsmlake: {ours.num_rows:,} rows in {secs:.2f} s")
        got = {(i, r): (a, s) for i, r, a, s in zip(*(ours[c].to_pylist() for c in ("id", "region", "amount",
                                                                                        "status")), strict=True)}
        if got != model:
            ok = False
            _say(f"MISMATCH: lsmlake read {len(got):,} rows, the model has {len(model):,}")
        try:
            from pypaimon import CatalogFactory
        except ImportError:
            _say("pypaimon is not installed: skipping the second reader")
        else:
            t0 = time.perf_counter()
            pt = CatalogFactory.create({"warehouse": warehouse}).get_table("demo.orders")
            rb = pt.new_read_builder()
            theirs = rb.new_read().to_arrow(rb.new_scan().plan().splits())
            secs = time.perf_counter() - t0
            same = theirs.num_rows == ours.num_rows and theirs.select(ours.column_names).sort_by(
                [("id", "ascending"), ("region", "ascending")]).equals(
                ours.sort_by([("id", "ascending"), ("region", "ascending")]))
            _say(f"read demo.orders with pypaimon 2.1.0: {theirs.num_rows:,} rows in {secs:.2f} s; "
                 f"{'the same rows' if same else 'DIFFERENT rows'}")
            ok = ok and same
        ok = _duckdb_reads_iceberg(client, model) and ok
        prof = {r["id"]: r for r in client.scan("demo.profiles").to_pylist()}
        same = prof == profiles
        _say(f"demo.profiles (partial-update from JSON events): {len(prof):,} rows, "
             f"{'as the model says' if same else 'NOT as the model says'}")
        ok = ok and same
        _say("everything agrees" if ok else "DISAGREEMENT: see above")
        client.close()
    finally:
        if proc is not None and proc.poll() is None:
            from lsmlake.cli.cluster import down

            try:
                down(warehouse)
            except Exception as e:  # fall back to the process itself
                _say(f"lake down: {e}")
                proc.terminate()
            proc.wait(120)
            _say("cluster stopped")
        shutil.rmtree(root, ignore_errors=True)
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
