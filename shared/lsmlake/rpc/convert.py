"""Conversions between the protobuf messages of `lsmlake.v1` and lsmlake's value types; no logic."""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from typing import Any

import pyarrow as pa

from lsmlake.catalog.commit.request import COMMIT_KINDS, CommitRequest
from lsmlake.catalog.filesystem import check_name
from lsmlake.catalog.health import TableHealth
from lsmlake.catalog.timeline import PlanDetail, PlanUnit, check_plan_state
from lsmlake.errors import InvalidInputError
from lsmlake.format.binary_row import deserialize_row
from lsmlake.format.data_file_meta import FILE_SOURCE_APPEND, FILE_SOURCE_COMPACT, DataFileMeta, SimpleStats
from lsmlake.format.data_file_writer import bucket_dir
from lsmlake.format.deletion_vector import DvRange
from lsmlake.format.index_manifest import IndexEntry
from lsmlake.format.partition import partition_value_string
from lsmlake.format.predicate import Term
from lsmlake.format.snapshot import APPEND, COMPACT, OVERWRITE, Snapshot
from lsmlake.metastore import ABANDONED, COMPLETED, PLAN_STATES, ROLLED_BACK, CompactionPlan
from lsmlake.proto_gen.lsmlake.v1 import catalog_pb2, common_pb2
from lsmlake.table.file_store_table import FileStoreTable
from lsmlake.table.scan import Split
from lsmlake.table.schema_change import AddColumn, RenameColumn, SchemaChange, SetOption
from lsmlake.table.write import CommitMessage

KIND_TO_PROTO = {APPEND: common_pb2.COMMIT_KIND_APPEND, COMPACT: common_pb2.COMMIT_KIND_COMPACT,
                 OVERWRITE: common_pb2.COMMIT_KIND_OVERWRITE, "ANALYZE": common_pb2.COMMIT_KIND_ANALYZE}
KIND_FROM_PROTO = {v: k for k, v in KIND_TO_PROTO.items()}
_SOURCE_TO_PROTO = {None: common_pb2.FILE_SOURCE_UNSPECIFIED, FILE_SOURCE_APPEND: common_pb2.FILE_SOURCE_APPEND,
                    FILE_SOURCE_COMPACT: common_pb2.FILE_SOURCE_COMPACT}
_SOURCE_FROM_PROTO = {v: k for k, v in _SOURCE_TO_PROTO.items()}
_GLOBAL_INDEX_KEYS = ("_ROW_RANGE_START", "_ROW_RANGE_END", "_INDEX_FIELD_ID")


def table_id(ident: common_pb2.TableIdentifier) -> str:
    """`db.table` after checking both names (a name can never escape the warehouse folder)."""
    return f"{check_name(ident.database, 'database')}.{check_name(ident.table, 'table')}"


# -- statistics and data files -----------------------------------------------------------------

def stats_to_proto(s: SimpleStats) -> common_pb2.SimpleStats:
    out = common_pb2.SimpleStats(min_values=s.min_values, max_values=s.max_values)
    if s.null_counts is not None:
        out.null_counts.counts.extend(-1 if c is None else c for c in s.null_counts)
    return out


def stats_from_proto(p: common_pb2.SimpleStats) -> SimpleStats:
    counts = (tuple(None if c < 0 else c for c in p.null_counts.counts) if p.HasField("null_counts") else None)
    return SimpleStats(p.min_values, p.max_values, counts)


def file_to_proto(f: DataFileMeta) -> common_pb2.DataFileMeta:
    out = common_pb2.DataFileMeta(
        file_name=f.file_name, file_size=f.file_size, row_count=f.row_count, min_key=f.min_key, max_key=f.max_key,
        key_stats=stats_to_proto(f.key_stats), value_stats=stats_to_proto(f.value_stats),
        min_sequence_number=f.min_sequence_number, max_sequence_number=f.max_sequence_number,
        schema_id=f.schema_id, level=f.level, extra_files=list(f.extra_files),
        file_source=_SOURCE_TO_PROTO.get(f.file_source, common_pb2.FILE_SOURCE_UNSPECIFIED))
    if f.creation_time_ms is not None:
        out.creation_time_ms = f.creation_time_ms
    if f.delete_row_count is not None:
        out.delete_row_count = f.delete_row_count
    if f.embedded_index is not None:
        out.embedded_index = f.embedded_index
    if f.value_stats_cols is not None:
        out.value_stats_cols.values.extend(f.value_stats_cols)
    if f.external_path is not None:
        out.external_path = f.external_path
    if f.first_row_id is not None:
        out.first_row_id = f.first_row_id
    if f.write_cols is not None:
        out.write_cols.values.extend(f.write_cols)
    seqs = f.extra.get("_WRITE_COLS_SEQUENCES")
    if seqs is not None:
        out.write_cols_sequences.values.extend(seqs)
    return out


def file_from_proto(p: common_pb2.DataFileMeta) -> DataFileMeta:
    extra: dict[str, Any] = {}
    if p.HasField("write_cols_sequences"):
        extra["_WRITE_COLS_SEQUENCES"] = list(p.write_cols_sequences.values)
    return DataFileMeta(
        file_name=p.file_name, file_size=p.file_size, row_count=p.row_count, min_key=p.min_key, max_key=p.max_key,
        key_stats=stats_from_proto(p.key_stats), value_stats=stats_from_proto(p.value_stats),
        min_sequence_number=p.min_sequence_number, max_sequence_number=p.max_sequence_number,
        schema_id=p.schema_id, level=p.level, extra_files=tuple(p.extra_files),
        creation_time_ms=p.creation_time_ms if p.HasField("creation_time_ms") else None,
        delete_row_count=p.delete_row_count if p.HasField("delete_row_count") else None,
        embedded_index=p.embedded_index if p.HasField("embedded_index") else None,
        file_source=_SOURCE_FROM_PROTO.get(p.file_source),
        value_stats_cols=tuple(p.value_stats_cols.values) if p.HasField("value_stats_cols") else None,
        external_path=p.external_path if p.HasField("external_path") else None,
        first_row_id=p.first_row_id if p.HasField("first_row_id") else None,
        write_cols=tuple(p.write_cols.values) if p.HasField("write_cols") else None,
        extra=extra)


# -- index files -------------------------------------------------------------------------------

def index_to_proto(e: IndexEntry) -> common_pb2.IndexFile:
    out = common_pb2.IndexFile(index_type=e.index_type, file_name=e.file_name, file_size=e.file_size,
                               row_count=e.row_count)
    if e.dv_ranges is not None:
        out.deletion_vector_ranges.SetInParent()
        for r in e.dv_ranges:
            dv = out.deletion_vector_ranges.ranges.add(data_file_name=r.file_name, offset=r.offset, length=r.length)
            if r.cardinality is not None:
                dv.cardinality = r.cardinality
    if e.external_path is not None:
        out.external_path = e.external_path
    g = e.global_index
    if g is not None:
        gi = out.global_index
        gi.row_range_start, gi.row_range_end, gi.index_field_id = (g[k] for k in _GLOBAL_INDEX_KEYS)
        if g.get("_EXTRA_FIELD_IDS") is not None:
            gi.extra_field_ids.values.extend(g["_EXTRA_FIELD_IDS"])
        if g.get("_INDEX_META") is not None:
            gi.index_meta = g["_INDEX_META"]
        if g.get("_SOURCE_META") is not None:
            gi.source_meta = g["_SOURCE_META"]
    return out


def index_from_proto(p: common_pb2.IndexFile, partition: bytes, bucket: int) -> IndexEntry:
    ranges = None
    if p.HasField("deletion_vector_ranges"):
        ranges = tuple(DvRange(r.data_file_name, r.offset, r.length,
                               r.cardinality if r.HasField("cardinality") else None)
                       for r in p.deletion_vector_ranges.ranges)
    g: dict[str, Any] | None = None
    if p.HasField("global_index"):
        gi = p.global_index
        g = {"_ROW_RANGE_START": gi.row_range_start, "_ROW_RANGE_END": gi.row_range_end,
             "_INDEX_FIELD_ID": gi.index_field_id,
             "_EXTRA_FIELD_IDS": list(gi.extra_field_ids.values) if gi.HasField("extra_field_ids") else None,
             "_INDEX_META": gi.index_meta if gi.HasField("index_meta") else None,
             "_SOURCE_META": gi.source_meta if gi.HasField("source_meta") else None}
    return IndexEntry(partition, bucket, p.index_type, p.file_name, p.file_size, p.row_count, ranges,
                      p.external_path if p.HasField("external_path") else None, g)


# -- file changes ------------------------------------------------------------------------------

def changes_from_proto(p: common_pb2.FileChanges) -> CommitMessage:
    return CommitMessage(
        partition=p.partition, bucket=p.bucket, total_buckets=p.total_buckets,
        new_files=[file_from_proto(f) for f in p.new_files],
        deleted_files=[file_from_proto(f) for f in p.deleted_files],
        changelog_files=[file_from_proto(f) for f in p.changelog_files],
        new_index_files=[index_from_proto(i, p.partition, p.bucket) for i in p.new_index_files],
        deleted_index_files=[index_from_proto(i, p.partition, p.bucket) for i in p.deleted_index_files])


def changes_to_proto(m: CommitMessage) -> common_pb2.FileChanges:
    return common_pb2.FileChanges(
        partition=m.partition, bucket=m.bucket, total_buckets=m.total_buckets,
        new_files=[file_to_proto(f) for f in m.new_files],
        deleted_files=[file_to_proto(f) for f in m.deleted_files],
        changelog_files=[file_to_proto(f) for f in m.changelog_files],
        new_index_files=[index_to_proto(e) for e in m.new_index_files],
        deleted_index_files=[index_to_proto(e) for e in m.deleted_index_files])


# -- commits -----------------------------------------------------------------------------------

def commit_kind(value: common_pb2.CommitKind.ValueType) -> str:
    """The lsmlake kind of a commit's `kind`; InvalidInputError unless it is one a client may commit."""
    kind = KIND_FROM_PROTO.get(value)
    if kind not in COMMIT_KINDS:
        name = common_pb2.CommitKind.Name(value) if value in common_pb2.CommitKind.values() else str(value)
        raise InvalidInputError(f"kind {name} "
                                "is not accepted: use COMMIT_KIND_APPEND, COMMIT_KIND_COMPACT or COMMIT_KIND_OVERWRITE")
    return kind


def commit_from_proto(request: catalog_pb2.CommitRequest) -> CommitRequest:
    kind = commit_kind(request.kind)  # refused first, as no other field means anything without it
    return CommitRequest(
        table_id=table_id(request.table), kind=kind, commit_user=request.commit_user,
        identifier=request.commit_identifier, changes=[changes_from_proto(c) for c in request.changes],
        properties=dict(request.properties), request_ids=list(request.request_ids), table_uuid=request.table_uuid,
        overwrite_all=request.overwrite_all_partitions, overwrite_partitions=list(request.overwrite_partitions))


def completion_from_proto(request: catalog_pb2.CompleteCompactionRequest) -> CommitRequest:
    """The COMPACT commit of a compaction plan's result."""
    return CommitRequest(
        table_id=table_id(request.table), kind=COMPACT, commit_user=request.commit_user,
        identifier=request.commit_identifier, changes=[changes_from_proto(c) for c in request.changes],
        properties=dict(request.properties))


# -- compaction plans ----------------------------------------------------------------------------

_FINAL_STATES = (COMPLETED, ROLLED_BACK, ABANDONED)


def state_to_proto(state: str) -> catalog_pb2.CompactionPlanState.ValueType:
    return catalog_pb2.CompactionPlanState.Value(f"COMPACTION_PLAN_STATE_{state}")


def state_from_proto(value: catalog_pb2.CompactionPlanState.ValueType) -> str:
    name = catalog_pb2.CompactionPlanState.Name(value) if value in catalog_pb2.CompactionPlanState.values() else ""
    state = name.removeprefix("COMPACTION_PLAN_STATE_")
    if state not in PLAN_STATES:
        raise InvalidInputError(f"plan state {value} is not one of {', '.join(PLAN_STATES)}")
    return check_plan_state(state)


def unit_from_proto(u: catalog_pb2.CompactionUnit) -> PlanUnit:
    return PlanUnit(u.partition, u.bucket, u.total_buckets, [file_from_proto(f) for f in u.input_files],
                    u.output_level, u.drop_delete)


def unit_to_proto(u: PlanUnit) -> catalog_pb2.CompactionUnit:
    return catalog_pb2.CompactionUnit(partition=u.partition, bucket=u.bucket, total_buckets=u.total_buckets,
                                      input_files=[file_to_proto(f) for f in u.input_files],
                                      output_level=u.output_level, drop_delete=u.drop_delete)


class ProtoPlanCodec:
    """A plan's detail as the bytes of a `CompactionPlan` message holding its units (the form clients get)."""

    @staticmethod
    def encode(detail: PlanDetail) -> bytes:
        return catalog_pb2.CompactionPlan(
            units=[unit_to_proto(u) for u in detail.units], full=detail.full,
            base_snapshot_id=detail.base_snapshot_id, output_file_prefix=detail.output_file_prefix,
        ).SerializeToString()

    @staticmethod
    def decode(data: bytes) -> PlanDetail:
        p = catalog_pb2.CompactionPlan.FromString(data)
        return PlanDetail([unit_from_proto(u) for u in p.units], p.full, p.base_snapshot_id, p.output_file_prefix)


def plan_to_proto(plan: CompactionPlan) -> catalog_pb2.CompactionPlan:
    """The protobuf plan: its units from the stored detail, its life from the store's columns, its own table (a
    listing of every table's plans has no request table)."""
    out = catalog_pb2.CompactionPlan.FromString(plan.detail)
    out.plan_id = str(plan.plan_id)
    database, _, table = plan.table_id.partition(".")
    out.table.database, out.table.table = database, table
    out.state = state_to_proto(plan.state)
    out.owner = plan.owner or ""
    out.attempts = plan.attempts
    out.reason = plan.reason or ""
    if plan.snapshot_id is not None:
        out.committed_snapshot_id = plan.snapshot_id
    out.requested_at_ms = plan.created_ms
    out.started_at_ms = plan.started_ms or 0
    out.finished_at_ms = plan.updated_ms if plan.state in _FINAL_STATES else 0
    return out


# -- snapshots, splits, tables -----------------------------------------------------------------

def snapshot_to_proto(s: Snapshot) -> common_pb2.Snapshot:
    out = common_pb2.Snapshot(
        id=s.id, schema_id=s.schema_id, commit_user=s.commit_user,
        commit_kind=KIND_TO_PROTO.get(s.commit_kind, common_pb2.COMMIT_KIND_UNSPECIFIED),
        commit_identifier=s.commit_identifier, time_millis=s.time_millis, total_record_count=s.total_record_count,
        delta_record_count=s.delta_record_count, properties=dict(s.properties or {}))
    if s.changelog_record_count is not None:
        out.changelog_record_count = s.changelog_record_count
    if s.watermark is not None:
        out.watermark = s.watermark
    return out


def split_from_proto(p: common_pb2.Split, table: FileStoreTable) -> Split:
    part_types = table.schema.types_of(table.schema.partition_keys)
    dv = index_from_proto(p.deletion_vectors, p.partition, p.bucket) if p.HasField("deletion_vectors") else None
    return Split(p.partition, tuple(deserialize_row(p.partition, part_types)), p.bucket, p.total_buckets,
                 tuple(file_from_proto(f) for f in p.files), p.snapshot_id, p.raw_convertible, dv)


def split_to_proto(table: FileStoreTable, s: Split) -> common_pb2.Split:
    schema = table.schema
    names = list(schema.partition_keys)
    types = schema.types_of(names)
    values = {}
    for name, t, v in zip(names, types, s.partition_values, strict=True):
        text = partition_value_string(v, t)
        if text is not None:
            values[name] = text
    ppath = schema.partition_dir(s.partition_values)
    out = common_pb2.Split(
        partition=s.partition, partition_values=values, bucket=s.bucket, total_buckets=s.total_buckets,
        bucket_path=bucket_dir("", ppath, s.bucket).lstrip("/"), snapshot_id=s.snapshot_id,
        files=[file_to_proto(f) for f in s.files], raw_convertible=s.raw_convertible)
    if s.dv_index is not None:
        out.deletion_vectors.CopyFrom(index_to_proto(s.dv_index))
    return out


def table_to_proto(table: FileStoreTable, database: str, name: str) -> catalog_pb2.TableInfo:
    schema = table.schema
    out = catalog_pb2.TableInfo(
        table=common_pb2.TableIdentifier(database=database, table=name), schema_id=schema.id,
        columns=[catalog_pb2.Column(name=f.name, type=f.type.sql(), comment=f.description or "", field_id=f.id)
                 for f in schema.fields],
        primary_keys=list(schema.primary_keys), partition_keys=list(schema.partition_keys),
        options=dict(schema.options), comment=schema.comment or "",
        # with its scheme (another process cannot open a bare `bucket/key`), never with credentials
        location=table.io.uri(table.path), table_uuid=table.table_uuid)
    latest = table.snapshots.latest_id()
    if latest is not None:
        out.latest_snapshot_id = latest
    return out


# -- filters -----------------------------------------------------------------------------------

_OPS = {catalog_pb2.PREDICATE_OP_EQ: "=", catalog_pb2.PREDICATE_OP_NOT_EQ: "!=", catalog_pb2.PREDICATE_OP_LT: "<",
        catalog_pb2.PREDICATE_OP_LE: "<=", catalog_pb2.PREDICATE_OP_GT: ">", catalog_pb2.PREDICATE_OP_GE: ">=",
        catalog_pb2.PREDICATE_OP_IN: "in", catalog_pb2.PREDICATE_OP_IS_NULL: "is_null",
        catalog_pb2.PREDICATE_OP_IS_NOT_NULL: "is_not_null"}


_OP_PROTOS = {op: proto for proto, op in _OPS.items()}


def term_to_proto(t: Term) -> catalog_pb2.PredicateTerm | None:
    """The PlanScan form of a term, or None when a literal has no exact text form for the catalog."""
    out = catalog_pb2.PredicateTerm(column=t.column, op=_OP_PROTOS[t.op])
    if t.op in ("is_null", "is_not_null"):
        return out
    values = list(t.value) if t.op == "in" else [t.value]
    texts = []
    for v in values:
        if isinstance(v, bool) or not isinstance(v, (int, str, dt.date)) or isinstance(v, dt.datetime):
            return None  # floats, decimals, timestamps: only filter rows after the read
        texts.append(v.isoformat() if isinstance(v, dt.date) else str(v))
    if t.op == "in":
        out.values.extend(texts)
    else:
        out.value = texts[0]
    return out


def _literal(text: str, arrow_type: pa.DataType, column: str) -> Any:
    try:
        return pa.scalar(text).cast(arrow_type).as_py()
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        raise InvalidInputError(f"filter value {text!r} is not a valid {arrow_type} for column {column!r}") from None


def terms_from_proto(table: FileStoreTable, terms: Sequence[catalog_pb2.PredicateTerm]) -> list[Term]:
    """Filter terms with their literals parsed by the column's type."""
    schema = table.schema.arrow_schema
    out = []
    for t in terms:
        if t.column not in schema.names:
            raise InvalidInputError(f"filter column {t.column!r} is not a column of table {table.identifier}")
        if t.op not in _OPS:
            raise InvalidInputError(f"filter on {t.column!r} has no valid operator")
        op, typ = _OPS[t.op], schema.field(t.column).type
        if op == "in":
            out.append(Term(t.column, op, [_literal(v, typ, t.column) for v in t.values]))
        elif op in ("is_null", "is_not_null"):
            out.append(Term(t.column, op))
        else:
            out.append(Term(t.column, op, _literal(t.value, typ, t.column)))
    return out


def schema_change_to_proto(change: SchemaChange) -> catalog_pb2.SchemaChange:
    """One change of an AlterTable request (the service reads it back in `catalog_svc.requests`)."""
    if isinstance(change, AddColumn):
        add = catalog_pb2.AddColumn(name=change.name, type=change.type_text, comment=change.comment or "")
        return catalog_pb2.SchemaChange(add_column=add)
    if isinstance(change, RenameColumn):
        return catalog_pb2.SchemaChange(rename_column=catalog_pb2.RenameColumn(old_name=change.old_name,
                                                                               new_name=change.new_name))
    if isinstance(change, SetOption):
        return catalog_pb2.SchemaChange(set_option=catalog_pb2.SetOption(key=change.key, value=change.value))
    return catalog_pb2.SchemaChange(remove_option=catalog_pb2.RemoveOption(key=change.key))


def health_to_proto(h: TableHealth, with_buckets: bool) -> catalog_pb2.TableHealth:
    """A table's health (`lsmlake.catalog.health`); partition values as their directory text (null: empty)."""
    db, _, name = h.table.partition(".")
    out = catalog_pb2.TableHealth(
        table=common_pb2.TableIdentifier(database=db, table=name), score=h.score, stalled=h.stalled, lag_ms=h.lag_ms,
        max_sorted_runs=h.max_sorted_runs, stop_trigger=h.stop_trigger, level0_files=h.level0_files,
        pending_plans=h.pending_plans, inflight_plans=h.inflight_plans, oldest_plan_age_ms=h.oldest_plan_age_ms,
        snapshot_id=h.snapshot_id, penalties=dict(h.penalties), error=h.error or "", severity=h.severity,
        reasons=[catalog_pb2.HealthReason(cause=r.cause, detail=r.detail) for r in h.reasons],
        due_buckets=h.due_buckets, compaction_trigger=h.compaction_trigger, max_small_files=h.max_small_files,
        min_file_num=h.min_file_num, max_file_num=h.max_file_num, primary_key=h.primary_key)
    if with_buckets:
        out.buckets.extend(catalog_pb2.BucketHealth(
            partition=b.partition, partition_values=[partition_value_string(v, t) or ""
                                                     for v, t in zip(b.partition_values, h.partition_types,
                                                                     strict=True)],
            bucket=b.bucket, sorted_runs=b.sorted_runs, level0_files=b.level0_files, files=b.files,
            small_files=b.small_files, size_bytes=b.size_bytes, rows=b.rows, deleted_rows=b.deleted_rows,
            lag_ms=b.lag_ms(h.now_ms), due=b.due) for b in h.buckets)
    return out
