"""Committers that race on one table, and the plain-Python model their acknowledged operations must equal.

A committer runs a seeded list of operations (in a thread, or in a worker process: everything here is picklable
and importable) and reports each one as acknowledged, with the snapshot it made, or refused, with the error.
The model replays the acknowledged ones in snapshot order; compactions change nothing in it.

Three table kinds, each with the operations that apply to it:
- `append`: a partitioned append table with deletion vectors (bucket -1): appends, `delete_where`, OVERWRITE of a
  partition, full and small-file compactions;
- `pk`: a partitioned primary-key table with deletion vectors (2 buckets): upserts, deletes, OVERWRITE of a
  partition, universal and full (lookup) compactions that write vectors;
- `dynamic`: a dynamic-bucket primary-key table: upserts and deletes that assign buckets, compactions.
Primary keys are owned by one committer each: a bucket's sequence numbers order one writer's changes (as Paimon
requires a single writer per bucket; the services number rows through the catalog), so two library writers of
one key would be ordered by their sequence numbers, not by their snapshots, and no model could say which wins.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

KINDS = ("append", "pk", "dynamic")
PARTITIONS = (0, 1)
GROUPS = 4
KEYS_PER_COMMITTER = 6

Op = dict[str, Any]


@dataclass
class Outcome:
    """One operation and what became of it: the snapshot it made (acknowledged) or the error that refused it."""

    committer: int
    op: Op
    snapshot_id: int | None = None
    error: str | None = None
    kind: str | None = None  # the commit kind of its snapshot, as the committer saw it


def create_table(catalog: Any, kind: str) -> Any:
    catalog.create_database("db", ignore_if_exists=True)
    if kind == "append":
        return catalog.create_table("db.t", "id BIGINT NOT NULL, p INT NOT NULL, g INT NOT NULL", partition_keys=["p"],
                                    options={"bucket": "-1", "deletion-vectors.enabled": "true",
                                             "compaction.min.file-num": "2"})
    if kind == "pk":
        return catalog.create_table("db.t", "k INT NOT NULL, p INT NOT NULL, v BIGINT", partition_keys=["p"],
                                    primary_keys=["k", "p"],
                                    options={"bucket": "2", "deletion-vectors.enabled": "true",
                                             "num-sorted-run.compaction-trigger": "3", "write-only": "true"})
    return catalog.create_table("db.t", "k INT NOT NULL, v BIGINT", primary_keys=["k"],
                                options={"bucket": "-1", "dynamic-bucket.target-row-num": "4"})


def operations(kind: str, committer: int, seed: int, count: int) -> list[Op]:
    """A committer's seeded operations; the rows it writes are its own (unique ids, owned keys)."""
    rnd = random.Random(seed * 1000 + committer)
    ops: list[Op] = []
    for i in range(count):
        roll = rnd.random()
        if roll < 0.2:
            ops.append({"op": "compact", "full": rnd.random() < 0.5})
        elif kind == "append" and roll < 0.55:
            base = (committer * 1000 + i) * 100
            ops.append({"op": "append", "rows": [(base + j, rnd.choice(PARTITIONS), rnd.randrange(GROUPS))
                                                 for j in range(rnd.randint(1, 12))]})
        elif kind == "append" and roll < 0.85:
            ops.append({"op": "delete", "g": rnd.randrange(GROUPS)})
        elif kind == "append":
            base = (committer * 1000 + i) * 100
            p = rnd.choice(PARTITIONS)
            ops.append({"op": "overwrite", "p": p,
                        "rows": [(base + j, p, rnd.randrange(GROUPS)) for j in range(rnd.randint(1, 6))]})
        else:
            keys = [committer * 100 + rnd.randrange(KEYS_PER_COMMITTER) for _ in range(rnd.randint(1, 5))]
            p = rnd.choice(PARTITIONS) if kind == "pk" else 0
            if roll < 0.6:
                ops.append({"op": "upsert", "rows": [(k, p, rnd.randrange(1_000_000)) for k in keys]})
            elif roll < 0.85 or kind == "dynamic":
                ops.append({"op": "delete_keys", "rows": [(k, p) for k in keys]})
            else:
                ops.append({"op": "overwrite", "p": p, "rows": [(k, p, rnd.randrange(1_000_000)) for k in keys]})
    return ops


def _batch(kind: str, rows: list[tuple[Any, ...]], row_kind: str | None = None) -> pa.Table:
    if kind == "append":
        cols: dict[str, Any] = {"id": pa.array([r[0] for r in rows], pa.int64()),
                                "p": pa.array([r[1] for r in rows], pa.int32()),
                                "g": pa.array([r[2] for r in rows], pa.int32())}
    else:
        cols = {"k": pa.array([r[0] for r in rows], pa.int32())}
        if kind == "pk":
            cols["p"] = pa.array([r[1] for r in rows], pa.int32())
        cols["v"] = pa.array([r[2] if len(r) > 2 else None for r in rows], pa.int64())
    if row_kind is not None:
        cols["_row_kind"] = [row_kind] * len(rows)
    return pa.table(cols)


def run_op(table: Any, kind: str, op: Op) -> tuple[int | None, str | None]:
    """Run one operation; (snapshot id, commit kind) when it made a snapshot."""
    from lsmlake.table.compact import compact_table

    name = op["op"]
    if name == "compact":
        r = compact_table(table, full=op["full"])
        return r.snapshot_id, "COMPACT" if r.snapshot_id is not None else None
    if name in ("append", "upsert"):
        res = table.write_arrow(_batch(kind, op["rows"]))
        return res.snapshot_id, "APPEND"
    if name == "delete":
        res = table.delete_where({"g": op["g"]})
        return (None, None) if res is None else (res.snapshot_id, "OVERWRITE")
    if name == "delete_keys":
        res = table.write_arrow(_batch(kind, op["rows"], "-D"))
        return res.snapshot_id, "APPEND"
    if name == "overwrite":
        res = table.overwrite_arrow(_batch(kind, op["rows"]), partition={"p": op["p"]} if kind != "dynamic" else None)
        return res.snapshot_id, "OVERWRITE"
    raise ValueError(f"unknown operation {name}")


def run_committer(warehouse: str, kind: str, committer: int, seed: int, count: int) -> list[Outcome]:
    """Run a committer's operations on db.t of `warehouse`; every one acknowledged or refused with its error."""
    from lsmlake.catalog.filesystem import FileSystemCatalog
    from lsmlake.errors import CommitConflictError

    catalog = FileSystemCatalog(warehouse)
    out = []
    for op in operations(kind, committer, seed, count):
        o = Outcome(committer, op)
        try:
            o.snapshot_id, o.kind = run_op(catalog.get_table("db.t"), kind, op)
        except CommitConflictError as e:  # refused: nothing applied
            o.error = f"{type(e).__name__}: {e}"
        out.append(o)
    return out


@dataclass
class Model:
    """The table as the acknowledged operations, replayed in snapshot order, leave it."""

    kind: str
    rows: dict[Any, Any] = field(default_factory=dict)

    def apply(self, op: Op) -> None:
        name = op["op"]
        if self.kind == "append":
            if name == "append":
                self.rows.update({r[0]: (r[1], r[2]) for r in op["rows"]})
            elif name == "delete":
                self.rows = {i: pg for i, pg in self.rows.items() if pg[1] != op["g"]}
            elif name == "overwrite":
                self.rows = {i: pg for i, pg in self.rows.items() if pg[0] != op["p"]}
                self.rows.update({r[0]: (r[1], r[2]) for r in op["rows"]})
            return
        if name == "upsert":
            self.rows.update({(r[0], r[1]): r[2] for r in op["rows"]})
        elif name == "delete_keys":
            for r in op["rows"]:
                self.rows.pop((r[0], r[1]), None)
        elif name == "overwrite":
            self.rows = {kp: v for kp, v in self.rows.items() if kp[1] != op["p"]} if self.kind == "pk" else {}
            self.rows.update({(r[0], r[1]): r[2] for r in op["rows"]})

    def table_rows(self, table: pa.Table) -> dict[Any, Any]:
        """A read of the table in the model's shape; AssertionError when a row is there twice."""
        d = table.to_pydict()
        if self.kind == "append":
            got = {i: (p, g) for i, p, g in zip(d["id"], d["p"], d["g"], strict=True)}
            keys = d["id"]
        else:
            ps = d["p"] if self.kind == "pk" else [0] * len(d["k"])
            got = {(k, p): v for k, p, v in zip(d["k"], ps, d["v"], strict=True)}
            keys = list(zip(d["k"], ps, strict=True))
        assert len(got) == len(keys), f"a row is read twice: {len(keys)} rows, {len(got)} distinct"
        return got


def replay(kind: str, outcomes: list[Outcome]) -> Model:
    """The model of the acknowledged operations in snapshot order; AssertionError when two share a snapshot."""
    acked = [o for o in outcomes if o.snapshot_id is not None]
    ids = [o.snapshot_id for o in acked]
    assert len(ids) == len(set(ids)), f"a snapshot id was acknowledged twice: {sorted(ids)}"
    model = Model(kind)
    for o in sorted(acked, key=lambda o: o.snapshot_id or 0):
        model.apply(o.op)
    return model
