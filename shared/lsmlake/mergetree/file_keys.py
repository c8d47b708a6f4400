"""Key ranges of data files, decoded once from their min/max key BinaryRows and compared as tuples."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from lsmlake.format.binary_row import deserialize_row
from lsmlake.format.data_file_meta import DataFileMeta
from lsmlake.format.types import AnyType


class FileKeys:
    """Decodes and caches the (min key, max key) of data files of one table."""

    def __init__(self, key_types: Sequence[AnyType]) -> None:
        self.key_types = list(key_types)
        self._cache: dict[str, tuple[tuple[Any, ...], tuple[Any, ...]]] = {}

    def range(self, f: DataFileMeta) -> tuple[tuple[Any, ...], tuple[Any, ...]]:
        r = self._cache.get(f.file_name)
        if r is None:
            r = (tuple(deserialize_row(f.min_key, self.key_types)), tuple(deserialize_row(f.max_key, self.key_types)))
            self._cache[f.file_name] = r
        return r

    def min(self, f: DataFileMeta) -> tuple[Any, ...]:
        return self.range(f)[0]

    def max(self, f: DataFileMeta) -> tuple[Any, ...]:
        return self.range(f)[1]
