"""The lookup cache stays within its memory bound, spills to disk and reads spilled entries back."""

from __future__ import annotations

import os

import pyarrow as pa

from lsmlake.mergetree.lookup_cache import LookupCache


def test_bounded_memory_with_spill(tmp_path) -> None:
    cache = LookupCache(max_memory_bytes=3000, spill_dir=str(tmp_path / "spill"))
    tables = {f"f{i}": pa.table({"k": pa.array(range(i * 100, i * 100 + 100), pa.int64())}) for i in range(5)}
    loads: list[str] = []

    def loader(name):
        def load():
            loads.append(name)
            return tables[name]
        return load

    for name in tables:
        assert cache.get(name, loader(name)).equals(tables[name])
    assert cache.memory_bytes <= 3000
    assert len(os.listdir(tmp_path / "spill")) == 2, "the two oldest of five 800-byte entries spill"
    for name in tables:  # every entry comes back, from memory or disk, without reloading the file
        assert cache.get(name, loader(name)).equals(tables[name])
    assert loads == list(tables)
    cache.forget(["f0", "f1"])
    cache.get("f0", loader("f0"))
    assert loads[-1] == "f0"
    cache.close()
    assert not (tmp_path / "spill").exists()
