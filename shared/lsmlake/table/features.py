"""Which table features lsmlake handles yet: a table that needs more is refused, never misread.

Tables written by other engines may carry options lsmlake does not implement. Reading or writing
them as if those options were absent would return wrong rows or break other readers, so each
entry point checks here first and names the option that stops it.
"""

from __future__ import annotations

from lsmlake.errors import InvalidInputError
from lsmlake.format import options as opts
from lsmlake.format.schema import TableSchema


def _truthy(schema: TableSchema, key: str) -> bool:
    return schema.options.get(key, "false").strip().lower() == "true"


def unsupported(schema: TableSchema, for_write: bool, compaction: bool = False) -> list[str]:
    """Reasons the table cannot be read (or written, when `for_write`; compacted, with `compaction` too) correctly
    by lsmlake. A compaction of a dynamic-bucket table rewrites files within their bucket and leaves the key ->
    bucket index (the HASH index files) as it is, so it needs nothing a write needs."""
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
        for key in ("row-tracking.enabled", "data-evolution.enabled"):
            if _truthy(schema, key):
                reasons.append(f"{key}=true (not supported yet for writes)")
    fmt = o.get(opts.FILE_FORMAT).lower()
    if fmt != "parquet":
        reasons.append(f"file.format={fmt} (lsmlake reads and writes parquet)")
    return reasons


def check(schema: TableSchema, identifier: str, for_write: bool, compaction: bool = False) -> None:
    """Raise an InvalidInputError naming every option that stops lsmlake from handling the table."""
    reasons = unsupported(schema, for_write, compaction)
    if reasons:
        what = "compact" if compaction else "write to" if for_write else "read"
        raise InvalidInputError(f"cannot {what} table {identifier}: " + "; ".join(reasons))
