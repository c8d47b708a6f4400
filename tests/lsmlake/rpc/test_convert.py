"""Protobuf <-> lsmlake conversions round-trip every field."""

from __future__ import annotations

from lsmlake.format.data_file_meta import DataFileMeta, SimpleStats
from lsmlake.format.deletion_vector import DvRange
from lsmlake.format.index_manifest import IndexEntry
from lsmlake.rpc import convert
from lsmlake.table.write import CommitMessage


def _file(name: str, **kw: object) -> DataFileMeta:
    base = dict(file_name=name, file_size=10, row_count=3, min_key=b"\x01", max_key=b"\x02",
                key_stats=SimpleStats(b"a", b"b", (0,)), value_stats=SimpleStats(b"c", b"d", None),
                min_sequence_number=0, max_sequence_number=2, schema_id=0, level=0)
    base.update(kw)
    return DataFileMeta(**base)  # type: ignore[arg-type]


def test_commit_message_round_trips() -> None:
    rich = _file("f2", extra_files=("f2.index",), creation_time_ms=123, delete_row_count=1, embedded_index=b"i",
                 file_source=1, value_stats_cols=("v",), external_path="s3://b/f2", first_row_id=7,
                 write_cols=("v",), key_stats=SimpleStats(b"a", b"b", (None, 2)),
                 extra={"_WRITE_COLS_SEQUENCES": [5]})
    dv = IndexEntry(b"p", 1, "DELETION_VECTORS", "index-1", 20, 1, (DvRange("f1", 1, 5, 2),))
    gi = IndexEntry(b"p", 1, "BTREE", "index-2", 30, 4, None, "s3://b/i2",
                    {"_ROW_RANGE_START": 0, "_ROW_RANGE_END": 9, "_INDEX_FIELD_ID": 1, "_EXTRA_FIELD_IDS": [2],
                     "_INDEX_META": b"m", "_SOURCE_META": None})
    msg = CommitMessage(b"p", 1, 4, new_files=[_file("f1"), rich], deleted_files=[_file("f0", file_source=None)],
                        changelog_files=[_file("c1")], new_index_files=[dv], deleted_index_files=[gi])
    assert convert.changes_from_proto(convert.changes_to_proto(msg)) == msg
    back = convert.changes_from_proto(convert.changes_to_proto(msg)).new_files[1]
    assert back.extra == rich.extra  # not part of equality
