"""Random writes, deletes and compactions on a deletion-vector table: pyiceberg and DuckDB read what a plain model
holds, whether each commit was published from its delta or many at once."""

from __future__ import annotations

import itertools

import hypothesis.strategies as st
import pyarrow as pa
from hypothesis import HealthCheck, given, settings

from lsmlake.catalog.filesystem import FileSystemCatalog
from lsmlake.iceberg import publish_iceberg_now
from lsmlake.table.compact import compact_table
from tests.support.iceberg_readers import duckdb_read, pyiceberg_read

_n = itertools.count()
row = st.tuples(st.integers(0, 12), st.integers(0, 5), st.sampled_from(["+I", "+U", "-D"]))
steps = st.lists(st.one_of(st.tuples(st.just("write"), st.lists(row, min_size=1, max_size=10)),
                           st.tuples(st.sampled_from(["compact", "full"]), st.none())), min_size=1, max_size=7)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(steps=steps, publish_every_step=st.booleans(), vectors=st.booleans())
def test_pyiceberg_reads_the_model(tmp_path, steps, publish_every_step: bool, vectors: bool) -> None:
    """With deletion vectors every file above level 0 is published; without, only the top level (so the model is
    read back after a full compaction, and each snapshot's read is not lsmlake's merged one)."""
    cat = FileSystemCatalog(str(tmp_path / f"wh{next(_n)}"))
    cat.create_database("db")
    t = cat.create_table("db.t", "k INT NOT NULL, v INT", primary_keys=["k"],
                         options={"bucket": "2", "deletion-vectors.enabled": str(vectors).lower(),
                                  "num-sorted-run.compaction-trigger": "3"})
    model: dict[int, int] = {}
    seen: dict[int, dict[int, int]] = {}  # lsmlake's read of each published snapshot
    for kind, batch in steps:
        if kind == "write":
            t.write_arrow(pa.table({"k": pa.array([r[0] for r in batch], pa.int32()),
                                    "v": pa.array([r[1] for r in batch], pa.int32()),
                                    "_row_kind": [r[2] for r in batch]}))
            for k, v, rk in batch:
                if rk == "-D":
                    model.pop(k, None)
                else:
                    model[k] = v
        else:
            compact_table(t, full=kind == "full")
        if publish_every_step and (step := publish_iceberg_now(t)) is not None and vectors:
            seen[step.snapshot_id] = {r["k"]: r["v"] for r in t.to_arrow().to_pylist()}
    # level-0 rows are invisible to Iceberg (and with vectors to lsmlake's batch read) until compacted; without
    # vectors, until on the top level
    compact_table(t, full=not vectors)
    pub = publish_iceberg_now(t)
    if t.latest_snapshot() is None:
        assert pub is None and not model  # nothing was ever committed: nothing to publish
        return
    assert pub is not None
    got = {r["k"]: r["v"] for r in pyiceberg_read(pub.metadata_location).to_pylist()}
    assert got == model
    assert {r["k"]: r["v"] for r in duckdb_read(pub.metadata_location).to_pylist()} == model
    for sid, expected in seen.items():  # every snapshot published one commit at a time, read by time travel
        assert {r["k"]: r["v"] for r in pyiceberg_read(pub.metadata_location, sid).to_pylist()} == expected
