"""`DataFileMeta`: what a manifest records about one data file, kept as Paimon stores it.

Keys and statistics stay as the serialized BinaryRow bytes found on disk, so that an entry read from
a manifest written by another engine is written back byte for byte (DELETE entries must repeat the
ADD entry exactly). Fields lsmlake does not model (`_WRITE_COLS_SEQUENCES`, and any field a newer Paimon
adds) are kept in `extra` and written back: an upgraded file and a merged manifest keep them unchanged.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field, replace
from typing import Any

from lsmlake.format.avro_schemas import DATA_FILE_META_FIELDS, ExtraFields

FILE_SOURCE_APPEND = 0
FILE_SOURCE_COMPACT = 1

_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)


@dataclass(frozen=True)
class SimpleStats:
    """Min values, max values (serialized BinaryRows) and null counts of some columns."""

    min_values: bytes
    max_values: bytes
    null_counts: tuple[int | None, ...] | None

    def to_avro(self) -> dict[str, Any]:
        return {"_MIN_VALUES": self.min_values, "_MAX_VALUES": self.max_values,
                "_NULL_COUNTS": None if self.null_counts is None else list(self.null_counts)}

    @staticmethod
    def from_avro(d: dict[str, Any]) -> SimpleStats:
        nc = d.get("_NULL_COUNTS")
        return SimpleStats(d["_MIN_VALUES"], d["_MAX_VALUES"], None if nc is None else tuple(nc))


@dataclass(frozen=True)
class DataFileMeta:
    """One data file of a bucket: name, size, rows, key range, statistics, sequence range, level."""

    file_name: str
    file_size: int
    row_count: int
    min_key: bytes
    max_key: bytes
    key_stats: SimpleStats
    value_stats: SimpleStats
    min_sequence_number: int
    max_sequence_number: int
    schema_id: int
    level: int
    extra_files: tuple[str, ...] = ()
    creation_time_ms: int | None = None  # local wall-clock time stored as if UTC, as Paimon does
    delete_row_count: int | None = None
    embedded_index: bytes | None = None
    file_source: int | None = FILE_SOURCE_APPEND
    value_stats_cols: tuple[str, ...] | None = None
    external_path: str | None = None
    first_row_id: int | None = None
    write_cols: tuple[str, ...] | None = None
    # values of the fields not modelled above, by Avro field name, written back as read
    extra: dict[str, Any] = field(default_factory=dict, compare=False, hash=False)
    # the definitions of those of `extra`'s fields that lsmlake's schema lacks (`avro_schemas.extra_fields`)
    extra_fields: ExtraFields = field(default=(), compare=False, hash=False)

    @property
    def creation_epoch_ms(self) -> int | None:
        """When the file was written, as epoch milliseconds (the stored value is local wall-clock time written as
        if it were UTC, as Paimon writes it: read back in the local zone, as Paimon's `creationTimeEpochMillis`)."""
        if self.creation_time_ms is None:
            return None
        wall = (_EPOCH + dt.timedelta(milliseconds=self.creation_time_ms)).replace(tzinfo=None)
        return int(wall.timestamp() * 1000)

    def path_in(self, bucket_dir: str) -> str:
        """Where the file is: its external path (Paimon's `data-file.external-paths`), else in its bucket folder."""
        return self.external_path or f"{bucket_dir}/{self.file_name}"

    def upgrade(self, level: int) -> DataFileMeta:
        """The same file moved to another level (no rewrite)."""
        return replace(self, level=level)

    @property
    def identifier(self) -> tuple[Any, ...]:
        """The part of the identity that lives in the file meta (with partition and bucket, an entry's key)."""
        return (self.level, self.file_name, self.extra_files, self.embedded_index, self.external_path)

    def to_avro(self) -> dict[str, Any]:
        ct = None
        if self.creation_time_ms is not None:
            ct = _EPOCH + dt.timedelta(milliseconds=self.creation_time_ms)
        d = {
            "_FILE_NAME": self.file_name,
            "_FILE_SIZE": self.file_size,
            "_ROW_COUNT": self.row_count,
            "_MIN_KEY": self.min_key,
            "_MAX_KEY": self.max_key,
            "_KEY_STATS": self.key_stats.to_avro(),
            "_VALUE_STATS": self.value_stats.to_avro(),
            "_MIN_SEQUENCE_NUMBER": self.min_sequence_number,
            "_MAX_SEQUENCE_NUMBER": self.max_sequence_number,
            "_SCHEMA_ID": self.schema_id,
            "_LEVEL": self.level,
            "_EXTRA_FILES": list(self.extra_files),
            "_CREATION_TIME": ct,
            "_DELETE_ROW_COUNT": self.delete_row_count,
            "_EMBEDDED_FILE_INDEX": self.embedded_index,
            "_FILE_SOURCE": self.file_source,
            "_VALUE_STATS_COLS": None if self.value_stats_cols is None else list(self.value_stats_cols),
            "_EXTERNAL_PATH": self.external_path,
            "_FIRST_ROW_ID": self.first_row_id,
            "_WRITE_COLS": None if self.write_cols is None else list(self.write_cols),
        }
        d.update(self.extra)
        return d

    @staticmethod
    def from_avro(d: dict[str, Any], unknown: ExtraFields = ()) -> DataFileMeta:
        """The meta of an Avro record; `unknown`: the definitions of the record's fields lsmlake's schema lacks."""
        ct = d.get("_CREATION_TIME")
        ct_ms: int | None
        if ct is None:
            ct_ms = None
        elif isinstance(ct, dt.datetime):
            aware = ct if ct.tzinfo else ct.replace(tzinfo=dt.UTC)
            ct_ms = int((aware - _EPOCH) / dt.timedelta(milliseconds=1))
        else:
            ct_ms = int(ct)
        vsc = d.get("_VALUE_STATS_COLS")
        wc = d.get("_WRITE_COLS")
        # one set difference in C: a manifest is read entry by entry, so this runs once per data file
        extra = {k: d[k] for k in d.keys() - _MODELLED if d[k] is not None or k not in DATA_FILE_META_FIELDS}
        return DataFileMeta(
            file_name=d["_FILE_NAME"], file_size=d["_FILE_SIZE"], row_count=d["_ROW_COUNT"],
            min_key=d["_MIN_KEY"], max_key=d["_MAX_KEY"],
            key_stats=SimpleStats.from_avro(d["_KEY_STATS"]), value_stats=SimpleStats.from_avro(d["_VALUE_STATS"]),
            min_sequence_number=d["_MIN_SEQUENCE_NUMBER"], max_sequence_number=d["_MAX_SEQUENCE_NUMBER"],
            schema_id=d["_SCHEMA_ID"], level=d["_LEVEL"], extra_files=tuple(d.get("_EXTRA_FILES") or ()),
            creation_time_ms=ct_ms, delete_row_count=d.get("_DELETE_ROW_COUNT"),
            embedded_index=d.get("_EMBEDDED_FILE_INDEX"), file_source=d.get("_FILE_SOURCE"),
            value_stats_cols=None if vsc is None else tuple(vsc), external_path=d.get("_EXTERNAL_PATH"),
            first_row_id=d.get("_FIRST_ROW_ID"), write_cols=None if wc is None else tuple(wc), extra=extra,
            extra_fields=tuple(f for f in unknown if f[0] in extra))


# the fields the dataclass holds (every field of lsmlake's schema but `_WRITE_COLS_SEQUENCES`, kept in `extra`)
_MODELLED = DATA_FILE_META_FIELDS - {"_WRITE_COLS_SEQUENCES"}


def local_now_as_utc_ms() -> int:
    """Paimon's `_CREATION_TIME`: the local wall-clock time, stored as if it were UTC."""
    now = dt.datetime.now()
    return int((now.replace(tzinfo=dt.UTC) - _EPOCH) / dt.timedelta(milliseconds=1))
