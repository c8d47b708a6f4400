"""The write buffer of the long-running writer against a plain-Python model and against a direct write.

Many small writes go through `BufferedTableWrite` with a tiny `write-buffer-size`, so that the
buffers spill (and merge their runs) several times between commits. After every commit the table
must read like the model of the engine, and at the end like the same rows written in one go by
`TableWrite`, with the same sequence numbers.
"""

from __future__ import annotations

import itertools
import os

import hypothesis.strategies as st
import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings

from lsmlake.catalog.filesystem import FileSystemCatalog
from lsmlake.errors import InvalidInputError
from lsmlake.format import options as opts
from lsmlake.table.bucket_buffer import WriteBuffer, WriteBufferOptions
from lsmlake.table.compact import compact_table
from lsmlake.table.write import TableWrite
from lsmlake.table.write_buffer import BufferedTableWrite
from tests.lsmlake.mergetree.merge.test_engines import (
    model_aggregation,
    model_dedupe,
    model_first_row,
    model_partial_update,
)

_n = itertools.count()

# rows: (key, a, b, s, kind), as in tests/lsmlake/mergetree/merge/test_engines.py
row = st.tuples(st.integers(0, 6), st.integers(-5, 5) | st.none(), st.sampled_from(["x", "y", "z"]) | st.none(),
                st.integers(0, 4) | st.none(), st.sampled_from(["+I", "+I", "+U", "-U", "-D"]))
# steps: small writes, and commits (the last step always commits)
steps = st.lists(st.one_of(st.tuples(st.just("write"), st.lists(row, min_size=1, max_size=6)),
                           st.tuples(st.just("commit"), st.none())), min_size=1, max_size=14)

ENGINES = {
    "deduplicate": ({}, model_dedupe),
    "deduplicate-ignore-delete": ({"ignore-delete": "true"}, lambda h: model_dedupe(h, ignore_delete=True)),
    "first-row": ({"merge-engine": "first-row", "ignore-delete": "true"}, model_first_row),
    "partial-update-ignore-delete": ({"merge-engine": "partial-update", "ignore-delete": "true"},
                                     lambda h: model_partial_update(h, ignore_delete=True)),
    "partial-update-remove-on-delete": ({"merge-engine": "partial-update",
                                         "partial-update.remove-record-on-delete": "true"},
                                        lambda h: model_partial_update(h, remove_on_delete=True)),
    "aggregation": ({"merge-engine": "aggregation", "fields.a.aggregate-function": "sum",
                     "fields.b.ignore-retract": "true", "fields.s.aggregate-function": "max",
                     "fields.s.ignore-retract": "true"}, model_aggregation),
    "aggregation-remove-on-delete": ({"merge-engine": "aggregation", "fields.a.aggregate-function": "sum",
                                      "fields.b.ignore-retract": "true", "fields.s.aggregate-function": "max",
                                      "fields.s.ignore-retract": "true", "aggregation.remove-record-on-delete": "true"},
                                     lambda h: model_aggregation(h, remove_on_delete=True)),
}

# engines whose folded rows carry the highest sequence number of their key (first-row keeps the
# oldest row, and dropped deletes take theirs away, so there it depends on where commits fall)
EXACT_MAX_SEQUENCE = {"deduplicate", "partial-update-ignore-delete", "partial-update-remove-on-delete", "aggregation",
                      "aggregation-remove-on-delete"}


def _catalog(tmp_path) -> FileSystemCatalog:
    cat = FileSystemCatalog(str(tmp_path / f"wh{next(_n)}"))
    cat.create_database("db")
    return cat


def _table(cat, name: str, options: dict[str, str]):
    o = {"bucket": "2", "write-buffer-size": "600 b", "write-buffer-spillable": "true"}
    o.update(options)
    return cat.create_table(f"db.{name}", "k INT NOT NULL, a BIGINT, b STRING, s INT", primary_keys=["k"], options=o)


def _batch(rows) -> pa.Table:
    return pa.table({"k": pa.array([r[0] for r in rows], pa.int32()), "a": pa.array([r[1] for r in rows], pa.int64()),
                     "b": pa.array([r[2] for r in rows], pa.string()), "s": pa.array([r[3] for r in rows], pa.int32()),
                     "_row_kind": [r[4] for r in rows]})


def _read(t, first_row: bool = False) -> dict:
    if first_row:
        compact_table(t)  # first-row batch reads skip level 0, as in Paimon
    return {r["k"]: (r["a"], r["b"], r["s"]) for r in t.to_arrow().to_pylist()}


def _max_seq(t) -> dict[tuple[bytes, int], int]:
    snap = t.latest_snapshot()
    out: dict[tuple[bytes, int], int] = {}
    if snap is None:
        return out
    for e in t.manifests.live(snap.base_manifest_list, snap.delta_manifest_list).values():
        k = (e.partition, e.bucket)
        out[k] = max(out.get(k, -1), e.file.max_sequence_number)
    return out


def _spill_files(bw: BufferedTableWrite) -> list[str]:
    return os.listdir(bw.spill_dir) if os.path.isdir(bw.spill_dir) else []


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(steps=steps, handles=st.sampled_from(["2", "3", "128"]))
@pytest.mark.parametrize("engine", sorted(ENGINES))
def test_buffered_writes_match_the_model_and_a_direct_write(tmp_path, engine, steps, handles) -> None:
    options, model = ENGINES[engine]
    options = dict(options, **{"local-sort.max-num-file-handles": handles})
    first_row = engine == "first-row"
    cat = _catalog(tmp_path)
    t = _table(cat, "buffered", options)
    history: list[tuple] = []
    spills = 0
    with BufferedTableWrite(t, spill_root=str(tmp_path)) as bw:
        for kind, rows in steps + [("commit", None)]:
            if kind == "write":
                bw.write(_batch(rows))
                history.extend(rows)
                assert not bw.must_flush  # spillable: the buffers spill instead
                continue
            spills = max(spills, bw.stats().spill_count)
            messages = bw.prepare_commit()
            assert _spill_files(bw) == []
            if messages:
                t.commit_messages(messages)
            assert _read(t, first_row) == model(history)
    if not history:
        return
    direct = _table(cat, "direct", options)
    direct.write_arrow(_batch(history))
    assert _read(t, first_row) == _read(direct, first_row) == model(history)
    if engine in EXACT_MAX_SEQUENCE:
        assert _max_seq(t) == _max_seq(direct)  # the same sequence numbers, whatever the commits
    # whether these rows spilled depends on their size; test_spills_happen_and_runs_are_merged_at_the_fan_in
    # proves spilling deterministically
    _ = spills


def test_spills_happen_and_runs_are_merged_at_the_fan_in(tmp_path) -> None:
    t = _table(_catalog(tmp_path), "t", {"bucket": "1", "local-sort.max-num-file-handles": "3"})
    rng = np.random.default_rng(3)
    model: set[int] = set()
    with BufferedTableWrite(t, spill_root=str(tmp_path)) as bw:
        for _ in range(60):
            keys = rng.integers(0, 200, 10)
            bw.write(pa.table({"k": pa.array(keys, pa.int32()), "a": rng.integers(0, 9, 10)}))
            model.update(keys.tolist())
            assert len(_spill_files(bw)) < 3
        stats = bw.stats()
        assert stats.spill_count >= 5 and stats.spilled_bytes > 0 and stats.disk_bytes > 0
        assert stats.buffered_rows == 600
        t.commit_messages(bw.prepare_commit())
        assert _spill_files(bw) == []
        assert bw.stats().memory_bytes == bw.stats().disk_bytes == bw.stats().buffered_rows == 0
    assert sorted(r["k"] for r in t.to_arrow().to_pylist()) == sorted(model)


def test_sequence_numbers_continue_across_commits_and_after_reopening(tmp_path) -> None:
    cat = _catalog(tmp_path)
    t = _table(cat, "t", {"bucket": "1"})
    t.write_arrow(_batch([(1, 1, "x", None, "+I"), (2, 2, "y", None, "+I")]))  # a direct write: seq 0, 1
    seen = []
    with BufferedTableWrite(t, spill_root=str(tmp_path)) as bw:
        for i in range(3):
            bw.write(_batch([(k, i, None, None, "+I") for k in range(10)]))
            bw.write(_batch([(k, i, None, None, "+U") for k in range(5)]))
            messages = bw.prepare_commit()
            t.commit_messages(messages)
            files = [f for m in messages for f in m.new_files]
            seen.append((min(f.min_sequence_number for f in files), max(f.max_sequence_number for f in files)))
    assert seen == [(7, 16), (22, 31), (37, 46)]  # the newest row of each key is kept: keys 5..9 at 7..11
    reopened = cat.get_table("db.t")
    with BufferedTableWrite(reopened, spill_root=str(tmp_path)) as bw:
        bw.write(_batch([(1, 9, None, None, "+U")]))
        messages = bw.prepare_commit()
        assert [f.min_sequence_number for m in messages for f in m.new_files] == [47]
        reopened.commit_messages(messages)
    assert _read(reopened)[1] == (9, None, None)
    reopened.write_arrow(_batch([(2, 7, None, None, "+U")]))  # a direct write after the buffered one
    assert max(_max_seq(reopened).values()) == 48


def test_a_failed_flush_keeps_the_rows_deletes_its_files_and_can_be_retried(tmp_path, monkeypatch) -> None:
    t = _table(_catalog(tmp_path), "t", {})
    bw = BufferedTableWrite(t, spill_root=str(tmp_path))
    model: dict = {}
    for i in range(20):
        bw.write(_batch([(k, i, None, None, "+I") for k in range(7)]))
        model.update({k: (i, None, None) for k in range(7)})
    assert bw.stats().spill_count > 0 and _spill_files(bw)
    buffered = bw.stats().buffered_rows
    calls = itertools.count()
    real = TableWrite.write_files

    def failing(self, *args, **kwargs):
        if next(calls) == 1:  # the first file is written, the second write fails
            raise OSError("disk full")
        return real(self, *args, **kwargs)

    monkeypatch.setattr(TableWrite, "write_files", failing)
    with pytest.raises(OSError, match="disk full"):
        bw.prepare_commit()
    handed = {f.file_name for m in bw._pending.values() for f in m.new_files}
    data_files = {f for _, _, fs in os.walk(t.path) for f in fs if f.startswith("data-")}
    assert data_files == handed, "the failed bucket's files must be gone, the flushed bucket's kept"
    assert bw.stats().buffered_rows + sum(f.row_count for m in bw._pending.values() for f in m.new_files) >= 7
    assert bw.stats().buffered_rows <= buffered
    monkeypatch.setattr(TableWrite, "write_files", real)
    t.commit_messages(bw.prepare_commit())  # the retry writes what was left, once
    assert _read(t) == model
    bw.write(_batch([(1, 5, None, None, "+I")]))  # the writer is usable again
    t.commit_messages(bw.prepare_commit())
    assert _read(t)[1] == (5, None, None)
    bw.close()
    assert not os.path.exists(bw.spill_dir)


def test_abort_after_a_failed_flush_leaves_no_spill_files_and_no_data_files(tmp_path, monkeypatch) -> None:
    t = _table(_catalog(tmp_path), "t", {})
    bw = BufferedTableWrite(t, spill_root=str(tmp_path))
    for i in range(20):
        bw.write(_batch([(k, i, None, None, "+I") for k in range(7)]))
    calls = itertools.count()
    real = TableWrite.write_files

    def failing(self, *args, **kwargs):
        if next(calls) == 1:
            raise OSError("disk full")
        return real(self, *args, **kwargs)

    monkeypatch.setattr(TableWrite, "write_files", failing)
    with pytest.raises(OSError, match="disk full"):
        bw.prepare_commit()
    bw.abort()
    assert _spill_files(bw) == []
    assert bw.stats().buffered_rows == 0
    assert [f for _, _, fs in os.walk(t.path) for f in fs if f.startswith("data-")] == []
    monkeypatch.setattr(TableWrite, "write_files", real)
    bw.write(_batch([(1, 5, None, None, "+I")]))
    t.commit_messages(bw.prepare_commit())
    assert _read(t) == {1: (5, None, None)}
    bw.close()


def test_a_failed_spill_keeps_the_rows_and_asks_for_a_flush(tmp_path, monkeypatch) -> None:
    t = _table(_catalog(tmp_path), "t", {"bucket": "1"})
    with BufferedTableWrite(t, spill_root=str(tmp_path)) as bw:
        def broken(*args, **kwargs):
            raise OSError("no space left")

        monkeypatch.setattr(pa.ipc, "new_file", broken)
        for i in range(10):
            bw.write(_batch([(k, i, None, None, "+I") for k in range(8)]))
        assert bw.must_flush
        assert _spill_files(bw) == []  # the partial run file was removed
        monkeypatch.undo()
        t.commit_messages(bw.prepare_commit())
        assert not bw.must_flush
    assert _read(t) == {k: (9, None, None) for k in range(8)}


def test_a_full_buffer_that_may_not_spill_signals_a_flush(tmp_path) -> None:
    t = _table(_catalog(tmp_path), "t", {"write-buffer-spillable": "false"})
    model = {}
    with BufferedTableWrite(t, spill_root=str(tmp_path)) as bw:
        flushes = 0
        for i in range(30):
            rows = [((i * 3 + j) % 11, i, None, None, "+I") for j in range(4)]
            bw.write(_batch(rows))
            model.update({r[0]: (i, None, None) for r in rows})
            assert bw.stats().spill_count == 0 and _spill_files(bw) == []
            if bw.must_flush:
                flushes += 1
                bw.flush()  # level-0 files, committed with the next prepare_commit
                assert not bw.must_flush and bw.stats().memory_bytes == 0
        assert flushes > 1
        messages = bw.prepare_commit()
        assert sum(len(m.new_files) for m in messages) > 2
        t.commit_messages(messages)
    assert _read(t) == model


def test_spillable_defaults_follow_paimon() -> None:
    local = WriteBufferOptions.from_table(opts.TableOptions({}), object_store=False, streaming=True)
    assert not local.spillable and local.buffer_size == 256 << 20 and local.max_disk_size is None
    assert local.max_num_file_handles == 128 and local.compression == "zstd"
    assert WriteBufferOptions.from_table(opts.TableOptions({}), object_store=True).spillable
    assert WriteBufferOptions.from_table(opts.TableOptions({}), object_store=False, streaming=False).spillable
    lz4 = WriteBufferOptions.from_table(opts.TableOptions({"spill-compression": "lzo"}), object_store=False)
    assert lz4.compression == "lz4"


def test_the_disk_limit_turns_spills_into_flushes(tmp_path) -> None:
    t = _table(_catalog(tmp_path), "t", {"bucket": "1", "write-buffer-spill.max-disk-size": "1 b"})
    with BufferedTableWrite(t, spill_root=str(tmp_path)) as bw:
        for i in range(10):
            bw.write(_batch([(k, i, None, None, "+I") for k in range(8)]))
        assert bw.stats().spill_count == 1 and bw.must_flush
        t.commit_messages(bw.prepare_commit())
    assert _read(t) == {k: (9, None, None) for k in range(8)}


def test_invalid_rows_leave_the_buffers_untouched(tmp_path) -> None:
    t = _table(_catalog(tmp_path), "t", {"merge-engine": "first-row"})
    with BufferedTableWrite(t, spill_root=str(tmp_path)) as bw:
        bw.write(_batch([(1, 1, "x", None, "+I")]))
        before = bw.stats()
        with pytest.raises(InvalidInputError, match="ignore-delete"):
            bw.write(_batch([(2, 1, "x", None, "+I"), (1, None, None, None, "-D")]))
        assert bw.stats() == before


def test_input_changelog_keeps_every_written_row(tmp_path) -> None:
    cat = _catalog(tmp_path)
    rows = [(k % 5, k, None, None, "+I" if k % 3 else "+U") for k in range(40)]
    buffered = _table(cat, "b", {"changelog-producer": "input", "bucket": "1"})
    with BufferedTableWrite(buffered, spill_root=str(tmp_path)) as bw:
        for i in range(0, 40, 4):
            bw.write(_batch(rows[i:i + 4]))
        assert bw.stats().spill_count > 0
        messages = bw.prepare_commit()
        buffered.commit_messages(messages)
    direct = _table(cat, "d", {"changelog-producer": "input", "bucket": "1"})
    direct.write_arrow(_batch(rows))
    assert sum(f.row_count for m in messages for f in m.changelog_files) == 40
    assert _read(buffered) == _read(direct)


def test_append_tables_buffer_in_arrival_order(tmp_path) -> None:
    cat = _catalog(tmp_path)
    t = cat.create_table("db.a", "k INT, v STRING", options={"write-buffer-size": "300 b",
                                                              "write-buffer-spillable": "true"})
    expected = []
    with BufferedTableWrite(t, spill_root=str(tmp_path)) as bw:
        for i in range(12):
            batch = pa.table({"k": pa.array(range(i * 5, i * 5 + 5), pa.int32()), "v": [f"v{i}"] * 5})
            bw.write(batch)
            expected.extend(batch.to_pylist())
        assert bw.stats().spill_count > 0
        t.commit_messages(bw.prepare_commit())
    assert sorted(t.to_arrow().to_pylist(), key=lambda r: r["k"]) == expected


def test_a_standalone_buffer_shifts_its_local_numbers_into_the_range_given_at_the_flush(tmp_path) -> None:
    t = _table(_catalog(tmp_path), "t", {"bucket": "1"})
    w = t.new_write()
    target = w.route(pa.table({"k": pa.array([1], pa.int32()), "a": [1], "b": ["x"], "s": pa.array([1], pa.int32())},
                              schema=t.schema.arrow_schema)).targets[0]
    options = WriteBufferOptions.from_table(t.options, object_store=False, streaming=False)
    buffer = WriteBuffer(t.schema, target, options, str(tmp_path / "spill"), w.merge_function)
    for i in range(40):
        buffer.add(pa.table({"k": pa.array([i % 3], pa.int32()), "a": pa.array([i], pa.int64()),
                             "b": pa.array([None], pa.string()), "s": pa.array([None], pa.int32())}))
    assert buffer.stats().spill_count > 0
    assert buffer.numbers_needed == 40
    message = buffer.flush(w, 100)
    assert os.listdir(tmp_path / "spill") == []
    assert [(f.min_sequence_number, f.max_sequence_number, f.row_count) for f in message.new_files] == [(137, 139, 3)]
    t.commit_messages([message])
    assert _read(t) == {0: (39, None, None), 1: (37, None, None), 2: (38, None, None)}
    assert buffer.numbers_needed == 0  # the next rows are numbered from 0 again, shifted by their own range
