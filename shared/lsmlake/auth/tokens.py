"""Bearer tokens and the principals and roles they stand for, read from a JSON file.

The file (a Kubernetes Secret mounted as a file, or any file readable only by the service)::

    {"tokens": [
      {"principal": "writer-svc", "role": "writer", "sha256": "<64 hex digits: SHA-256 of the token>"},
      {"principal": "alice", "role": "admin", "token": "<the token itself, at least 16 characters>"}
    ]}

Only SHA-256 digests are kept in memory, and a presented token is compared with every digest in
constant time (`hmac.compare_digest`), so neither the file's plaintext tokens nor the timing of a lookup
tell anything about the valid tokens. The file is read again when it changes (checked at most once a
second); a changed file that does not parse is refused with an error in the log and the previous tokens
stay in force.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import os
import threading
import time
from dataclasses import dataclass
from typing import Any

from lsmlake.auth.roles import Role
from lsmlake.errors import InvalidInputError

_log = logging.getLogger(__name__)

MIN_TOKEN_CHARS = 16
MAX_PRINCIPAL_CHARS = 128
_RECHECK_S = 1.0
_ENTRY_KEYS = {"principal", "role", "token", "sha256"}


@dataclass(frozen=True)
class Principal:
    """Who made a call, and the role their token grants."""

    name: str
    role: Role


def digest(token: str) -> bytes:
    """The SHA-256 of a token, as stored."""
    return hashlib.sha256(token.encode()).digest()


def parse_tokens(text: str, source: str = "token file") -> list[tuple[bytes, Principal]]:
    """(digest, principal) pairs of a token file's text; InvalidInputError naming the entry and field."""
    try:
        doc = json.loads(text)
    except ValueError as e:
        raise InvalidInputError(f"{source}: not JSON: {e}") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("tokens"), list) or set(doc) != {"tokens"}:
        raise InvalidInputError(f'{source}: expected an object {{"tokens": [...]}}')
    out: list[tuple[bytes, Principal]] = []
    seen: set[bytes] = set()
    for i, entry in enumerate(doc["tokens"]):
        where = f"{source}: tokens[{i}]"
        out.append(_entry(entry, where))
        if out[-1][0] in seen:
            raise InvalidInputError(f"{where}: the same token appears twice")
        seen.add(out[-1][0])
    return out


def _entry(entry: Any, where: str) -> tuple[bytes, Principal]:
    if not isinstance(entry, dict):
        raise InvalidInputError(f"{where}: expected an object")
    unknown = set(entry) - _ENTRY_KEYS
    if unknown:
        raise InvalidInputError(f"{where}: unknown field(s) {', '.join(sorted(unknown))}")
    name = entry.get("principal")
    if not isinstance(name, str) or not name.strip() or "/" in name or len(name) > MAX_PRINCIPAL_CHARS:
        raise InvalidInputError(f"{where}: 'principal' must be a non-empty string of at most {MAX_PRINCIPAL_CHARS} "
                                "characters without '/' (it namespaces the commit users and request ids it owns)")
    try:
        role_text = entry.get("role")
        role = Role.parse(role_text if isinstance(role_text, str) else "")
    except ValueError as e:
        raise InvalidInputError(f"{where}: 'role': {e}") from None
    token, hexdigest = entry.get("token"), entry.get("sha256")
    if (token is None) == (hexdigest is None):
        raise InvalidInputError(f"{where}: give exactly one of 'token' and 'sha256'")
    if token is not None:
        if not isinstance(token, str) or len(token) < MIN_TOKEN_CHARS or token != token.strip():
            raise InvalidInputError(f"{where}: 'token' must be a string of at least {MIN_TOKEN_CHARS} characters "
                                    "without surrounding spaces")
        return digest(token), Principal(name, role)
    try:
        raw = bytes.fromhex(hexdigest) if isinstance(hexdigest, str) else b""
    except ValueError:
        raw = b""
    if len(raw) != 32:
        raise InvalidInputError(f"{where}: 'sha256' must be 64 hex digits (the SHA-256 of the token)")
    return raw, Principal(name, role)


class TokenStore:
    """The valid tokens of a service, from a token file that may change while the service runs."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._lock = threading.Lock()
        self._entries: list[tuple[bytes, Principal]] = []
        self._stamp: tuple[int, int] | None = None
        self._checked = 0.0
        self._load(initial=True)

    def _load(self, initial: bool = False) -> None:
        try:
            st = os.stat(self.path)
            stamp = (st.st_mtime_ns, st.st_size)
            if stamp == self._stamp:
                return
            with open(self.path, encoding="utf-8") as f:
                entries = parse_tokens(f.read(), self.path)
        except (OSError, InvalidInputError) as e:
            if initial:
                raise InvalidInputError(f"cannot use token file: {e}") from None
            _log.error("token file not reloaded, the previous tokens stay in force: %s", e)
            return
        self._entries, self._stamp = entries, stamp
        _log.info("%s %d token(s) from %s", "loaded" if initial else "reloaded", len(entries), self.path)

    def authenticate(self, token: str) -> Principal | None:
        """The principal of a token; None when it is not valid."""
        return self.authenticate_digest(digest(token))

    def authenticate_digest(self, presented: bytes) -> Principal | None:
        """The principal of the token whose SHA-256 is `presented` (what a session keeps instead of the token)."""
        now = time.monotonic()
        with self._lock:
            if now - self._checked >= _RECHECK_S:
                self._checked = now
                self._load()
            entries = self._entries
        found: Principal | None = None
        for stored, principal in entries:  # no early exit: the time taken does not depend on which entry matched
            if hmac.compare_digest(stored, presented):
                found = principal
        return found

    def __len__(self) -> int:
        return len(self._entries)
