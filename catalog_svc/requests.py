"""Reading the catalog's table, scan, sequence, bucket and expiration requests into lsmlake's types, within bounds.

Column names and types are bounded (`lsmlake.catalog.column_limits`) before the schema parser sees them; sequence
ranges are bounded so that a request cannot take numbers near the end of the range the commit checks allow.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import numpy as np

from lsmlake.catalog.column_limits import check_column, check_columns
from lsmlake.errors import InvalidInputError
from lsmlake.format.bucket import POSTPONE_BUCKET
from lsmlake.format.types import DataField, parse_schema_fields
from lsmlake.proto_gen.lsmlake.v1 import catalog_pb2
from lsmlake.table.schema_change import AddColumn, RemoveOption, RenameColumn, SchemaChange, SetOption

MAX_RANGES = 10_000
MAX_SEQUENCES_PER_RANGE = 1 << 40  # far above any flush; keeps 2^62 (the commit checks' bound) out of reach
MAX_KEY_HASHES = 1_000_000  # per AssignBuckets request: 4 bytes each, well inside gRPC's message limit


def table_fields(columns: Sequence[catalog_pb2.Column]) -> tuple[DataField, ...]:
    """The fields of a CreateTable request's columns, with their comments."""
    check_columns([(c.name, c.type) for c in columns])
    fields = parse_schema_fields(", ".join(f"`{c.name}` {c.type}" for c in columns))
    return tuple(dataclasses.replace(f, description=c.comment or None) for f, c in zip(fields, columns, strict=True))


def schema_change(i: int, c: catalog_pb2.SchemaChange) -> SchemaChange:
    """The `i`th change of an AlterTable request."""
    which = c.WhichOneof("change")
    if which == "add_column":
        check_column(f"changes[{i}].add_column", c.add_column.name, c.add_column.type)
        return AddColumn(c.add_column.name, c.add_column.type, c.add_column.comment or None)
    if which == "rename_column":
        return RenameColumn(c.rename_column.old_name, c.rename_column.new_name)
    if which == "set_option":
        return SetOption(c.set_option.key, c.set_option.value)
    if which == "remove_option":
        return RemoveOption(c.remove_option.key)
    raise InvalidInputError(f"changes[{i}] names no change")


def sequence_counts(ranges: Sequence[catalog_pb2.SequenceRange]) -> dict[tuple[bytes, int], int]:
    """The count per (partition, bucket) of an AllocateSequences request; InvalidInputError naming the entry."""
    if not ranges:
        raise InvalidInputError("ranges must not be empty")
    if len(ranges) > MAX_RANGES:
        raise InvalidInputError(f"ranges has {len(ranges)} entries; at most {MAX_RANGES}")
    counts: dict[tuple[bytes, int], int] = {}
    for i, r in enumerate(ranges):
        if r.bucket < 0 and r.bucket != POSTPONE_BUCKET:
            raise InvalidInputError(f"ranges[{i}]: bucket {r.bucket} is invalid (numbers are for real buckets and "
                                    f"the postpone bucket {POSTPONE_BUCKET})")
        if not 1 <= r.count <= MAX_SEQUENCES_PER_RANGE:
            raise InvalidInputError(f"ranges[{i}]: count {r.count} must be 1 to {MAX_SEQUENCES_PER_RANGE}")
        key = (bytes(r.partition), r.bucket)
        if key in counts:
            raise InvalidInputError(f"ranges[{i}]: bucket {r.bucket} of that partition is named twice")
        counts[key] = r.count
    return counts


def expire_options(request: catalog_pb2.ExpireSnapshotsRequest) -> dict[str, int | None]:
    """The retention options an ExpireSnapshots request sets (None: the table's own); none may be negative."""
    opt = {"retain_min": request.retain_min if request.HasField("retain_min") else None,
           "retain_max": request.retain_max if request.HasField("retain_max") else None,
           "time_retained_ms": request.time_retained_ms if request.HasField("time_retained_ms") else None,
           "max_deletes": request.max_deletes if request.HasField("max_deletes") else None}
    for name, value in opt.items():
        if value is not None and value < 0:
            raise InvalidInputError(f"{name} {value} must not be negative")
    return opt


def partition_keys(request: catalog_pb2.AssignBucketsRequest) -> list[tuple[bytes, np.ndarray]]:
    """The (partition, key hashes) of an AssignBuckets request; InvalidInputError when there are none, too many,
    or a partition twice."""
    total = sum(len(p.key_hashes) for p in request.partitions)
    if not 1 <= total <= MAX_KEY_HASHES:
        raise InvalidInputError(f"the request has {total} key hashes; send 1 to {MAX_KEY_HASHES}")
    seen: set[bytes] = set()
    out = []
    for i, p in enumerate(request.partitions):
        if p.partition in seen:
            raise InvalidInputError(f"partitions[{i}]: that partition is named twice")
        seen.add(p.partition)
        out.append((bytes(p.partition), np.fromiter(p.key_hashes, np.int32, len(p.key_hashes))))
    return out
