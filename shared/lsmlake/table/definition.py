"""A new table's definition, validated whole: the format's rules and its merge engine's.

The format (`format.schema.new_table_schema`) checks columns, keys and options; whether the merge engine's
options make sense (sequence fields, sequence groups, aggregate functions) needs the merge tree, which sits
above the format, so that check is added here, where tables are defined.
"""

from __future__ import annotations

from lsmlake.format.schema import TableSchema, new_table_schema
from lsmlake.format.types import DataField
from lsmlake.mergetree.merge.factory import merge_function_for


def define_table(fields: tuple[DataField, ...], partition_keys: list[str] | tuple[str, ...] = (),
                 primary_keys: list[str] | tuple[str, ...] = (), options: dict[str, str] | None = None,
                 comment: str | None = None) -> TableSchema:
    """The schema-0 of a new table; raises InvalidInputError naming the problem (nothing is written)."""
    schema = new_table_schema(fields, partition_keys, primary_keys, options, comment)
    if schema.primary_keys:
        merge_function_for(schema)  # validates merge-engine, sequence fields, aggregate functions
    return schema
