"""The dead-letter record: a rejected message, why, and where it came from."""

from __future__ import annotations

import base64
import json


def dead_letter_value(original: bytes | None, reason: str, topic: str, partition: int, offset: int) -> bytes:
    """The JSON value published to the dead-letter topic for one rejected message.

    `original` holds the message value as text when it is UTF-8, else as base64; `encoding` says
    which (`utf-8`, `base64`, or null for a null value), so the message can be replayed byte for byte.
    """
    if original is None:
        text, encoding = None, None
    else:
        try:
            text, encoding = original.decode("utf-8"), "utf-8"
        except UnicodeDecodeError:
            text, encoding = base64.b64encode(original).decode("ascii"), "base64"
    record = {"topic": topic, "partition": partition, "offset": offset, "reason": reason,
              "original": text, "encoding": encoding}
    return json.dumps(record, ensure_ascii=False).encode("utf-8")
