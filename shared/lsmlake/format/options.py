"""The typed registry of table options (Paimon's keys, defaults and meanings).

Each option is declared once; `TableOptions` returns values of the option's real type. Options a
table created elsewhere carries but lsmlake does not know are kept and passed through untouched;
creating or altering a table with an unknown key is an error.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Generic, TypeVar, overload

from lsmlake.errors import InvalidInputError, UnknownOptionError

T = TypeVar("T")
E = TypeVar("E", bound=StrEnum)


class MergeEngine(StrEnum):
    DEDUPLICATE = "deduplicate"
    PARTIAL_UPDATE = "partial-update"
    AGGREGATION = "aggregation"
    FIRST_ROW = "first-row"


class ChangelogProducer(StrEnum):
    NONE = "none"
    INPUT = "input"
    FULL_COMPACTION = "full-compaction"
    LOOKUP = "lookup"


class LookupCompactMode(StrEnum):
    RADICAL = "radical"
    GENTLE = "gentle"


class SortOrder(StrEnum):
    ASCENDING = "ascending"
    DESCENDING = "descending"

_MEMORY_UNITS = {"": 1, "b": 1, "k": 1 << 10, "kb": 1 << 10, "kib": 1 << 10, "m": 1 << 20, "mb": 1 << 20,
                 "mib": 1 << 20, "g": 1 << 30, "gb": 1 << 30, "gib": 1 << 30, "t": 1 << 40, "tb": 1 << 40}
_DURATION_UNITS_MS = {"ms": 1, "milli": 1, "millis": 1, "s": 1000, "sec": 1000, "secs": 1000, "second": 1000,
                      "seconds": 1000, "min": 60_000, "mins": 60_000, "minute": 60_000, "minutes": 60_000,
                      "m": 60_000, "h": 3_600_000, "hour": 3_600_000, "hours": 3_600_000,
                      "d": 86_400_000, "day": 86_400_000, "days": 86_400_000}


def parse_memory(text: str) -> int:
    """Bytes of a memory size such as `128 mb` or `64kb`."""
    m = re.fullmatch(r"\s*(\d+)\s*([A-Za-z]*)\s*", text)
    if not m or m.group(2).lower() not in _MEMORY_UNITS:
        raise InvalidInputError(f"bad memory size {text!r} (examples: '128 mb', '64kb', '1 gb')")
    return int(m.group(1)) * _MEMORY_UNITS[m.group(2).lower()]


def parse_duration_ms(text: str) -> int:
    """Milliseconds of a duration such as `1 h`, `30 min` or `500ms` (a bare number is millis)."""
    m = re.fullmatch(r"\s*(\d+)\s*([A-Za-z]*)\s*", text)
    if not m or (m.group(2) and m.group(2).lower() not in _DURATION_UNITS_MS):
        raise InvalidInputError(f"bad duration {text!r} (examples: '1 h', '30 min', '10 s', '500 ms')")
    unit = m.group(2).lower()
    return int(m.group(1)) * (_DURATION_UNITS_MS[unit] if unit else 1)


def _parse_bool(text: str) -> bool:
    low = text.strip().lower()
    if low not in ("true", "false"):
        raise InvalidInputError(f"bad boolean {text!r} (use true or false)")
    return low == "true"


def _parse_int(text: str) -> int:
    try:
        return int(text.strip())
    except ValueError:
        raise InvalidInputError(f"bad integer {text!r}") from None


def _parse_positive_int(text: str) -> int:
    value = _parse_int(text)
    if value < 1:
        raise InvalidInputError(f"{value} is not at least 1")
    return value


def _parse_float(text: str) -> float:
    try:
        return float(text.strip())
    except ValueError:
        raise InvalidInputError(f"bad number {text!r}") from None


def _enum(kind: type[E], key: str) -> Callable[[str], E]:
    """Parser of an option whose values are the members of `kind`."""
    def parse(text: str) -> E:
        try:
            return kind(text.strip().lower())
        except ValueError:
            raise InvalidInputError(f"{key} must be one of {', '.join(kind)}, not {text!r}") from None
    return parse


@dataclass(frozen=True)
class Option(Generic[T]):
    """One table option with a default: key, parser, default and what it means. Reading it gives a T."""

    key: str
    parse: Callable[[str], T]
    default: T
    description: str
    default_text: str | None = None  # for derived defaults, how the default is computed

    def doc_default(self) -> str:
        return self.default_text if self.default_text is not None else str(self.default)


@dataclass(frozen=True)
class OptionalOption(Generic[T]):
    """One table option without a default: reading it gives a T, or None when the table does not set it."""

    key: str
    parse: Callable[[str], T]
    description: str
    default_text: str | None = None  # for derived defaults, how the default is computed

    @property
    def default(self) -> None:
        return None

    def doc_default(self) -> str:
        return self.default_text if self.default_text is not None else "(none)"


REGISTRY: dict[str, Option[Any] | OptionalOption[Any]] = {}
PREFIX_OPTIONS: dict[str, str] = {}  # regex -> description, for per-field options


def _opt(key: str, parse: Callable[[str], T], default: T, description: str,
         default_text: str | None = None) -> Option[T]:
    o = Option(key, parse, default, description, default_text)
    REGISTRY[key] = o
    return o


def _optional(key: str, parse: Callable[[str], T], description: str,
              default_text: str | None = None) -> OptionalOption[T]:
    o = OptionalOption(key, parse, description, default_text)
    REGISTRY[key] = o
    return o


BUCKET = _optional("bucket", _parse_int,
              "Number of buckets. N > 0 fixes the bucket count; -1 means unaware (append tables) "
              "or dynamic (primary-key tables: a key index assigns buckets); -2 (primary-key tables) postpones: "
              "writers write without buckets and a compaction places the rows.",
              "-1 for append tables; required for primary-key tables")
BUCKET_KEY = _optional("bucket-key", str,
                  "Comma-separated columns hashed to pick a bucket; defaults to the primary key "
                  "without partition columns. Required for fixed-bucket append tables.")
POSTPONE_DEFAULT_BUCKET_NUM = _optional(
    "postpone.default-bucket-num", _parse_int,
    "Postpone-bucket tables: the bucket count a partition gets at its first compaction.")
POSTPONE_TARGET_ROW_NUM_PER_BUCKET = _optional(
    "postpone.target-row-num-per-bucket", _parse_int,
    "Postpone-bucket tables without postpone.default-bucket-num: a new partition gets one bucket per this many "
    "postponed rows.")
POSTPONE_TARGET_SIZE_PER_BUCKET = _opt(
    "postpone.target-size-per-bucket", parse_memory, 1 << 30,
    "Postpone-bucket tables without the two options above: one bucket per this many bytes of postpone files.",
    "1 gb")
DYNAMIC_BUCKET_TARGET_ROW_NUM = _opt(
    "dynamic-bucket.target-row-num", _parse_int, 2_000_000,
    "Dynamic-bucket tables: keys a bucket takes before new keys go to another (kept by the engine that writes).")
DYNAMIC_BUCKET_INITIAL_BUCKETS = _optional(
    "dynamic-bucket.initial-buckets", _parse_int, "Dynamic-bucket tables: the buckets a writer starts with.")
DYNAMIC_BUCKET_MAX_BUCKETS = _opt(
    "dynamic-bucket.max-buckets", _parse_int, -1, "Dynamic-bucket tables: at most this many buckets (-1: no limit).")
FILE_FORMAT = _opt("file.format", str, "parquet", "Data file format; lsmlake writes parquet.")
FILE_COMPRESSION = _opt("file.compression", str, "zstd",
                        "Compression codec of data files (a fixed-width column that does not compress is "
                        "written uncompressed).")
FILE_COMPRESSION_ZSTD_LEVEL = _opt("file.compression.zstd-level", _parse_int, 1, "zstd level of data files.")
TARGET_FILE_SIZE = _optional("target-file-size", parse_memory,
                        "Data files roll over at this size (Arrow in-memory bytes).",
                        "128 mb for primary-key tables, 256 mb for append tables")
PARTITION_DEFAULT_NAME = _opt("partition.default-name", str, "__DEFAULT_PARTITION__",
                              "Directory name of a null, empty or blank partition value.")
MANIFEST_COMPRESSION = _opt("manifest.compression", str, "zstd", "Avro codec of manifest files.")
MANIFEST_TARGET_FILE_SIZE = _opt("manifest.target-file-size", parse_memory, 8 << 20,
                                 "Manifest files merge up to this size.")
MANIFEST_MERGE_MIN_COUNT = _opt("manifest.merge-min-count", _parse_int, 30,
                                "Base manifest lists with at least this many small manifests are merged.")
MANIFEST_FULL_COMPACTION_SIZE = _opt("manifest.full-compaction-threshold-size", parse_memory, 16 << 20,
                                     "Manifests that must change (small, or with DELETE entries) are merged "
                                     "fully, deletes applied, once they add up to this size.")
SNAPSHOT_NUM_RETAINED_MIN = _opt("snapshot.num-retained.min", _parse_int, 10,
                                 "Snapshots always kept by expiration.")
SNAPSHOT_NUM_RETAINED_MAX = _opt("snapshot.num-retained.max", _parse_int, 2147483647,
                                 "Snapshots kept at most, whatever their age.")
SNAPSHOT_TIME_RETAINED = _opt("snapshot.time-retained", parse_duration_ms, 3_600_000,
                              "Snapshots younger than this are kept (milliseconds; '1 h').", "1 h")
SNAPSHOT_EXPIRE_LIMIT = _opt("snapshot.expire.limit", _parse_int, 50,
                             "Snapshots expired at most in one run.")
CONSUMER_EXPIRATION_TIME = _optional("consumer.expiration-time", parse_duration_ms,
                                "A consumer (`consumer/consumer-<id>`) whose file was last modified longer ago "
                                "than this no longer holds snapshots back, and expiration deletes it; unset: "
                                "consumers never expire.")
COMMIT_MAX_RETRIES = _opt("commit.max-retries", _parse_int, 10,
                          "Attempts of a commit that keeps losing the snapshot-id race.")
MERGE_ENGINE = _opt("merge-engine", _enum(MergeEngine, "merge-engine"), MergeEngine.DEDUPLICATE,
                    "How rows of one key merge: deduplicate, partial-update, aggregation or first-row.")
IGNORE_DELETE = _opt("ignore-delete", _parse_bool, False, "Drop -D and -U rows on write.")
SEQUENCE_FIELD = _optional("sequence.field", str,
                      "Field(s) (comma-separated) that order the rows of a key before the sequence number.")
ROWKIND_FIELD = _optional("rowkind.field", str,
                     "A STRING column whose values (+I, -U, +U, -D) give each row's kind.")
SEQUENCE_FIELD_SORT_ORDER = _opt("sequence.field.sort-order", _enum(SortOrder, "sequence.field.sort-order"),
                                 SortOrder.ASCENDING,
                                 "ascending: the largest sequence.field wins; descending: the smallest.")
FIRST_ROW_IGNORE_DELETE = _opt("first-row.ignore-delete", _parse_bool, False, "first-row: drop -U/-D rows.")
DEDUPLICATE_IGNORE_DELETE = _opt("deduplicate.ignore-delete", _parse_bool, False,
                                 "deduplicate: drop -U/-D rows.")
PARTIAL_UPDATE_IGNORE_DELETE = _opt("partial-update.ignore-delete", _parse_bool, False,
                                    "partial-update: drop -U/-D rows.")
PARTIAL_UPDATE_REMOVE_RECORD_ON_DELETE = _opt(
    "partial-update.remove-record-on-delete", _parse_bool, False,
    "partial-update: a -D row removes the whole row (later rows start afresh).")
PARTIAL_UPDATE_REMOVE_RECORD_ON_SEQUENCE_GROUP = _optional(
    "partial-update.remove-record-on-sequence-group", str,
    "partial-update: sequence fields whose group's winning retraction removes the whole row.")
AGGREGATION_REMOVE_RECORD_ON_DELETE = _opt("aggregation.remove-record-on-delete", _parse_bool, False,
                                           "aggregation: a -D row removes the whole row.")
FIELDS_DEFAULT_AGGREGATE_FUNCTION = _optional("fields.default-aggregate-function", str,
                                         "Aggregate function of fields that name none.",
                                         "last_non_null_value for the aggregation engine")
DELETION_VECTORS_ENABLED = _opt("deletion-vectors.enabled", _parse_bool, False,
                                "Deletion vectors: readers skip older row versions without merging; level-0 "
                                "files become visible once compacted (writes compact unless write-only).")
CHANGELOG_PRODUCERS = tuple(ChangelogProducer)
CHANGELOG_PRODUCER = _opt("changelog-producer", _enum(ChangelogProducer, "changelog-producer"), ChangelogProducer.NONE,
                          "Changelog files for streaming readers: none, input (the written rows), "
                          "full-compaction (the change made by each full compaction) or lookup (the change "
                          "made when level-0 files are compacted up).")
NUM_SORTED_RUN_COMPACTION_TRIGGER = _opt("num-sorted-run.compaction-trigger", _parse_int, 5,
                                         "Sorted runs that trigger a compaction.")
NUM_LEVELS = _optional("num-levels", _parse_int, "LSM levels.",
                  "num-sorted-run.compaction-trigger + 1")
NUM_SORTED_RUN_STOP_TRIGGER = _optional("num-sorted-run.stop-trigger", _parse_int,
                                   "Sorted runs at which writes stall until compaction catches up.",
                                   "num-sorted-run.compaction-trigger + 3")
COMPACTION_MAX_SIZE_AMPLIFICATION_PERCENT = _opt(
    "compaction.max-size-amplification-percent", _parse_int, 200,
    "Universal compaction: full compaction when newer runs exceed this percentage of the oldest run.")
COMPACTION_SIZE_RATIO = _opt("compaction.size-ratio", _parse_int, 1,
                             "Universal compaction: percentage flexibility when comparing run sizes.")
COMPACTION_OPTIMIZATION_INTERVAL = _optional("compaction.optimization-interval", parse_duration_ms,
                                        "Run a full compaction at least this often (milliseconds; '1 h').")
COMPACTION_OFFPEAK_START_HOUR = _opt(
    "compaction.offpeak.start.hour", _parse_int, -1,
    "Universal compaction: the local hour (0-23) the off-peak window starts (-1: no window).")
COMPACTION_OFFPEAK_END_HOUR = _opt(
    "compaction.offpeak.end.hour", _parse_int, -1,
    "Universal compaction: the local hour (0-23) the off-peak window ends, exclusive (-1 or equal to the start: "
    "no window; before the start: the window spans midnight).")
COMPACTION_OFFPEAK_RATIO = _opt(
    "compaction.offpeak-ratio", _parse_int, 0,
    "Universal compaction: percent added to compaction.size-ratio inside the off-peak window, so that runs of "
    "more different sizes are merged then.")
COMPACTION_TOTAL_SIZE_THRESHOLD = _optional(
    "compaction.total-size-threshold", parse_memory,
    "Primary-key tables: a full compaction when a bucket of more than one sorted run holds less than this.")
COMPACTION_INCREMENTAL_SIZE_THRESHOLD = _optional(
    "compaction.incremental-size-threshold", parse_memory,
    "Primary-key tables: a full compaction when the runs of a bucket below its highest level hold more than this.")
COMPACTION_DELETE_RATIO_THRESHOLD = _opt(
    "compaction.delete-ratio-threshold", _parse_float, 0.2,
    "Append tables with deletion vectors and bucket -1: a file with more deleted rows than this ratio of its rows "
    "is compacted (even alone).")
COMPACTION_FORCE_UP_LEVEL_0 = _opt(
    "compaction.force-up-level-0", _parse_bool, False,
    "Primary-key tables: when nothing else is due, level-0 files are still compacted up (always so for tables "
    "that look up: deletion vectors, changelog-producer lookup, first-row, force-lookup).")
FORCE_LOOKUP = _opt("force-lookup", _parse_bool, False,
                    "Primary-key tables: compact as a lookup table does (level 0 moved up, see lookup-compact).")
LOOKUP_COMPACT = _opt(
    "lookup-compact", _enum(LookupCompactMode, "lookup-compact"), LookupCompactMode.RADICAL,
    "Tables that look up: radical moves level-0 files up at every compaction trigger that finds nothing else "
    "due; gentle only at every lookup-compact.max-interval-th such trigger (fewer rewrites, staler level 0).")
LOOKUP_COMPACT_MAX_INTERVAL = _optional(
    "lookup-compact.max-interval", _parse_int,
    "lookup-compact=gentle: level 0 moves up at this many compaction triggers that found nothing else due.",
    "2 x num-sorted-run.compaction-trigger (never below the trigger)")
COMPACTION_PRIORITY = _opt(
    "lsmlake.compaction.priority", _parse_int, 0,
    "lsmlake's compactor: tables of a higher priority are planned first in each round (after stalled tables).")
COMPACTION_SHARE = _opt(
    "lsmlake.compaction.share", _parse_positive_int, 1,
    "lsmlake's compactor: the table's weight when tables of one priority share the compactor: over time each "
    "gets compaction work in proportion to its share (at least 1).")
FULL_COMPACTION_DELTA_COMMITS = _optional("full-compaction.delta-commits", _parse_int,
                                     "Run a full compaction after this many commits.")
COMPACTION_MIN_FILE_NUM = _opt("compaction.min.file-num", _parse_int, 5,
                               "Append tables: small files needed before they are compacted.")
COMPACTION_MAX_FILE_NUM = _opt("compaction.max.file-num", _parse_int, 50,
                               "Append tables: small files that force a compaction.")
LOOKUP_CACHE_MAX_MEMORY_SIZE = _opt("lookup.cache-max-memory-size", parse_memory, 256 << 20,
                                    "Memory of the lookup cache of file keys used by deletion-vector compaction; "
                                    "evicted entries spill to local disk.")
WRITE_ONLY = _opt("write-only", _parse_bool, False, "Writers never compact (a dedicated compactor does).")
WRITE_BUFFER_SIZE = _opt("write-buffer-size", parse_memory, 256 << 20, "Memory of a write buffer.")
WRITE_BUFFER_SPILLABLE = _optional("write-buffer-spillable", _parse_bool,
                              "Whether a full write buffer spills sorted runs to local disk instead of being "
                              "flushed to level-0 files.",
                              "true on object storage or for batch writes, else false")
WRITE_BUFFER_SPILL_MAX_DISK_SIZE = _optional("write-buffer-spill.max-disk-size", parse_memory,
                                        "Local disk a writer's spilled write-buffer runs may use; beyond it the "
                                        "buffer must be flushed.", "infinite")
LOCAL_SORT_MAX_NUM_FILE_HANDLES = _opt("local-sort.max-num-file-handles", _parse_int, 128,
                                       "Maximal fan-in of the external merge of spilled runs; more runs are first "
                                       "merged into one.")
SPILL_COMPRESSION = _opt("spill-compression", str, "zstd",
                         "Compression of spilled runs: zstd, lz4 or none (lzo is read as lz4).")
SPILL_COMPRESSION_ZSTD_LEVEL = _opt("spill-compression.zstd-level", _parse_int, 1, "zstd level of spilled runs.")
METADATA_STATS_MODE = _opt("metadata.stats-mode", str, "full",
                           "Value statistics in manifests: none or full (lsmlake writes full).")
DATA_FILE_EXTERNAL_PATHS = _optional("data-file.external-paths", str,
                                "Comma-separated roots outside the table folder where data files may live "
                                "(a commit naming an external path elsewhere is refused; expiration deletes "
                                "nothing outside the table folder and these roots).")
# Iceberg metadata published beside the table (lsmlake.iceberg parses and checks the values; docs/iceberg.md)
ICEBERG_STORAGE = _opt("metadata.iceberg.storage", str, "disabled",
                       "Publish Iceberg metadata with every commit: disabled, table-location (in <table>/metadata) "
                       "or hadoop-catalog (in <warehouse>/iceberg/<db>/<table>/metadata).")
ICEBERG_STORAGE_LOCATION = _optional("metadata.iceberg.storage-location", str,
                                     "Where the Iceberg metadata goes instead: table-location or catalog-location.")
ICEBERG_FORMAT_VERSION = _opt("metadata.iceberg.format-version", str, "2",
                              "Iceberg format version of the metadata: 2 (deletion vectors as position deletes).")
ICEBERG_PREVIOUS_VERSIONS_MAX = _opt("metadata.iceberg.previous-versions-max", str, "0",
                                     "Old Iceberg metadata JSON files kept after each publication.")
ICEBERG_DELETE_AFTER_COMMIT = _opt("metadata.iceberg.delete-after-commit.enabled", str, "true",
                                   "Whether old Iceberg metadata JSON files are deleted after each publication.")
ICEBERG_MANIFEST_COMPRESSION = _opt("metadata.iceberg.manifest-compression", str, "deflate",
                                    "Codec of the Iceberg manifests: deflate, snappy, zstd or none.")
ICEBERG_COMPACTION_MAX_FILE_NUM = _opt("metadata.iceberg.compaction.max.file-num", str, "50",
                                       "Iceberg manifests a snapshot may have before they are merged into one.")
PRIMARY_KEY_OPT = _optional("primary-key", str, "Primary key given as an option (comma-separated).")
PARTITION_OPT = _optional("partition", str, "Partition keys given as an option (comma-separated).")
PATH = _optional("path", str, "Table location (set by the catalog).")
TYPE = _opt("type", str, "table", "Table type.")
COMMENT = _optional("comment", str, "Table comment.")

_FIELD_OPTIONS = "aggregate-function|sequence-group|ignore-retract|list-agg-delimiter|distinct|nested-key"
PREFIX_OPTIONS[rf"fields\.[^.]+\.({_FIELD_OPTIONS})"] = (
    "Per-field options: aggregate-function, sequence-group, ignore-retract, list-agg-delimiter, distinct, "
    "nested-key.")


def is_known(key: str) -> bool:
    return key in REGISTRY or any(re.fullmatch(p, key) for p in PREFIX_OPTIONS)


def validate(options: Mapping[str, str]) -> None:
    """Reject unknown keys and values that do not parse; changes nothing."""
    for key, value in options.items():
        if not isinstance(value, str):
            raise InvalidInputError(f"option {key!r} must be a string, got {type(value).__name__}")
        if not is_known(key):
            raise UnknownOptionError(f"unknown table option {key!r}")
        if key in REGISTRY:
            try:
                REGISTRY[key].parse(value)
            except InvalidInputError as e:
                raise InvalidInputError(f"option {key!r}: {e}") from None


class TableOptions:
    """Typed, read-only view of a table's options."""

    def __init__(self, raw: Mapping[str, str]) -> None:
        self.raw: dict[str, str] = dict(raw)

    @overload
    def get(self, option: Option[T]) -> T: ...
    @overload
    def get(self, option: OptionalOption[T]) -> T | None: ...
    def get(self, option: Option[T] | OptionalOption[T]) -> T | None:
        if option.key in self.raw:
            return option.parse(self.raw[option.key])
        return option.default

    def require(self, option: Option[T] | OptionalOption[T]) -> T:
        v = self.get(option)
        if v is None:
            raise InvalidInputError(f"option {option.key!r} is not set")
        return v

    def bucket(self) -> int:
        b = self.get(BUCKET)
        return -1 if b is None else b

    def target_file_size(self, primary_key: bool) -> int:
        v = self.get(TARGET_FILE_SIZE)
        if v is not None:
            return v
        return (128 << 20) if primary_key else (256 << 20)

    def stop_trigger(self) -> int:
        v = self.get(NUM_SORTED_RUN_STOP_TRIGGER)
        return v if v is not None else self.require(NUM_SORTED_RUN_COMPACTION_TRIGGER) + 3

    def compaction_file_size(self, primary_key: bool) -> int:
        """Files smaller than this take part in a compaction; bigger ones may move up unchanged."""
        return self.target_file_size(primary_key) // 10 * 7

    def write_buffer_spillable(self, object_store: bool, streaming: bool) -> bool:
        """Paimon's default: spill on object storage (flushing small files there is costly) and in batch writes."""
        v = self.get(WRITE_BUFFER_SPILLABLE)
        return v if v is not None else (object_store or not streaming)

    def lookup_compact_max_interval(self) -> int:
        """Paimon's rule: the option, else twice the compaction trigger; never below the trigger."""
        trigger = self.require(NUM_SORTED_RUN_COMPACTION_TRIGGER)
        v = self.get(LOOKUP_COMPACT_MAX_INTERVAL)
        return max(trigger, v if v is not None else 2 * trigger)

    def num_levels(self) -> int:
        v = self.get(NUM_LEVELS)
        return v if v is not None else self.require(NUM_SORTED_RUN_COMPACTION_TRIGGER) + 1


def docs_table() -> str:
    """The option reference as a Markdown table, generated from the registry."""
    lines = ["| key | default | description |", "|---|---|---|"]
    for key in sorted(REGISTRY):
        o = REGISTRY[key]
        lines.append(f"| `{key}` | {o.doc_default()} | {o.description} |")
    for _pattern, desc in PREFIX_OPTIONS.items():
        lines.append(f"| `fields.<field>.<option>` | | {desc} |")
    return "\n".join(lines)


if __name__ == "__main__":
    print(docs_table())
