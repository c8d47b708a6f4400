"""The text form of a predicate, as every layer takes it (Spark's `filter` option, `Client.scan`, `lake --where`,
the catalog's `PlanScan`): `dt = '2024-01-02' AND (id < 3 OR id IS NULL)`.

    filter := disjunct (OR disjunct)*        disjunct := atom (AND atom)*
    atom   := '(' filter ')' | column OP literal | column IN (literal, ...) | column IS [NOT] NULL

OP is one of = == != <> < <= > >=; AND binds tighter than OR; keywords are case-insensitive; a column is a bare
name or in double quotes (`"order"`, with `""` for a quote inside); literals are numbers, `true`/`false` or text in
single quotes (`'it''s'`), parsed by the column's type, so `d < '2024-02-01'` on a date column compares dates. A time
or timestamp literal keeps every fraction digit its column holds (nine on TIMESTAMP(9)); one finer than the column
is refused, as no value of the column could equal it.

Where it is safe (the deletion-vector rules): partition terms skip partitions, key terms skip files
by their key statistics, and every term filters rows only after the merge, so a filtered read
returns exactly the rows of an unfiltered read that pass.
"""

from __future__ import annotations

import pyarrow as pa

from lsmlake.format.predicate import Predicate


def parse_filter(text: str, schema: pa.Schema) -> Predicate:
    """The predicate of a filter text, with literals typed like their columns; an empty text accepts all."""
    return Predicate.parse(text, schema)
