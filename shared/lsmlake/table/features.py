"""Which table features lsmlake handles yet: a table that needs more is refused, never misread.

Tables written by other engines may carry options lsmlake does not implement. Reading or writing
them as if those options were absent would return wrong rows or break other readers, so each
entry point checks here first and names the option that stops it.
"""

from __future__ import annotations

from lsmlake.errors import InvalidInputError
from lsmlake.format import options as opts
from lsmlake.format.schema import TableSchema
from lsmlake.format.types import BLOB, AnyType, ArrayType, MapType, RowType

# Paimon's primary-key indexes (CoreOptions `pk-*.index.columns`): a table that names columns in any of them
# has its indexes built by every compaction that writes files above level 0, file by file. A compaction that
# rewrites the files without rebuilding the indexes leaves index payloads that name files no longer live, so
# vector, full-text and sorted-index searches silently skip the rewritten rows. Paimon enables each index
# family when its key is present at all (even with an empty value).
PK_INDEX_OPTIONS = ("pk-btree.index.columns", "pk-bitmap.index.columns", "pk-multivalue.index.columns",
                    "pk-vector.index.columns", "pk-full-text.index.columns")
# Options that make BYTES columns BLOB columns stored outside the data files.
BLOB_FIELD_OPTIONS = ("blob-field", "blob-descriptor-field", "blob.stored-descriptor-fields", "blob-view-field")


def _truthy(schema: TableSchema, key: str) -> bool:
    return schema.options.get(key, "false").strip().lower() == "true"


def _holds_blob(t: AnyType) -> bool:
    if isinstance(t, ArrayType):
        return _holds_blob(t.element)
    if isinstance(t, MapType):
        return _holds_blob(t.key) or _holds_blob(t.value)
    if isinstance(t, RowType):
        return any(_holds_blob(f.type) for f in t.fields)
    return t.kind == BLOB


def _unmaintained(schema: TableSchema, for_write: bool) -> list[str]:
    """Reasons from Paimon features whose files or indexes lsmlake does not maintain: each refuses writes and
    compactions; those lsmlake cannot read correctly either refuse reads too."""
    reasons = []
    blobs = [f.name for f in schema.fields if _holds_blob(f.type)]
    if blobs:
        reasons.append(f"BLOB columns {blobs} (their values live in separate blob files lsmlake does not "
                       "read or write)")
    blob_options = [k for k in BLOB_FIELD_OPTIONS if schema.options.get(k, "").strip()]
    if blob_options:
        reasons.append(f"{', '.join(blob_options)} (BLOB columns stored outside the data files)")
    if _truthy(schema, "pk-clustering-override"):
        reasons.append("pk-clustering-override=true (files are sorted by clustering.columns, not by the key)")
    if _truthy(schema, "chain-table.enabled"):
        reasons.append("chain-table.enabled=true (a chain table is read and compacted across its snapshot and "
                       "delta branches)")
    uses_index_files = _truthy(schema, opts.DELETION_VECTORS_ENABLED.key) or schema.table_options.bucket() == -1
    if _truthy(schema, "index-file-in-data-file-dir") and uses_index_files:
        reasons.append("index-file-in-data-file-dir=true (lsmlake keeps index files in the table's index "
                       "directory)")
    if not for_write:
        return reasons
    indexed = [k for k in PK_INDEX_OPTIONS if k in schema.options]
    if indexed:
        reasons.append(f"{', '.join(f'{k}={schema.options[k]}' for k in indexed)} (primary-key indexes are "
                       "built by compaction: lsmlake does not maintain them, and files it rewrote would be "
                       "missing from their searches)")
    for key in ("row-tracking.enabled", "data-evolution.enabled"):
        if _truthy(schema, key):
            reasons.append(f"{key}=true (not supported yet for writes or compaction: row ids are not kept)")
    vector = [k for k in ("vector-field", "vector.file.format") if schema.options.get(k, "").strip()]
    if vector:
        reasons.append(f"{', '.join(vector)} (VECTOR columns in separate vector-store files)")
    return reasons


def unsupported(schema: TableSchema, for_write: bool, compaction: bool = False) -> list[str]:
    """Reasons the table cannot be read (or written, when `for_write`; compacted, with `compaction` too) correctly
    by lsmlake. A compaction of a dynamic-bucket table rewrites files within their bucket and leaves the key ->
    bucket index (the HASH index files) as it is, so it needs nothing a write needs. Every feature whose files
    or indexes a rewrite would break (`_unmaintained`) refuses compactions as it refuses writes."""
    o = schema.table_options
    reasons = []
    if _truthy(schema, opts.DELETION_VECTORS_ENABLED.key) and _truthy(schema, "deletion-vectors.bitmap64"):
        reasons.append("deletion-vectors.bitmap64=true (64-bit deletion vectors are not supported)")
    if schema.is_primary_key_table:
        from lsmlake.mergetree.merge.factory import merge_function_for

        try:
            merge_function_for(schema)
        except InvalidInputError as e:
            reasons.append(str(e))
    bucket = o.bucket()
    if bucket < -2 or bucket == 0 or (bucket == -2 and not schema.is_primary_key_table):
        reasons.append(f"bucket={bucket} (not a bucket count: N > 0, -1, or -2 for primary-key tables)")
    if for_write:
        cross = schema.is_primary_key_table and bucket == -1 and not set(schema.partition_keys) <= set(
            schema.primary_keys)
        if cross and not compaction:
            engine = o.raw.get("merge-engine", "deduplicate")
            if engine != "deduplicate":
                reasons.append(f"merge-engine={engine} with cross-partition upsert (bucket=-1, a primary key without "
                               "the partition keys): lsmlake moves keys between partitions for deduplicate only")
            if set(schema.partition_keys) & set(schema.primary_keys):
                reasons.append("cross-partition upsert with a primary key that holds some of the partition keys "
                               "(lsmlake moves keys whose primary key holds none of them)")
            if _truthy(schema, "ignore-delete") or _truthy(schema, "deduplicate.ignore-delete"):
                reasons.append("ignore-delete with cross-partition upsert (moving a key deletes it where it was)")
            if o.raw.get("sequence.field"):
                reasons.append("sequence.field with cross-partition upsert (a key's delete in the partition it leaves "
                               "must win whatever the field holds there)")
        try:
            o.get(opts.CHANGELOG_PRODUCER)
        except InvalidInputError:
            producer = o.raw[opts.CHANGELOG_PRODUCER.key]
            reasons.append(f"changelog-producer={producer} (use one of {', '.join(opts.CHANGELOG_PRODUCERS)})")
    reasons.extend(_unmaintained(schema, for_write))
    fmt = o.get(opts.FILE_FORMAT).lower()
    if fmt != "parquet":
        reasons.append(f"file.format={fmt} (lsmlake reads and writes parquet)")
    return reasons


def refusal(schema: TableSchema, identifier: str, for_write: bool, compaction: bool = False) -> str | None:
    """Why lsmlake cannot handle the table (naming every option that stops it), or None when it can."""
    reasons = unsupported(schema, for_write, compaction)
    if not reasons:
        return None
    what = "compact" if compaction else "write to" if for_write else "read"
    return f"cannot {what} table {identifier}: " + "; ".join(reasons)


def check(schema: TableSchema, identifier: str, for_write: bool, compaction: bool = False) -> None:
    """Raise an InvalidInputError naming every option that stops lsmlake from handling the table."""
    reason = refusal(schema, identifier, for_write, compaction)
    if reason is not None:
        raise InvalidInputError(reason)
