"""`sort_and_group`'s numpy path (one integer key, files merged oldest first) gives the permutation of the general
Arrow sort, and hands over to it whenever sequence numbers tie or interleave within a key."""

from __future__ import annotations

import sys

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lsmlake.format.numpy_columns import arrow_of, fixed_numpy
from lsmlake.mergetree import dedupe


def _arrow_sort(keys: list[pa.ChunkedArray], seq: pa.ChunkedArray) -> tuple[np.ndarray, np.ndarray]:
    """The general path: the order column as floats is no integer column, so the numpy path declines it."""
    return dedupe.sort_and_group(keys, [(seq.cast(pa.float64()), "ascending")])


def _files(draw_files: list[list[tuple[int, int]]]) -> tuple[pa.ChunkedArray, pa.ChunkedArray]:
    keys = pa.chunked_array([pa.array([k for k, _ in f], pa.int64()) for f in draw_files], pa.int64())
    seqs = pa.chunked_array([pa.array([s for _, s in f], pa.int64()) for f in draw_files], pa.int64())
    return keys, seqs


@st.composite
def runs(draw: st.DrawFn) -> list[list[tuple[int, int]]]:
    """Files of (key, sequence) rows, each sorted by key; sequence ranges of files disjoint or not, tied or not."""
    n_files = draw(st.integers(1, 5))
    disjoint = draw(st.booleans())
    files = []
    for f in range(n_files):
        ks = sorted(draw(st.lists(st.integers(0, 20), max_size=15)))
        if disjoint:
            seqs = draw(st.permutations(range(f * 100, f * 100 + len(ks))))
        else:
            seqs = draw(st.lists(st.integers(0, 10), min_size=len(ks), max_size=len(ks)))
        files.append(list(zip(ks, seqs, strict=True)))
    order = draw(st.permutations(range(n_files)))
    return [files[i] for i in order]


@settings(max_examples=300, deadline=None)
@given(runs())
def test_numpy_path_matches_the_arrow_sort(files: list[list[tuple[int, int]]]) -> None:
    keys, seqs = _files(files)
    if len(keys) == 0:
        return
    idx, starts = dedupe.sort_and_group([keys], [(seqs, "ascending")])
    want_idx, want_starts = _arrow_sort([keys], seqs)
    assert idx.tolist() == want_idx.tolist()
    assert starts.tolist() == want_starts.tolist()


def test_files_out_of_sequence_order_are_merged_oldest_first() -> None:
    keys, seqs = _files([[(1, 20), (2, 21)], [(1, 10), (3, 11)], [(2, 5)]])
    idx, starts = dedupe.sort_and_group([keys], [(seqs, "ascending")])
    assert idx.tolist() == [2, 0, 4, 1, 3]
    assert starts.tolist() == [0, 2, 4]


def test_a_key_column_of_one_value_is_left_out_of_the_sort() -> None:
    keys, seqs = _files([[(1, 3), (2, 4)], [(1, 1), (2, 2)]])
    dt = pa.chunked_array([pa.array(["2026-11-21"] * 2), pa.array(["2026-11-21"] * 2)])
    assert dedupe._varying([keys, dt]) == [keys]
    idx, starts = dedupe.sort_and_group([keys, dt], [(seqs, "ascending")])
    assert (idx.tolist(), starts.tolist()) == ([2, 0, 3, 1], [0, 2])
    other = pa.chunked_array([pa.array(["a", "b"]), pa.array(["a", "a"])])
    assert len(dedupe._varying([keys, other])) == 2


def test_tied_sequence_numbers_go_to_the_arrow_sort() -> None:
    keys, seqs = _files([[(1, 7)], [(1, 7)]])
    assert dedupe._sort_runs_by_key([keys], seqs) is None
    idx, _ = dedupe.sort_and_group([keys], [(seqs, "ascending")])
    assert idx.tolist() == [0, 1]  # the stable order of the general sort


@pytest.mark.parametrize("typ", [pa.date32(), pa.timestamp("us"), pa.int32(), pa.uint64()])
def test_integer_like_keys_take_the_numpy_path(typ: pa.DataType) -> None:
    def arr(values: list[int]) -> pa.Array:
        return pa.array(values, pa.int32() if typ.bit_width == 32 else pa.int64()).view(typ)

    keys = pa.chunked_array([arr([1, 5]), arr([2, 5])])
    seqs = pa.chunked_array([pa.array([1, 2], pa.int64()), pa.array([3, 4], pa.int64())])
    got = dedupe._sort_runs_by_key([keys], seqs)
    assert got is not None
    assert got[0].tolist() == [0, 2, 1, 3]
    assert got[0].tolist() == pc.sort_indices(pa.table({"k": keys, "s": seqs}),
                                              sort_keys=[("k", "ascending"), ("s", "ascending")]).to_pylist()


def test_numpy_columns_do_not_import_pandas() -> None:
    had = "pandas" in sys.modules
    values = fixed_numpy(pa.chunked_array([pa.array([1, 2, 3], pa.int64()).slice(1)]))
    assert values.tolist() == [2, 3]
    assert fixed_numpy(pa.array([0.5], pa.float32())).tolist() == [0.5]
    assert arrow_of(np.arange(6, dtype=np.int64)[::2]).to_pylist() == [0, 2, 4]
    assert arrow_of(np.array([1, 3], np.int8)).type == pa.int8()
    if not had:
        assert "pandas" not in sys.modules
    with pytest.raises(TypeError):
        fixed_numpy(pa.array([1, None]))
    with pytest.raises(TypeError):
        arrow_of(np.array([1], np.int32), pa.int64())


def test_take_rows_matches_arrow_take_over_chunks() -> None:
    n = dedupe.PARALLEL_TAKE_ROWS + 10
    rows = pa.concat_tables([pa.table({"k": pa.array(np.arange(lo, lo + n), pa.int64()),
                                       "s": pa.array([f"v{i}" for i in range(lo, lo + n)])}) for lo in (0, n)])
    idx = np.random.default_rng(5).permutation(2 * n)[:n]
    got = dedupe.take_rows(rows, idx)
    assert got.schema == rows.schema
    assert got.equals(rows.take(pa.array(idx)))


def test_a_float_key_with_nan_is_never_taken_for_one_value() -> None:
    keys = pa.chunked_array([pa.array([1, 1, 2], pa.int64())])
    f = pa.chunked_array([pa.array([float("nan"), 1.0, 1.0])])
    assert len(dedupe._varying([keys, f])) == 2
    idx, starts = dedupe.sort_and_group([keys, f], [(pa.array([1, 2, 3], pa.int64()), "ascending")])
    assert starts.tolist() == [0, 1, 2]
