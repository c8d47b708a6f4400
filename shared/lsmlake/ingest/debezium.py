"""Debezium change events: which rows (and row kinds) one event stands for.

An event is `{"op", "before", "after", ...}`, wrapped as `{"schema": ..., "payload": {...}}` when
the JsonConverter has schemas enabled. `c` (create) and `r` (snapshot read) insert the after
image, `d` deletes the before image, `u` updates: -U(before) +U(after) for tables that need
retractions, +U(after) alone otherwise (see `decode.needs_retractions`). The fields of `before` and
`after` must be columns of the table (`known_fields`); the envelope's own (`source`, `ts_ms`,
`transaction`, `schema`, ...) are not looked at.
"""

from __future__ import annotations

from typing import Any

from lsmlake.format.row_kind import DELETE, INSERT, UPDATE_AFTER, UPDATE_BEFORE
from lsmlake.ingest.known_fields import KnownFields
from lsmlake.ingest.values import BadMessage, Hint, show

OPS = ("c", "r", "u", "d")


def json_kind(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    if isinstance(value, dict):
        return "object"
    return "number"


def changes(event: Any, needs_retractions: bool,
            fields: KnownFields) -> tuple[list[tuple[int, dict[str, Any]]], dict[str, Hint]]:
    """The (row kind, row image) pairs of one event, and the field hints of its schema (if any).

    Both images are checked against `fields` when present, also a `before` the rows do not use."""
    if not isinstance(event, dict):
        raise BadMessage(f"expected a JSON object, got {json_kind(event)}")
    envelope, schema = event, None
    if "op" not in event and "payload" in event:
        envelope, schema = event["payload"], event.get("schema")
        if not isinstance(envelope, dict):
            raise BadMessage(f'"payload" must be a JSON object, got {json_kind(envelope)}')
    op = envelope.get("op")
    if op is None:
        raise BadMessage('not a Debezium change event: no "op" field')
    before, after = _image(envelope, "before"), _image(envelope, "after")
    if op in ("c", "r"):
        rows = [(INSERT, _need(after, op, "after"))]
    elif op == "u":
        after = _need(after, op, "after")
        if needs_retractions:
            if before is None:
                raise BadMessage('update has no "before" image, which this table needs to retract the old row '
                                 "(with PostgreSQL, set REPLICA IDENTITY FULL)")
            rows = [(UPDATE_BEFORE, before), (UPDATE_AFTER, after)]
        else:
            rows = [(UPDATE_AFTER, after)]
    elif op == "d":
        rows = [(DELETE, _need(before, op, "before"))]
    elif op == "t":
        raise BadMessage('op "t" (truncate) is not supported: it cannot be applied row by row')
    else:
        raise BadMessage(f"unknown op {show(op)}; Debezium ops are c, r, u and d")
    if before is not None:
        fields.check(before, "before")
    if after is not None:
        fields.check(after, "after")
    return rows, hints_of(schema)


def _image(envelope: dict[str, Any], name: str) -> dict[str, Any] | None:
    image = envelope.get(name)
    if image is not None and not isinstance(image, dict):
        raise BadMessage(f'"{name}" must be a JSON object or null, got {json_kind(image)}')
    return image


def _need(image: dict[str, Any] | None, op: str, name: str) -> dict[str, Any]:
    if image is None:
        raise BadMessage(f'op "{op}" has no "{name}" image')
    return image


def hints_of(schema: Any) -> dict[str, Hint]:
    """Field name -> Hint, from the `after` (else `before`) struct of a Kafka Connect schema."""
    if not isinstance(schema, dict):
        return {}
    images = {f.get("field"): f for f in schema.get("fields") or () if isinstance(f, dict)}
    struct = images.get("after") or images.get("before")
    if not isinstance(struct, dict):
        return {}
    hints = {}
    for f in struct.get("fields") or ():
        if not isinstance(f, dict) or not isinstance(f.get("field"), str):
            continue
        params = f.get("parameters") or {}
        scale = params.get("scale") if isinstance(params, dict) else None
        try:
            scale = int(scale) if scale is not None else None
        except (TypeError, ValueError):
            scale = None
        hints[f["field"]] = Hint(type=f.get("type"), name=f.get("name"), scale=scale)
    return hints
