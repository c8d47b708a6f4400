"""The JSON objects of Paimon's REST catalog API, read into lsmlake's types and written from them.

Field names and shapes follow Paimon's OpenAPI document (`rest-catalog-open-api.yaml`) and what
pypaimon 2.1.0 sends and reads. Reading is strict: a missing or mistyped field is an InvalidInputError
naming it, before anything changes.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from lsmlake.errors import InvalidInputError, LakeError
from lsmlake.format.options import PATH
from lsmlake.format.schema import TableSchema
from lsmlake.format.type_json import type_from_json
from lsmlake.format.types import DataField
from lsmlake.table.schema_change import AddColumn, RemoveOption, RenameColumn, SchemaChange, SetOption

MAX_PAGE = 1000
MAX_FIELDS = 10_000


def obj(doc: Any, where: str) -> dict[str, Any]:
    if not isinstance(doc, dict):
        raise InvalidInputError(f"{where} must be a JSON object")
    return doc


def text(doc: Mapping[str, Any], key: str, where: str) -> str:
    v = doc.get(key)
    if not isinstance(v, str) or not v:
        raise InvalidInputError(f"{where}.{key} must be a non-empty string")
    return v


def string_map(v: Any, where: str) -> dict[str, str]:
    if v is None:
        return {}
    if not isinstance(v, dict) or not all(isinstance(k, str) and isinstance(x, str) for k, x in v.items()):
        raise InvalidInputError(f"{where} must be an object of strings")
    return dict(v)


def string_list(v: Any, where: str) -> list[str]:
    if v is None:
        return []
    if not isinstance(v, list) or not all(isinstance(x, str) for x in v):
        raise InvalidInputError(f"{where} must be a list of strings")
    return list(v)


def identifier_from_json(doc: Any, where: str) -> tuple[str, str]:
    """(database, table) of an `{"database", "object"}` identifier."""
    d = obj(doc, where)
    return text(d, "database", where), text(d, "object", where)


def fields_from_json(v: Any, where: str) -> tuple[DataField, ...]:
    if not isinstance(v, list) or not v or len(v) > MAX_FIELDS:
        raise InvalidInputError(f"{where} must be a list of 1 to {MAX_FIELDS} fields")
    out = []
    for i, f in enumerate(v):
        f = obj(f, f"{where}[{i}]")
        try:
            fid = f["id"]
            if not isinstance(fid, int) or isinstance(fid, bool) or fid < 0:
                raise InvalidInputError(f"id {fid!r} is not a field id")
            name = text(f, "name", f"{where}[{i}]")
            description = f.get("description")
            if description is not None and not isinstance(description, str):
                raise InvalidInputError("description must be a string")
            out.append(DataField(fid, name, type_from_json(f["type"]), description))
        except KeyError as e:
            raise InvalidInputError(f"{where}[{i}]: missing {e}") from None
        except (LakeError, TypeError, ValueError) as e:
            raise InvalidInputError(f"{where}[{i}]: {e}") from None
    return tuple(out)


def schema_to_json(schema: TableSchema) -> dict[str, Any]:
    """The REST `Schema` of a table schema; `path` is the table's location, given beside it, not an option."""
    options = {k: v for k, v in schema.options.items() if k != PATH.key}
    return {"fields": [f.to_json() for f in schema.fields], "partitionKeys": list(schema.partition_keys),
            "primaryKeys": list(schema.primary_keys), "options": options, "comment": schema.comment}


def schema_change_from_json(doc: Any, where: str) -> SchemaChange:
    """One REST `SchemaChange`; the actions lsmlake's alter supports, else InvalidInputError naming the action."""
    d = obj(doc, where)
    action = d.get("action")
    if action == "setOption":
        key, value = text(d, "key", where), d.get("value")
        if not isinstance(value, str):
            raise InvalidInputError(f"{where}.value must be a string")
        return SetOption(key, value)
    if action == "removeOption":
        return RemoveOption(text(d, "key", where))
    if action in ("addColumn", "renameColumn"):
        names = string_list(d.get("fieldNames"), f"{where}.fieldNames")
        if len(names) != 1:
            raise InvalidInputError(f"{where}.fieldNames: name one top-level column (nested columns are not "
                                    "altered here)")
        if action == "renameColumn":
            return RenameColumn(names[0], text(d, "newName", where))
        if d.get("move") is not None:
            raise InvalidInputError(f"{where}: adding a column at a position (move) is not supported; it is "
                                    "added last")
        comment = d.get("comment")
        if comment is not None and not isinstance(comment, str):
            raise InvalidInputError(f"{where}.comment must be a string")
        try:
            type_text = str(type_from_json(d.get("dataType")))
        except (LakeError, TypeError, KeyError, ValueError) as e:
            raise InvalidInputError(f"{where}.dataType: {e}") from None
        return AddColumn(names[0], type_text, comment)
    raise InvalidInputError(f"{where}: action {str(action)[:60]!r} is not supported by this catalog (supported: "
                            "setOption, removeOption, addColumn, renameColumn)")


def page(names: Sequence[str], query: Mapping[str, str], key: str) -> dict[str, Any]:
    """One page of sorted `names` after `pageToken` (the last name of the previous page), at most `maxResults`;
    `nextPageToken` is null on the last page. `<key>NamePattern` filters with SQL LIKE's `%` and `_`."""
    pattern = query.get(f"{key[:-1]}NamePattern") or query.get("namePattern")
    if pattern:
        rx = re.compile("".join(".*" if c == "%" else "." if c == "_" else re.escape(c) for c in pattern))
        names = [n for n in names if rx.fullmatch(n)]
    limit_text = query.get("maxResults") or str(MAX_PAGE)
    if not limit_text.isdigit() or int(limit_text) < 1:
        raise InvalidInputError(f"maxResults {limit_text[:20]!r} must be a positive integer")
    limit = min(int(limit_text), MAX_PAGE)
    token = query.get("pageToken")
    after = [n for n in sorted(names) if token is None or n > token]
    shown = after[:limit]
    return {key: shown, "nextPageToken": shown[-1] if len(after) > limit else None}
