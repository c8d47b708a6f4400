"""Soak test: the whole cluster under steady load for a bounded time, on loopback only.

Starts the embedded broker, catalog, writer and compactor (Spark local) as real processes with
`lsmlake.cli.cluster.Cluster`, then runs `--writers` gRPC writer threads and one Kafka producer feeding the
writer's ingestion, until `--minutes` have passed (or every writer made `--max-writes` writes). Every
`--sample-s` seconds it records the rows acknowledged (gRPC) and committed (Kafka offsets in the snapshots),
the resident memory of each service's process tree (VmRSS summed over the process and its children, so
the compactor's JVM counts), the sorted runs of every bucket of both tables, the snapshot files of each
table (how many, and the age of the oldest) and, from the catalog's metrics endpoint, its outbox size and
its expiration and purge counters.

Retention is short, so that snapshots and the outbox reach a steady state within the run: both tables keep
snapshots `--snapshot-time-retained` ('1 min'; at least `--snapshot-num-retained-min`, 5), the catalog
expires every `--expire-interval` (20 s) and purges delivered outbox events `--outbox-retention` (60 s)
after their delivery (it looks every `relay.PURGE_EVERY_S`, 60 s). `--settle-s` keeps sampling after the
load until the catalog has purged delivered events once more (a short run may end before its first purge).

Both tables use the aggregation merge engine with `cnt` summed, and every row carries `cnt = 1`, so a row
applied twice reads as 2: at the end the tables are read back and checked against the model of what was
acknowledged (gRPC: per id, the acknowledged writes of it, plus at most the writes of unknown outcome;
Kafka: per key, the number of messages the broker acknowledged). The gRPC writes update a bounded set of
`--grpc-keys` ids, so the table reaches a steady size (`--grpc-keys 0`: fresh ids, a growing table).

Memory is "flat" when the median RSS of the last third of the samples is at most 10% (and at least 64 MB
allowed) above the median of the middle third: the first third is warm-up (JVM start, caches, buffers).
The snapshot count of each table and the outbox size are judged the same way, with an absolute allowance
of what one pass of the job that bounds them removes at the last third's rate: the snapshots committed in
one `--expire-interval`, the events recorded in one purge period.

Prints a table, then the benchmark JSON line: the rows/s held over the last third against the rows/s of the
middle third of the same run.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import statistics
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
import pyarrow as pa

from catalog_svc.relay import PURGE_EVERY_S
from lsmlake.catalog.filesystem import FileSystemCatalog
from lsmlake.cli.cluster import Cluster
from lsmlake.client.client import Client
from lsmlake.errors import BackPressureError, InvalidInputError, LakeError, NotFoundError
from lsmlake.format.options import parse_duration_ms
from lsmlake.ingest.kafka_offsets import committed_offsets
from lsmlake.kafka.broker import free_port
from lsmlake.kafka.client import close_producer, producer

GRPC_TABLE = "soak.grpc_rows"
KAFKA_TABLE = "soak.kafka_rows"
KAFKA_TOPIC = "lake.ingest." + KAFKA_TABLE
TOPIC_PARTITIONS = 4
COLUMNS = "id BIGINT NOT NULL, cnt BIGINT, w INT, payload STRING"
TABLE_OPTIONS = {"bucket": "4", "merge-engine": "aggregation", "fields.cnt.aggregate-function": "sum",
                 "fields.w.aggregate-function": "last_non_null_value",
                 "fields.payload.aggregate-function": "last_non_null_value"}
FLAT_FRACTION = 0.10
FLAT_MIN_MB = 64.0
SERVICES = ("catalog", "writer", "compactor", "broker")
#: the embedded broker keeps every message in memory (Tansu memory storage): it grows by design, so it is
#: reported but not judged
JUDGED = ("catalog", "writer", "compactor")
FLAT_MIN_COUNT = 5  # snapshot count and outbox size: growth always allowed, whatever the rates
TABLES = (GRPC_TABLE, KAFKA_TABLE)
T = TypeVar("T")


# -- process memory -------------------------------------------------------------------------------

def _children() -> dict[int, list[int]]:
    out: dict[int, list[int]] = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        out.setdefault(ppid, []).append(int(d))
    return out


def _rss_kb(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def _cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def service_rss_mb() -> dict[str, float]:
    """RSS (MB) of each service started by this process, summed over its process tree; `<service>.jvm`: the
    part of it in Java child processes (the compactor's Spark driver), `<service>.children` in other child
    processes (Spark's Python workers)."""
    tree = _children()
    out: dict[str, float] = {}
    for pid in tree.get(os.getpid(), []):
        cmd = _cmdline(pid)
        name = next((s for s in SERVICES if f"{s}_svc" in cmd.split()), "broker" if "tansu" in cmd else None)
        if name is None:
            continue
        total, jvm, children, todo = 0, 0, 0, [pid]
        while todo:
            p = todo.pop()
            kb = _rss_kb(p)
            total += kb
            if p != pid:
                if "java" in _cmdline(p).split(" ", 1)[0]:
                    jvm += kb
                else:
                    children += kb
            todo.extend(tree.get(p, []))
        out[name] = out.get(name, 0.0) + total / 1024
        if jvm:
            out[f"{name}.jvm"] = out.get(f"{name}.jvm", 0.0) + jvm / 1024
        if children:
            out[f"{name}.children"] = out.get(f"{name}.children", 0.0) + children / 1024
    return out


# -- load ----------------------------------------------------------------------------------------

@dataclass
class WriterStats:
    """What one gRPC writer thread did."""

    acked: list[np.ndarray] = field(default_factory=list)  # ids of acknowledged writes
    refused: list[np.ndarray] = field(default_factory=list)  # ids of writes definitely not applied
    unknown: list[np.ndarray] = field(default_factory=list)  # ids of writes with an unknown outcome
    latencies: list[tuple[float, float]] = field(default_factory=list)  # (end time, seconds) of acked writes
    acked_rows: int = 0
    errors: dict[str, int] = field(default_factory=dict)


def grpc_writer(index: int, writers: int, target: str, rows: int, stop: threading.Event, max_writes: int,
                stats: WriterStats, keys: int = 0) -> None:
    """Write batches of ids of this writer's class (index, index + writers, ...: the writers' key ranges
    interleave): fresh ids with `keys` 0 (the table grows all run long), else `rows` distinct ids drawn from
    the class's share of `keys` (the table reaches a steady size and every row is an update)."""
    rng = np.random.default_rng(index)
    payload = pa.array(["x" * 40] * rows)
    client = Client(target[0], writer=target[1], timeout_s=60)
    share = max(rows, keys // writers)
    n = 0
    try:
        while not stop.is_set() and n < max_writes:
            if keys:
                ids = rng.choice(share, rows, replace=False).astype(np.int64) * writers + index
            else:
                ids = (np.arange(n * rows, (n + 1) * rows, dtype=np.int64) * writers + index)
                rng.shuffle(ids)
            batch = pa.table({"id": ids, "cnt": np.ones(rows, np.int64), "w": np.full(rows, index, np.int32),
                              "payload": payload})
            n += 1
            started = time.perf_counter()
            try:
                client.write(GRPC_TABLE, batch)
            except (BackPressureError, InvalidInputError) as e:
                stats.refused.append(ids)
                stats.errors[type(e).__name__] = stats.errors.get(type(e).__name__, 0) + 1
                stop.wait(0.5)
                continue
            except LakeError as e:
                stats.unknown.append(ids)
                stats.errors[type(e).__name__] = stats.errors.get(type(e).__name__, 0) + 1
                stop.wait(0.5)
                continue
            stats.latencies.append((time.monotonic(), time.perf_counter() - started))
            stats.acked.append(ids)
            stats.acked_rows += rows
    finally:
        client.close()


@dataclass
class ProducerStats:
    """What the Kafka producer did: acknowledged messages per key, and how many were not acknowledged."""

    acked: dict[int, int] = field(default_factory=dict)
    failed: int = 0
    sent: int = 0


def kafka_producer(bootstrap: str, rate: float, keys: int, stop: threading.Event, stats: ProducerStats) -> None:
    """Send `{"id", "cnt": 1}` messages at about `rate` per second, in batches of a tenth of a second."""
    rng = random.Random(7)
    p = producer(bootstrap, linger_ms=20)
    per_tick = max(1, int(rate / 10))
    try:
        while not stop.is_set():
            tick = time.monotonic()
            pending = []
            for _ in range(per_tick):
                k = rng.randrange(keys)
                value = json.dumps({"id": k, "cnt": 1, "w": -1, "payload": "k"}).encode()
                pending.append((k, p.send(KAFKA_TOPIC, key=str(k).encode(), value=value)))
            for k, fut in pending:
                try:
                    fut.get(timeout=30)
                    stats.acked[k] = stats.acked.get(k, 0) + 1
                except Exception:
                    stats.failed += 1
            stats.sent += len(pending)
            stop.wait(max(0.0, 0.1 - (time.monotonic() - tick)))
    finally:
        close_producer(p, 10)


# -- sampling ------------------------------------------------------------------------------------

def _retrying(read: Callable[[], T], attempts: int = 5) -> T:
    """`read()`, again when a snapshot it walks is expired under it (the catalog expires concurrently)."""
    for attempt in range(attempts):
        try:
            return read()
        except (NotFoundError, FileNotFoundError):
            if attempt == attempts - 1:
                raise
            time.sleep(0.2)  # the next attempt lists the snapshots afresh
    raise AssertionError("unreachable")


def sorted_runs(catalog: FileSystemCatalog, table_id: str) -> dict[int, int]:
    """Sorted runs of each bucket in the latest snapshot: each level-0 file, plus each non-empty level."""
    def read() -> dict[int, int]:
        out = {}
        for s in catalog.get_table(table_id).plan():
            levels = [f.level for f in s.files]
            out[s.bucket] = levels.count(0) + len({lv for lv in levels if lv > 0})
        return out
    return _retrying(read)


def kafka_committed(catalog: FileSystemCatalog) -> int:
    return _retrying(lambda: sum(committed_offsets(catalog, KAFKA_TABLE, KAFKA_TOPIC,
                                                   list(range(TOPIC_PARTITIONS))).values()))


@dataclass
class Snapshots:
    """The snapshot files of one table: how many, the newest id (= snapshots ever committed, as ids count
    from 1 without gaps) and the age of the oldest file."""

    count: int
    latest: int
    oldest_age_s: float


def table_snapshots(catalog: FileSystemCatalog, table_id: str) -> Snapshots:
    def read() -> Snapshots:
        sm = catalog.get_table(table_id).snapshots
        ids = sm.ids()
        if not ids:
            return Snapshots(0, 0, 0.0)
        oldest = sm.snapshot(ids[0]).time_millis
        return Snapshots(len(ids), ids[-1], round(max(0.0, time.time() - oldest / 1000), 1))
    return _retrying(read)


#: what the soak reads from the catalog's metrics endpoint: name in the report -> (sample name, labels)
CATALOG_METRICS = {
    "outbox": ("lsmlake_catalog_outbox_events", {}),
    "outbox_pending": ("lsmlake_catalog_outbox_pending", {}),
    "purged_delivered": ("lsmlake_catalog_outbox_purged_total", {"state": "delivered"}),
    "purged_undelivered": ("lsmlake_catalog_outbox_purged_total", {"state": "undelivered"}),
    "expired": ("lsmlake_catalog_expired_snapshots_total", {}),
}


def catalog_metrics(port: int) -> dict[str, float] | None:
    """The catalog's outbox gauges and maintenance counters (CATALOG_METRICS), labelled samples summed;
    `recorded`: the events ever recorded (those in the outbox plus those purged). None when the endpoint
    does not answer, or the catalog could not read its store (its gauges read -1)."""
    from prometheus_client.parser import text_string_to_metric_families

    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as reply:
            text = reply.read().decode()
    except OSError:
        return None
    out = dict.fromkeys(CATALOG_METRICS, 0.0)
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            for key, (name, labels) in CATALOG_METRICS.items():
                if sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items()):
                    out[key] += sample.value
    if out["outbox"] < 0 or out["outbox_pending"] < 0:
        return None
    out["recorded"] = out["outbox"] + out["purged_delivered"] + out["purged_undelivered"]
    return out


@dataclass
class Sample:
    t: float  # seconds since the load started
    grpc_rows: int
    kafka_rows: int
    rss_mb: dict[str, float]
    runs: dict[str, dict[int, int]]
    snapshots: dict[str, Snapshots]
    catalog: dict[str, float] | None  # catalog_metrics(), None when not read


def third_medians(values: list[float]) -> tuple[float, float]:
    """Medians of the middle and last third of a series."""
    n = len(values)
    a, b = n // 3, 2 * n // 3
    mid, last = values[a:b] or values, values[b:] or values
    return statistics.median(mid), statistics.median(last)


def rate(samples: list[Sample], lo: int, hi: int) -> float:
    """Rows per second (gRPC + Kafka) between samples `lo` and `hi`."""
    if hi <= lo:
        return 0.0
    a, b = samples[lo], samples[hi]
    return (b.grpc_rows + b.kafka_rows - a.grpc_rows - a.kafka_rows) / max(1e-9, b.t - a.t)


# -- main ----------------------------------------------------------------------------------------

def run(args: argparse.Namespace) -> dict[str, Any]:
    root = Path(args.warehouse or tempfile.mkdtemp(prefix="lsmlake-soak-"))
    warehouse = root / "warehouse"
    ports = {"catalog": free_port(), "writer": free_port(), "compactor": free_port()}
    metrics_port = free_port()
    catalog_args = ["--metrics-port", str(metrics_port), "--expire-interval", str(args.expire_interval),
                    "--outbox-retention", str(args.outbox_retention)]
    cluster = Cluster(str(warehouse), ports=ports, spark_master=args.spark_master, commit_interval_s=1.0,
                      ingest=[f"{KAFKA_TABLE}:json"], log_dir=str(root / "logs"),
                      extra_args={"catalog": catalog_args})
    options = {**TABLE_OPTIONS, "snapshot.time-retained": args.snapshot_time_retained,
               "snapshot.num-retained.min": str(args.snapshot_num_retained_min)}
    print(f"starting the cluster in {root} ...", flush=True)
    state = cluster.start()
    report: dict[str, Any] = {"root": str(root), "retention": {
        "snapshot_time_retained": args.snapshot_time_retained,
        "snapshot_num_retained_min": args.snapshot_num_retained_min, "expire_interval_s": args.expire_interval,
        "outbox_retention_s": args.outbox_retention, "outbox_purge_every_s": PURGE_EVERY_S}}
    try:
        with Client(state.catalog, writer=state.writer) as admin:
            admin.create_database("soak")
            admin.create_table(GRPC_TABLE, COLUMNS, primary_keys=["id"], options=options)
            admin.create_table(KAFKA_TABLE, COLUMNS, primary_keys=["id"], options=options)
        catalog = FileSystemCatalog(str(warehouse))
        stop_trigger = catalog.get_table(GRPC_TABLE).options.stop_trigger()
        stop = threading.Event()
        wstats = [WriterStats() for _ in range(args.writers)]
        pstats = ProducerStats()
        threads = [threading.Thread(target=grpc_writer, name=f"writer-{i}", daemon=True,
                                    args=(i, args.writers, (state.catalog, state.writer), args.rows, stop,
                                          args.max_writes, wstats[i], args.grpc_keys))
                   for i in range(args.writers)]
        threads.append(threading.Thread(target=kafka_producer, name="producer", daemon=True,
                                        args=(state.kafka, args.kafka_rate, args.kafka_keys, stop, pstats)))
        started = time.monotonic()
        end = started + args.minutes * 60
        for t in threads:
            t.start()
        samples: list[Sample] = []
        while True:
            now = time.monotonic()
            samples.append(Sample(now - started, sum(s.acked_rows for s in wstats), kafka_committed(catalog),
                                  service_rss_mb(), {t: sorted_runs(catalog, t) for t in TABLES},
                                  {t: table_snapshots(catalog, t) for t in TABLES}, catalog_metrics(metrics_port)))
            s = samples[-1]
            print(f"t={s.t:6.1f}s grpc={s.grpc_rows:>10,} kafka={s.kafka_rows:>9,} "
                  f"rss={ {k: round(v) for k, v in sorted(s.rss_mb.items())} } "
                  f"runs(max)={max(s.runs[GRPC_TABLE].values(), default=0)}/"
                  f"{max(s.runs[KAFKA_TABLE].values(), default=0)} "
                  f"snapshots={s.snapshots[GRPC_TABLE].count}/{s.snapshots[KAFKA_TABLE].count} "
                  f"outbox={_count(s.catalog, 'outbox')}", flush=True)
            writers_done = not any(t.is_alive() for t in threads[:-1])
            if now >= end or writers_done:
                break
            time.sleep(min(args.sample_s, max(0.0, end - time.monotonic())))  # bounded by --minutes
        stop.set()
        for t in threads:
            t.join(120)
        load_s = time.monotonic() - started
        at_load_end = catalog_metrics(metrics_port) or samples[-1].catalog
        # the Kafka messages acknowledged by the broker must all reach the table (bounded wait)
        kafka_total = sum(pstats.acked.values()) + pstats.failed
        deadline = time.monotonic() + 180
        while kafka_committed(catalog) < kafka_total and time.monotonic() < deadline:
            time.sleep(1.0)  # polling interval, bounded by the deadline
        report["kafka_drain_complete"] = kafka_committed(catalog) >= kafka_total
        report["settled"] = settle(catalog, metrics_port, at_load_end, started + load_s, args) \
            if args.settle_s > 0 else None
    finally:
        codes = cluster.stop()
    report["exit_codes"] = dict(codes)
    report.update(verify(catalog, wstats, pstats))
    report.update(summarise(samples, wstats, pstats, load_s, stop_trigger, args))
    return report


def _count(metrics: dict[str, float] | None, key: str) -> int | None:
    return None if metrics is None else int(metrics[key])


def settle(catalog: FileSystemCatalog, metrics_port: int, at_load_end: dict[str, float] | None,
           load_ended: float, args: argparse.Namespace) -> dict[str, Any]:
    """After the load (and the Kafka drain): wait, at most `--settle-s`, until the catalog has purged
    delivered outbox events since the load ended, then read the outbox and the snapshots once more.

    A run shorter than the purge period may end before its first purge; after this, every event delivered
    `--outbox-retention` before that purge is gone."""
    base = at_load_end["purged_delivered"] if at_load_end is not None else None
    deadline = time.monotonic() + args.settle_s
    while True:
        m = catalog_metrics(metrics_port)
        purged = m is not None and base is not None and m["purged_delivered"] > base
        waited = time.monotonic() - load_ended
        print(f"settle: {waited:6.1f}s after the load, outbox={_count(m, 'outbox')} "
              f"purged(delivered)={_count(m, 'purged_delivered')} (at the load's end {base})", flush=True)
        if purged or time.monotonic() >= deadline:
            break
        time.sleep(min(args.sample_s, max(0.0, deadline - time.monotonic())))  # bounded by --settle-s
    snaps = {t: table_snapshots(catalog, t) for t in TABLES}
    return {"after_load_s": round(time.monotonic() - load_ended, 1), "purged_after_load": purged,
            "outbox": _count(m, "outbox"), "outbox_recorded": _count(m, "recorded"),
            "purged_delivered": _count(m, "purged_delivered"),
            "snapshots": {t: asdict(v) for t, v in snaps.items()}}


def verify(catalog: FileSystemCatalog, wstats: list[WriterStats], pstats: ProducerStats) -> dict[str, Any]:
    """Check the tables against the model; the counts of each kind of discrepancy (all 0 when correct).

    Per gRPC id: `cnt` must be at least the acknowledged writes of it (else missing) and at most those
    plus the writes of unknown outcome (else: applied twice, or a refused write applied, or never written).
    """
    rows = catalog.get_table(GRPC_TABLE).to_arrow(projection=["id", "cnt"])
    ids = rows.column("id").to_numpy()

    def per_id(parts: list[np.ndarray], size: int, weights: np.ndarray | None = None) -> np.ndarray:
        flat = np.concatenate(parts or [np.zeros(0, np.int64)])
        return np.bincount(flat, weights=weights, minlength=size).astype(np.int64)

    acked_parts = [a for s in wstats for a in s.acked]
    refused_parts = [a for s in wstats for a in s.refused]
    unknown_parts = [a for s in wstats for a in s.unknown]
    size = 1 + max([int(ids.max()) if len(ids) else -1] + [int(a.max()) for a in
                                                           acked_parts + refused_parts + unknown_parts if len(a)])
    got = per_id([ids], size, rows.column("cnt").to_numpy())
    acked, refused, unknown = (per_id(p, size) for p in (acked_parts, refused_parts, unknown_parts))
    extra = got - acked - unknown
    out = {
        "grpc_acked_rows": int(acked.sum()),
        "grpc_missing": int(np.count_nonzero(got < acked)),
        "grpc_duplicated": int(np.count_nonzero((extra > 0) & (refused == 0) & (acked + unknown > 0))),
        "grpc_refused_present": int(np.count_nonzero((extra > 0) & (refused > 0))),
        "grpc_unexpected": int(np.count_nonzero((got > 0) & (acked + unknown + refused == 0))),
        "grpc_unknown_rows": int(unknown.sum()),
    }
    krows = catalog.get_table(KAFKA_TABLE).to_arrow(projection=["id", "cnt"])
    kgot = dict(zip(krows.column("id").to_numpy().tolist(), krows.column("cnt").to_numpy().tolist(), strict=True))
    if pstats.failed == 0:
        out["kafka_mismatched_keys"] = sum(1 for k in set(kgot) | set(pstats.acked)
                                           if kgot.get(k, 0) != pstats.acked.get(k, 0))
    else:  # a message the broker did not acknowledge may or may not be stored: bound the counts only
        out["kafka_mismatched_keys"] = sum(1 for k, c in kgot.items() if c < pstats.acked.get(k, 0))
    out["kafka_acked_messages"] = sum(pstats.acked.values())
    out["kafka_unacked_messages"] = pstats.failed
    out["kafka_rows_read"] = int(sum(kgot.values()))
    return out


def judge_count(times: list[float], values: list[float | None], totals: list[float | None],
                period_s: float) -> dict[str, Any] | None:
    """Judge a count (a table's snapshot files, the outbox's events) as memory is judged: flat when the median
    of the last third is at most 10%, or `allowance`, above that of the middle third. `totals` is the running
    total the count is taken from (snapshots committed, events recorded): at its rate over the last third,
    `period_s` of it (the interval of the job that bounds the count: what one of its passes removes) is the
    allowance, and at least FLAT_MIN_COUNT. Samples without a value are left out; None without any."""
    pts = [(t, v, c) for t, v, c in zip(times, values, totals, strict=True) if v is not None and c is not None]
    if not pts:
        return None
    series = [v for _, v, _ in pts]
    mid, last = third_medians(series)
    (t0, _, c0), (t1, _, c1) = pts[2 * len(pts) // 3], pts[-1]
    per_s = (c1 - c0) / (t1 - t0) if t1 > t0 else 0.0
    allowance = max(FLAT_FRACTION * mid, per_s * period_s, FLAT_MIN_COUNT)
    growth = last - mid
    return {"start": series[0], "mid_median": mid, "last_median": last, "max": max(series), "last": series[-1],
            "growth": round(growth, 1), "growth_pct": round(100 * growth / max(mid, 1e-9), 1),
            "rate_per_s": round(per_s, 2), "allowance": round(allowance, 1), "flat": growth <= allowance}


def summarise(samples: list[Sample], wstats: list[WriterStats], pstats: ProducerStats, load_s: float,
              stop_trigger: int, args: argparse.Namespace) -> dict[str, Any]:
    n = len(samples)
    a, b = n // 3, 2 * n // 3
    lat = sorted(d for s in wstats for _, d in s.latencies)
    memory = {}
    for name in sorted({k for s in samples for k in s.rss_mb}, key=lambda k: (SERVICES.index(k.split(".")[0]), k)):
        series = [s.rss_mb.get(name, 0.0) for s in samples]
        mid, last = third_medians(series)
        growth = last - mid
        memory[name] = {"start_mb": round(series[0], 1), "mid_median_mb": round(mid, 1),
                        "last_median_mb": round(last, 1), "max_mb": round(max(series), 1),
                        "growth_mb": round(growth, 1), "growth_pct": round(100 * growth / max(mid, 1e-9), 1),
                        "flat": growth <= max(FLAT_FRACTION * mid, FLAT_MIN_MB) if name in JUDGED else None}
    runs_max = {t: max((max(s.runs[t].values(), default=0) for s in samples), default=0)
                for t in (GRPC_TABLE, KAFKA_TABLE)}
    times = [s.t for s in samples]
    snapshots: dict[str, Any] = {}
    for t in TABLES:
        judged = judge_count(times, [s.snapshots[t].count for s in samples],
                             [s.snapshots[t].latest for s in samples], args.expire_interval)
        at_end = samples[-1].snapshots[t]
        snapshots[t] = {**(judged or {}), "committed": at_end.latest, "expired": at_end.latest - at_end.count,
                        "oldest_age_s": at_end.oldest_age_s,
                        "oldest_age_max_s": max(s.snapshots[t].oldest_age_s for s in samples[b:] or samples)}
    outbox = judge_count(times, [s.catalog["outbox"] if s.catalog else None for s in samples],
                         [s.catalog["recorded"] if s.catalog else None for s in samples], PURGE_EVERY_S)
    final = next((s.catalog for s in reversed(samples) if s.catalog is not None), None)
    if outbox is not None and final is not None:
        outbox.update({k: int(final[k]) for k in ("recorded", "purged_delivered", "purged_undelivered")})
        outbox["pending_max"] = max(int(s.catalog["outbox_pending"]) for s in samples if s.catalog is not None)
    return {
        "minutes": args.minutes, "writers": args.writers, "rows_per_write": args.rows,
        "grpc_keys": args.grpc_keys, "load_s": round(load_s, 1),
        "samples": n, "grpc_rows_per_s": round(samples[-1].grpc_rows / max(1e-9, samples[-1].t), 1),
        "kafka_rows_per_s": round(samples[-1].kafka_rows / max(1e-9, samples[-1].t), 1),
        "rate_mid": round(rate(samples, a, b), 1), "rate_last": round(rate(samples, b, n - 1), 1),
        "writes_acked": len(lat), "write_errors": {k: sum(s.errors.get(k, 0) for s in wstats)
                                                   for k in {k for s in wstats for k in s.errors}},
        "commit_latency_p50_s": round(float(np.percentile(lat, 50)), 3) if lat else None,
        "commit_latency_p99_s": round(float(np.percentile(lat, 99)), 3) if lat else None,
        "memory": memory, "stop_trigger": stop_trigger, "sorted_runs_max": runs_max,
        "sorted_runs_last": {t: samples[-1].runs[t] for t in (GRPC_TABLE, KAFKA_TABLE)},
        "snapshots": snapshots, "outbox": outbox,
        "snapshots_expired": int(final["expired"]) if final is not None else None,
        "catalog_samples_missing": sum(1 for s in samples if s.catalog is None),
        "kafka_sent": pstats.sent,
    }


def print_report(r: dict[str, Any]) -> None:
    print()
    keys = f"{r['grpc_keys']:,} ids" if r["grpc_keys"] else "fresh ids"
    print(f"soak: {r['minutes']} min, {r['writers']} gRPC writers x {r['rows_per_write']} rows/write ({keys}) + Kafka; "
          f"load ran {r['load_s']} s, {r['samples']} samples")
    print(f"{'held rate (gRPC acked)':34} {r['grpc_rows_per_s']:>12,.1f} rows/s")
    print(f"{'held rate (Kafka committed)':34} {r['kafka_rows_per_s']:>12,.1f} rows/s")
    print(f"{'rate middle third / last third':34} {r['rate_mid']:>12,.1f} / {r['rate_last']:,.1f} rows/s")
    print(f"{'Write calls acknowledged':34} {r['writes_acked']:>12,}   errors {r['write_errors']}")
    print(f"{'commit latency p50 / p99':34} {r['commit_latency_p50_s']} s / {r['commit_latency_p99_s']} s")
    print(f"{'sorted runs max (grpc / kafka)':34} {r['sorted_runs_max'][GRPC_TABLE]} / "
          f"{r['sorted_runs_max'][KAFKA_TABLE]} (stop-trigger {r['stop_trigger']})")
    print(f"{'sorted runs at the end':34} {r['sorted_runs_last']}")
    print(f"{'service':10} {'start MB':>9} {'mid med':>9} {'last med':>9} {'max':>9} {'growth':>14}  flat")
    for name, m in r["memory"].items():
        print(f"{name:10} {m['start_mb']:>9.1f} {m['mid_median_mb']:>9.1f} {m['last_median_mb']:>9.1f} "
              f"{m['max_mb']:>9.1f} {m['growth_mb']:>+8.1f} ({m['growth_pct']:+.1f}%)  {m['flat']}")
    print(f"{'count':26} {'start':>7} {'mid med':>8} {'last med':>8} {'max':>7} {'last':>7} "
          f"{'growth (allowed)':>18}  flat")
    counts = [(f"snapshots {t}", m) for t, m in r["snapshots"].items()] + [("outbox events", r["outbox"])]
    for name, m in counts:
        if m and "mid_median" in m:
            print(f"{name:26} {m['start']:>7.0f} {m['mid_median']:>8.1f} {m['last_median']:>8.1f} {m['max']:>7.0f} "
                  f"{m['last']:>7.0f} {m['growth']:>+8.1f} ({m['allowance']:>6.1f})  {m['flat']}")
        else:
            print(f"{name:26} not sampled")
    ret = r["retention"]
    for t, m in r["snapshots"].items():
        print(f"snapshots {t}: {m['committed']:,} committed, {m['expired']:,} expired, oldest "
              f"{m['oldest_age_s']} s old at the end (at most {m['oldest_age_max_s']} s in the last third); "
              f"retained {ret['snapshot_time_retained']!r} (min {ret['snapshot_num_retained_min']}), expired every "
              f"{ret['expire_interval_s']} s")
    if r["outbox"]:
        o = r["outbox"]
        print(f"outbox: {o.get('recorded', 0):,} events recorded, {o.get('purged_delivered', 0):,} purged "
              f"delivered, {o.get('purged_undelivered', 0):,} dropped undelivered, at most "
              f"{o.get('pending_max')} pending; delivered events kept {ret['outbox_retention_s']} s, purged every "
              f"{ret['outbox_purge_every_s']:.0f} s; {r['catalog_samples_missing']} sample(s) without metrics")
    if r["settled"]:
        st = r["settled"]
        print(f"settled {st['after_load_s']} s after the load (purged since: {st['purged_after_load']}): outbox "
              f"{st['outbox']} of {st['outbox_recorded']} recorded; snapshots "
              f"{ {t: v['count'] for t, v in st['snapshots'].items()} }")
    print(f"model check: gRPC acked {r['grpc_acked_rows']:,} rows, missing {r['grpc_missing']}, "
          f"duplicated {r['grpc_duplicated']}, refused-but-present {r['grpc_refused_present']}, "
          f"unexpected {r['grpc_unexpected']}; Kafka acked {r['kafka_acked_messages']:,} messages, "
          f"mismatched keys {r['kafka_mismatched_keys']}, drained {r['kafka_drain_complete']}")
    print(f"exit codes: {r['exit_codes']}")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--minutes", type=float, default=10.0, help="load duration")
    p.add_argument("--writers", type=int, default=8, help="gRPC writer threads")
    p.add_argument("--rows", type=int, default=2000, help="rows per Write call")
    p.add_argument("--grpc-keys", type=int, default=400_000,
                   help="distinct ids of the gRPC writes (the table's steady size); 0: fresh ids, the table grows")
    p.add_argument("--max-writes", type=int, default=1_000_000, help="Write calls per writer at most")
    p.add_argument("--kafka-rate", type=float, default=2000.0, help="Kafka messages per second")
    p.add_argument("--kafka-keys", type=int, default=50_000, help="distinct keys of the Kafka messages")
    p.add_argument("--sample-s", type=float, default=5.0, help="seconds between samples")
    p.add_argument("--spark-master", default="local[2]")
    p.add_argument("--snapshot-time-retained", default="1 min",
                   help="the tables' snapshot.time-retained (a duration such as '1 min' or '10 s')")
    p.add_argument("--snapshot-num-retained-min", type=int, default=5,
                   help="the tables' snapshot.num-retained.min")
    p.add_argument("--expire-interval", type=float, default=20.0,
                   help="seconds between the catalog's snapshot expirations (0: off)")
    p.add_argument("--outbox-retention", type=float, default=60.0,
                   help="seconds the catalog keeps a delivered outbox event")
    p.add_argument("--settle-s", type=float, default=0.0,
                   help="after the load, wait at most this long for one more outbox purge, then read the outbox "
                        "and snapshots again (for runs shorter than the purge period)")
    p.add_argument("--warehouse", default=None, help="directory for the warehouse and logs (default: a temp dir)")
    p.add_argument("--keep", action="store_true", help="keep the warehouse and logs")
    p.add_argument("--report", default=None, help="write the full report as JSON to this file")
    args = p.parse_args(argv)
    if args.grpc_keys < 0:
        p.error(f"--grpc-keys must be 0 (fresh ids) or a positive number of ids, not {args.grpc_keys}")
    if 0 < args.grpc_keys < args.rows * args.writers:
        p.error(f"--grpc-keys {args.grpc_keys} is fewer than --rows x --writers ({args.rows * args.writers}): "
                "each write needs --rows distinct ids of its writer's share")
    try:
        parse_duration_ms(args.snapshot_time_retained)
    except InvalidInputError as e:
        p.error(f"--snapshot-time-retained: {e}")
    if args.snapshot_num_retained_min < 1:
        p.error("--snapshot-num-retained-min must be at least 1")
    if not (args.expire_interval >= 0 and args.outbox_retention >= 0 and args.settle_s >= 0):
        p.error("--expire-interval, --outbox-retention and --settle-s must not be negative")
    report = run(args)
    print_report(report)
    if args.report:
        Path(args.report).write_text(json.dumps(report, indent=2, default=str))
    if not args.keep and not args.warehouse:
        shutil.rmtree(report["root"], ignore_errors=True)
    print(json.dumps({"bench": "soak_held_rate", "value": report["rate_last"], "unit": "rows/s",
                      "anchor": "rows/s of the middle third of the same run", "anchor_value": report["rate_mid"],
                      "ratio": round(report["rate_last"] / max(report["rate_mid"], 1e-9), 3),
                      "target": ">= 0.8"}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
