"""Splits files into sections of overlapping key ranges, each section into as few sorted runs as possible.

Sections do not overlap each other, so they are merged independently; a section that is one run of
big files needs no merge at all (its files can move to another level unchanged).
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence

from lsmlake.format.data_file_meta import DataFileMeta
from lsmlake.mergetree.file_keys import FileKeys
from lsmlake.mergetree.sorted_run import SortedRun


def interval_partition(files: Sequence[DataFileMeta], keys: FileKeys) -> list[list[SortedRun]]:
    """Sections in key order; each a list of sorted runs."""
    ordered = sorted(files, key=lambda f: keys.range(f))
    sections: list[list[SortedRun]] = []
    section: list[DataFileMeta] = []
    bound = None
    for f in ordered:
        lo, hi = keys.range(f)
        if section and bound is not None and lo > bound:
            sections.append(_runs_of(section, keys))
            section = []
            bound = None
        section.append(f)
        if bound is None or hi > bound:
            bound = hi
    if section:
        sections.append(_runs_of(section, keys))
    return sections


def _runs_of(section: list[DataFileMeta], keys: FileKeys) -> list[SortedRun]:
    """Greedy: put each file (by min key) on the run that ends earliest, if it starts after that end."""
    heap: list[tuple[tuple[object, ...], int, list[DataFileMeta]]] = []
    counter = 0
    for f in section:
        lo, hi = keys.range(f)
        if heap and lo > heap[0][0]:
            _, n, run = heapq.heappop(heap)
            run.append(f)
            heapq.heappush(heap, (hi, n, run))
        else:
            heapq.heappush(heap, (hi, counter, [f]))
            counter += 1
    runs = [run for _, n, run in sorted(heap, key=lambda item: item[1])]
    return [SortedRun(tuple(r)) for r in runs]
