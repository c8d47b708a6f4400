"""`--where` and `--partition` of `lake scan` and `lake delete`, as one predicate of the library.

`--where` takes the predicate language every layer takes (`lsmlake.format.predicate_text`):
`dt = '2024-01-01' AND (id < 3 OR id IS NULL)`; `COLUMN=VALUE` is a term of it. Several `--where`, and each
`--partition KEY=VALUE`, are ANDed.
"""

from __future__ import annotations

from collections.abc import Sequence

from lsmlake.cli.errors import CliError
from lsmlake.errors import InvalidInputError
from lsmlake.format.predicate import Predicate
from lsmlake.format.predicate_text import parse_filter
from lsmlake.table.file_store_table import FileStoreTable


def where_predicate(table: FileStoreTable, wheres: Sequence[str],
                    partition: Sequence[tuple[str, str]] = ()) -> Predicate | None:
    """The AND of every `--where` text and `--partition` pair, with literals typed like their columns; None
    when none is given. CliError naming the text that does not parse."""
    from lsmlake.cli.local_backend import partition_filter

    parts: list[Predicate] = []
    schema = table.schema.arrow_schema
    for text in wheres:
        try:
            parts.append(parse_filter(text, schema))
        except InvalidInputError as e:
            raise CliError(f"--where {text!r}: {e}") from None
    selected = partition_filter(table, partition)
    if selected is not None:
        parts.append(Predicate.of(selected))
    if not parts:
        return None
    combined = parts[0]
    for p in parts[1:]:
        combined = combined & p
    return combined
