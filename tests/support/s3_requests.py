"""Counting the requests a piece of lsmlake sends to the local S3 server, from the server's own access log.

moto's server logs every request it answers as a werkzeug access-log line (`"PUT /lake/wh/t/snapshot/snapshot-1
HTTP/1.1" 200 -`, coloured by status when werkzeug thinks the output is a terminal). The line is written when the
answer's status line is sent, so by the time a client call returns, its requests are in the log: `S3RequestLog.mark()`
before the work and `since(mark)` after it give exactly the requests the work caused (with their status), as long as
nothing else talks to the server meanwhile (`since` can also keep only the keys below a warehouse prefix).
"""

from __future__ import annotations

import collections
import os
import re
import urllib.parse
from dataclasses import dataclass

_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_LINE = re.compile(r'"([A-Z]+) (\S+) HTTP/[0-9.]+" (\d{3}) ')


@dataclass(frozen=True)
class S3Request:
    """One request as the server logged it: method, bucket/key path, query parameters and the answer's status."""

    method: str
    path: str
    query: dict[str, str]
    status: int

    @property
    def kind(self) -> str:
        """What the request does, as S3 names it (a failed HEAD or GET gets its status: `HEAD 404`)."""
        q = self.query
        if self.method == "GET" and "list-type" in q:
            return "LIST"
        if self.method == "POST" and "uploads" in q:
            return "CREATE_MULTIPART"
        if self.method == "POST" and "uploadId" in q:
            return "COMPLETE_MULTIPART"
        if self.method == "PUT" and "partNumber" in q:
            return "UPLOAD_PART"
        if self.method == "POST" and "delete" in q:
            return "DELETE_OBJECTS"
        if self.method in ("HEAD", "GET") and self.status >= 300:
            return f"{self.method} {self.status}"
        return self.method

    @property
    def key(self) -> str:
        """The object key (the bucket left off), or for a listing its prefix."""
        if self.kind == "LIST":
            return self.query.get("prefix", "")
        return self.path.lstrip("/").partition("/")[2]


class S3RequestLog:
    """The access log of a moto server, read from a byte offset on."""

    def __init__(self, path: str) -> None:
        if not path:
            raise ValueError("the S3 server keeps no log file (S3Server.log_path is empty)")
        self.path = path

    def mark(self) -> int:
        """Where the log ends now: the requests made after this call are `since(mark)`."""
        return os.path.getsize(self.path)

    def since(self, mark: int, prefix: str = "") -> list[S3Request]:
        """The requests logged after `mark`, in log order; with `prefix`, only those whose key (or listing
        prefix) lies below it (e.g. a warehouse's `wh-abc/`)."""
        with open(self.path, "rb") as f:
            f.seek(mark)
            text = f.read().decode("utf-8", errors="replace")
        out = []
        for line in text.splitlines():
            m = _LINE.search(_ANSI.sub("", line))
            if m is None:
                continue
            method, target, status = m.group(1), m.group(2), int(m.group(3))
            split = urllib.parse.urlsplit(target)
            query = dict(urllib.parse.parse_qsl(split.query, keep_blank_values=True))
            request = S3Request(method, urllib.parse.unquote(split.path), query, status)
            if prefix and not request.key.startswith(prefix):
                continue
            out.append(request)
        return out


def count_by_kind(requests: list[S3Request]) -> dict[str, int]:
    """How many requests of each kind (`S3Request.kind`)."""
    return dict(collections.Counter(r.kind for r in requests))


def describe(requests: list[S3Request]) -> str:
    """One line per request (kind and key), for an assertion message that shows what was sent."""
    return "\n".join(f"  {r.kind:20s} {r.key}" for r in requests)
