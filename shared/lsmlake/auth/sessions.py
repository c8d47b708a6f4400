"""Console sessions: what a browser's cookie stands for, so that the cookie never holds a bearer token.

Logging in to the web console trades a valid token for a random session id (`secrets.token_urlsafe(32)`: 256
bits), and the cookie carries only that id. A session acts as its principal with the role capped at reader
(the console only reads), so a stolen cookie reads what its principal may read and can never write, and it is
no token of the gRPC or REST ports. A session ends

- after `idle_s` without a request (default 30 minutes), or `lifetime_s` after its login however busy
  (default 8 hours);
- at logout (`close`);
- as soon as its token is no longer in the token file, or names another principal: every use checks the token
  again with the `TokenStore`, which reads the file again when it changes (at most once a second);
- when `max_sessions` (default 1000) are open and a new login needs room: expired sessions go first, then the
  oldest login.

To check the token again, a session keeps only its SHA-256 (as the token store does), never the token.

Sessions live in the memory of one catalog replica: a restart ends them all, and a console served by several
replicas (a Kubernetes Service over `catalog.replicas` > 1) needs client-IP session affinity in front of it, or
a request that reaches another replica than the login's is refused and asks for the login again.
"""

from __future__ import annotations

import secrets
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

from lsmlake.auth.roles import Role
from lsmlake.auth.tokens import Principal, TokenStore, digest

IDLE_S = 30 * 60.0
LIFETIME_S = 8 * 3600.0
MAX_SESSIONS = 1000
#: the most a console session may do: the console only reads
SESSION_ROLE = Role.READER


@dataclass
class _Session:
    token_digest: bytes
    principal: Principal  # its role capped at SESSION_ROLE
    opened: float
    used: float


class SessionStore:
    """The open console sessions of this process, by session id."""

    def __init__(self, tokens: TokenStore, *, idle_s: float = IDLE_S, lifetime_s: float = LIFETIME_S,
                 max_sessions: int = MAX_SESSIONS, clock: Callable[[], float] = time.monotonic) -> None:
        if max_sessions < 1:
            raise ValueError(f"max_sessions must be at least 1, got {max_sessions}")
        self.idle_s = idle_s
        self.lifetime_s = lifetime_s
        self.max_sessions = max_sessions
        self._tokens = tokens
        self._clock = clock
        self._lock = threading.Lock()
        self._sessions: OrderedDict[str, _Session] = OrderedDict()  # in the order of their logins

    def open(self, token: str) -> str | None:
        """A new session for a valid token: its id; None when the token is not valid."""
        principal = self._tokens.authenticate(token)
        if principal is None:
            return None
        session_id = secrets.token_urlsafe(32)
        now = self._clock()
        with self._lock:
            for expired in [k for k, s in self._sessions.items() if self._expired(s, now)]:
                del self._sessions[expired]
            while len(self._sessions) >= self.max_sessions:
                self._sessions.popitem(last=False)
            self._sessions[session_id] = _Session(
                digest(token), Principal(principal.name, min(principal.role, SESSION_ROLE)), now, now)
        return session_id

    def principal(self, session_id: str) -> Principal | None:
        """Who a session acts as (reading only); None when there is no such session or it has ended."""
        now = self._clock()
        with self._lock:
            session = self._sessions.get(session_id)
            if session is not None and self._expired(session, now):
                del self._sessions[session_id]
                session = None
        if session is None:
            return None
        # outside the lock: it may read the token file again
        owner = self._tokens.authenticate_digest(session.token_digest)
        if owner is None or owner.name != session.principal.name:
            self.close(session_id)
            return None
        with self._lock:
            session.used = max(session.used, now)
        return session.principal

    def close(self, session_id: str) -> None:
        """End a session (logout); an unknown id is ignored."""
        with self._lock:
            self._sessions.pop(session_id, None)

    def __len__(self) -> int:
        """The sessions held (those that ended unnoticed included, until the next login drops them)."""
        return len(self._sessions)

    def _expired(self, session: _Session, now: float) -> bool:
        return now - session.used >= self.idle_s or now - session.opened >= self.lifetime_s
