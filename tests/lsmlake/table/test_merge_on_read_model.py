"""Merge-on-read against a plain-Python model: a dict keyed by primary key, applied in commit order."""

from __future__ import annotations

import itertools

import hypothesis.strategies as st
import pyarrow as pa
from hypothesis import HealthCheck, given, settings

from lsmlake.catalog.filesystem import FileSystemCatalog

_counter = itertools.count()

# One operation: (key, partition, value, kind). Few keys, so updates and deletes hit existing rows.
op = st.tuples(st.integers(0, 12), st.sampled_from(["a", "b", None]), st.integers(-5, 5) | st.none(),
               st.sampled_from(["+I", "+U", "-U", "-D"]))
batches = st.lists(st.lists(op, min_size=1, max_size=25), min_size=1, max_size=5)


def _apply(model: dict, batch: list) -> None:
    for key, part, value, kind in batch:
        k = (key, part or "")
        if kind in ("+I", "+U"):
            model[k] = value
        else:
            model.pop(k, None)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(batches=batches, buckets=st.sampled_from([1, 3]), partitioned=st.booleans())
def test_merge_on_read_matches_model(tmp_path, batches, buckets, partitioned) -> None:
    cat = FileSystemCatalog(str(tmp_path / f"wh{next(_counter)}"))
    cat.create_database("db")
    t = cat.create_table("db.t", "k INT NOT NULL, p STRING NOT NULL, v BIGINT",
                         partition_keys=["p"] if partitioned else [], primary_keys=["k", "p"],
                         options={"bucket": str(buckets)})
    model: dict = {}
    snapshots_model = []
    for batch in batches:
        rows = pa.table({"k": pa.array([b[0] for b in batch], pa.int32()),
                         "p": [b[1] or "" for b in batch],
                         "v": pa.array([b[2] for b in batch], pa.int64()),
                         "_row_kind": [b[3] for b in batch]})
        t.write_arrow(rows)
        _apply(model, batch)
        snapshots_model.append(dict(model))
    got = {(r["k"], r["p"]): r["v"] for r in t.to_arrow().to_pylist()}
    assert got == model
    assert len(t.to_arrow()) == len(model)  # one row per key
    # Time travel: every snapshot equals the model after that many batches.
    for sid, expected in enumerate(snapshots_model, start=1):
        got = {(r["k"], r["p"]): r["v"] for r in t.to_arrow(sid).to_pylist()}
        assert got == expected, f"snapshot {sid}"


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(batches=batches, key=st.integers(0, 12))
def test_key_filter_is_exact(tmp_path, batches, key) -> None:
    cat = FileSystemCatalog(str(tmp_path / f"wh{next(_counter)}"))
    cat.create_database("db")
    t = cat.create_table("db.t", "k INT NOT NULL, v BIGINT", primary_keys=["k"], options={"bucket": "2"})
    model: dict = {}
    for batch in batches:
        t.write_arrow(pa.table({"k": pa.array([b[0] for b in batch], pa.int32()),
                                "v": pa.array([b[2] for b in batch], pa.int64()),
                                "_row_kind": [b[3] for b in batch]}))
        _apply(model, [(b[0], None, b[2], b[3]) for b in batch])
    for op_, expect in (("=", {k: v for k, v in model.items() if k[0] == key}),
                        ("<", {k: v for k, v in model.items() if k[0] < key}),
                        (">=", {k: v for k, v in model.items() if k[0] >= key})):
        got = {(r["k"], ""): r["v"] for r in t.to_arrow(predicate=[("k", op_, key)]).to_pylist()}
        assert got == expect, op_
