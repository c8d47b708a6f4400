"""Builds a table's merge function from its options (options are read and validated here, once)."""

from __future__ import annotations

from typing import Any

from lsmlake.errors import InvalidInputError
from lsmlake.format import options as opts
from lsmlake.format.schema import TableSchema
from lsmlake.mergetree.merge.aggregation import Aggregation
from lsmlake.mergetree.merge.deduplicate import Deduplicate
from lsmlake.mergetree.merge.first_row import FirstRow
from lsmlake.mergetree.merge.merge_function import MergeFunction, Ordering
from lsmlake.mergetree.merge.partial_update import FieldAggregation, PartialUpdate, SequenceGroup

ENGINES = tuple(opts.MergeEngine)


def _truthy(raw: dict[str, str], key: str) -> bool:
    return raw.get(key, "false").strip().lower() == "true"


def _split(text: str) -> tuple[str, ...]:
    return tuple(p.strip() for p in text.split(",") if p.strip())


def ordering_of(schema: TableSchema) -> Ordering:
    o = schema.table_options
    fields = _split(o.get(opts.SEQUENCE_FIELD) or "")
    for f in fields:
        schema.field(f)  # raises on an unknown column
        if f in schema.primary_keys:
            raise InvalidInputError(f"sequence.field {f!r} cannot be a primary-key column")
    order = o.get(opts.SEQUENCE_FIELD_SORT_ORDER)  # raises naming the allowed values
    return Ordering(fields, order == opts.SortOrder.DESCENDING)


def _ignore_delete(schema: TableSchema, engine: str) -> bool:
    raw = schema.options
    return _truthy(raw, "ignore-delete") or _truthy(raw, f"{engine}.ignore-delete")


def _field_options(schema: TableSchema, name: str) -> Any:
    from lsmlake.mergetree.merge.aggregators import FieldAggOptions

    raw = schema.options
    prefix = f"fields.{name}."
    return FieldAggOptions(field_name=name, ignore_retract=_truthy(raw, prefix + "ignore-retract"),
                           delimiter=raw.get(prefix + "list-agg-delimiter", ","),
                           distinct=_truthy(raw, prefix + "distinct"),
                           nested_keys=_split(raw.get(prefix + "nested-key", "")))


def _aggregations(schema: TableSchema, default: str | None,
                  sequence_fields: tuple[str, ...] = ()) -> dict[str, FieldAggregation]:
    from lsmlake.mergetree.merge.aggregators import FUNCTIONS, validate

    out = {}
    for f in schema.fields:
        if f.name in schema.primary_keys:
            if f"fields.{f.name}.aggregate-function" in schema.options:
                raise InvalidInputError(f"primary-key column {f.name!r} cannot have an aggregate function")
            continue
        function = schema.options.get(f"fields.{f.name}.aggregate-function", default)
        if f.name in sequence_fields:
            function = "last_value"  # a sequence field carries the value of the winning row
        if function is None:
            continue
        if function not in FUNCTIONS:
            raise InvalidInputError(f"fields.{f.name}.aggregate-function: unknown function {function!r}; "
                                    f"known: {', '.join(FUNCTIONS)}")
        validate(function, f.type, f.name)
        out[f.name] = FieldAggregation(function, f.type, _field_options(schema, f.name))
    return out


def _sequence_groups(schema: TableSchema) -> list[SequenceGroup]:
    remove = set(_split(schema.options.get("partial-update.remove-record-on-sequence-group", "")))
    groups = []
    seen: set[str] = set()
    for key, value in schema.options.items():
        if not (key.startswith("fields.") and key.endswith(".sequence-group")):
            continue
        seq_fields = _split(key[len("fields."):-len(".sequence-group")])
        members = _split(value)
        for f in seq_fields + members:
            schema.field(f)
            if f in schema.primary_keys:
                raise InvalidInputError(f"{key}: primary-key column {f!r} cannot be in a sequence group")
        for f in members:
            if f in seen:
                raise InvalidInputError(f"field {f!r} is in more than one sequence group")
            seen.add(f)
        groups.append(SequenceGroup(seq_fields, members, any(s in remove for s in seq_fields)))
    unknown = remove - {s for g in groups for s in g.sequence_fields}
    if unknown:
        raise InvalidInputError(f"partial-update.remove-record-on-sequence-group names {sorted(unknown)}, "
                                "which are not sequence fields of any sequence group")
    return groups


def merge_function_for(schema: TableSchema) -> MergeFunction:
    """The table's merge function; raises InvalidInputError naming a bad option."""
    o = schema.table_options
    engine = o.get(opts.MERGE_ENGINE)  # raises naming the allowed values
    keys = list(schema.primary_keys)
    ordering = ordering_of(schema)
    if engine == "deduplicate":
        return Deduplicate(keys, ordering, _ignore_delete(schema, engine))
    if engine == "first-row":
        if ordering.sequence_fields:
            raise InvalidInputError("the first-row merge engine does not take a sequence.field")
        return FirstRow(keys, _ignore_delete(schema, engine))
    if engine == "partial-update":
        return PartialUpdate(
            keys=keys, value_fields=[f.name for f in schema.fields if f.name not in keys], ordering=ordering,
            ignore_delete=_ignore_delete(schema, engine),
            remove_record_on_delete=bool(o.get(opts.PARTIAL_UPDATE_REMOVE_RECORD_ON_DELETE)),
            sequence_groups=_sequence_groups(schema),
            aggregations=_aggregations(schema, o.get(opts.FIELDS_DEFAULT_AGGREGATE_FUNCTION)))
    return Aggregation(keys=keys,
                       aggregations=_aggregations(schema, o.get(opts.FIELDS_DEFAULT_AGGREGATE_FUNCTION)
                                                  or "last_non_null_value", ordering.sequence_fields),
                       ordering=ordering,
                       remove_record_on_delete=bool(o.get(opts.AGGREGATION_REMOVE_RECORD_ON_DELETE)))


def dv_enabled(schema: TableSchema) -> bool:
    return bool(schema.table_options.get(opts.DELETION_VECTORS_ENABLED))


def skips_level0(schema: TableSchema) -> bool:
    """Batch reads skip level-0 files (as Paimon's readers do) of first-row and deletion-vector tables."""
    return schema.is_primary_key_table and (schema.table_options.get(opts.MERGE_ENGINE) == "first-row"
                                            or dv_enabled(schema))
