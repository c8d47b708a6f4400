"""Changelog producers: replaying the changelog from snapshot 1 rebuilds the table; -U precedes its +U."""

from __future__ import annotations

import itertools

import hypothesis.strategies as st
import pyarrow as pa
from hypothesis import HealthCheck, given, settings

from lsmlake.catalog.filesystem import FileSystemCatalog
from lsmlake.table.changelog import read_changelog
from lsmlake.table.compact import compact_table

_n = itertools.count()
row = st.tuples(st.integers(0, 8), st.integers(0, 3), st.sampled_from(["+I", "+U", "-D"]))
steps = st.lists(st.one_of(st.tuples(st.just("write"), st.lists(row, min_size=1, max_size=10)),
                           st.tuples(st.sampled_from(["compact", "full"]), st.none())), min_size=1, max_size=8)


def _table(tmp_path, producer: str, **extra):
    cat = FileSystemCatalog(str(tmp_path / f"wh{next(_n)}"))
    cat.create_database("db")
    options = {"bucket": "2", "changelog-producer": producer, "num-sorted-run.compaction-trigger": "3"}
    options.update(extra)
    return cat.create_table("db.t", "k INT NOT NULL, v INT", primary_keys=["k"], options=options)


def _write(t, batch) -> None:
    t.write_arrow(pa.table({"k": pa.array([r[0] for r in batch], pa.int32()),
                            "v": pa.array([r[1] for r in batch], pa.int32()), "_row_kind": [r[2] for r in batch]}))


def _replay(t) -> dict:
    state: dict = {}
    rows = read_changelog(t).to_pylist()
    for r in rows:
        if r["row_kind"] in ("+I", "+U"):
            state[r["k"]] = r["v"]
        else:
            state.pop(r["k"], None)
    return state


def _pairs_ok(t) -> bool:
    """Every +U directly follows a -U of the same key, inside one snapshot's changelog."""
    rows = read_changelog(t).to_pylist()
    for i, r in enumerate(rows):
        if r["row_kind"] == "+U":
            prev = rows[i - 1] if i else None
            if not (prev and prev["row_kind"] == "-U" and prev["k"] == r["k"]
                    and prev["snapshot_id"] == r["snapshot_id"]):
                return False
    return True


def _table_rows(t) -> dict:
    return {r["k"]: r["v"] for r in t.to_arrow().to_pylist()}


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(steps=steps)
def test_input_changelog_replays_to_the_table(tmp_path, steps) -> None:
    t = _table(tmp_path, "input")
    for kind, batch in steps:
        if kind == "write":
            _write(t, batch)
        else:
            compact_table(t, full=kind == "full")
    assert _replay(t) == _table_rows(t)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(steps=steps)
def test_full_compaction_changelog(tmp_path, steps) -> None:
    t = _table(tmp_path, "full-compaction")
    for kind, batch in steps:
        if kind == "write":
            _write(t, batch)
        else:
            compact_table(t, full=kind == "full")
    compact_table(t, full=True)  # the changelog is complete up to the last full compaction
    assert _replay(t) == _table_rows(t)
    assert _pairs_ok(t)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(steps=steps)
def test_lookup_changelog(tmp_path, steps) -> None:
    t = _table(tmp_path, "lookup")
    for kind, batch in steps:
        if kind == "write":
            _write(t, batch)
        else:
            compact_table(t, full=kind == "full")
    compact_table(t)  # force-up-level-0: every level-0 file moves up and is changelogged
    assert all(f.level > 0 for s in t.plan() for f in s.files)
    assert _replay(t) == _table_rows(t)
    assert _pairs_ok(t)


def test_pypaimon_sees_the_changelog_manifest(tmp_path) -> None:
    t = _table(tmp_path, "input")
    _write(t, [(1, 1, "+I"), (2, 2, "+I")])
    snap = t.latest_snapshot()
    assert snap is not None and snap.changelog_manifest_list and snap.changelog_record_count == 2
    from pypaimon import CatalogFactory

    pt = CatalogFactory.create({"warehouse": t.path.rsplit("/db.db", 1)[0]}).get_table("db.t")
    rb = pt.new_read_builder()
    assert rb.new_read().to_arrow(rb.new_scan().plan().splits()).num_rows == 2


def test_overwrite_keeps_the_input_changelog(tmp_path) -> None:
    t = _table(tmp_path, "input")
    _write(t, [(1, 1, "+I")])
    res = t.overwrite_arrow(pa.table({"k": pa.array([2], pa.int32()), "v": pa.array([2], pa.int32())}))
    snap = t.snapshots.snapshot(res.snapshot_id)
    assert snap.commit_kind == "OVERWRITE" and snap.changelog_record_count == 1
    assert [(r["k"], r["row_kind"]) for r in read_changelog(t, res.snapshot_id).to_pylist()] == [(2, "+I")]
