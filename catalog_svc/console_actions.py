"""What the console may change: "compact now" and "full compaction" of a table, for admins only, behind a CSRF check.

Who is an admin: with no token file, everybody (the console, like the gRPC port, checks nobody); a caller with
`Authorization: Bearer <token>` whose token has the admin role; a console session whose login token has the admin
role now (read again from the token file at every post: a token demoted since the login may no longer act). A
session's pages stay reading only (`lsmlake.auth.sessions`): only these posts look past the cap.

CSRF: each form carries a token, an HMAC of the caller's credential (the session id, the bearer token's digest, or
the open console) under a key this process drew at start; a post whose token is missing or wrong is refused, as is
one another site's page sent (`Sec-Fetch-Site`, `Origin`: see the console's login). Another site's page cannot read
the token (the same-origin policy) and so cannot forge the form; a token is no use with another session.

A request asks the catalog's timeline for one REQUESTED plan (`CatalogOperations.request_compaction`, as the
compactor's RequestCompaction does) of every bucket that has something to compact now (or, full, of every bucket),
leaving out buckets whose files a pending plan holds; the compactor that owns the first bucket runs it.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import threading
from collections import OrderedDict
from collections.abc import Mapping

from lsmlake.auth.roles import Role
from lsmlake.auth.tokens import Principal, TokenStore, digest
from lsmlake.catalog.operations import CatalogOperations
from lsmlake.catalog.timeline import PlanUnit
from lsmlake.errors import InvalidInputError, PermissionDeniedError
from lsmlake.format.bucket import POSTPONE_BUCKET
from lsmlake.metastore import PENDING_STATES, CompactionPlan
from lsmlake.table.compact import compaction_history, plan_bucket
from lsmlake.table.postpone import every_bucket

CSRF_FIELD = "csrf"
_OPEN = b"open console"
MAX_LOGINS = 10_000


class Admins:
    """Whose posts may change tables, and the CSRF token of each caller's forms."""

    def __init__(self, tokens: TokenStore | None = None) -> None:
        self.tokens = tokens
        self._key = secrets.token_bytes(32)
        self._lock = threading.Lock()
        self._logins: OrderedDict[str, bytes] = OrderedDict()  # session id -> its login token's digest

    def logged_in(self, session_id: str, token: str) -> None:
        """Remember which token opened a session (its digest only), to check its role at each post."""
        with self._lock:
            self._logins[session_id] = digest(token)
            while len(self._logins) > MAX_LOGINS:  # the session store drops the oldest logins first too
                self._logins.popitem(last=False)

    def logged_out(self, session_id: str) -> None:
        with self._lock:
            self._logins.pop(session_id, None)

    def _credential(self, headers: Mapping[str, str], session_id: str | None) -> bytes:
        auth = headers.get("authorization")
        if auth:
            return b"bearer " + hashlib.sha256(auth.encode()).digest()
        if session_id is not None:
            return b"session " + session_id.encode()
        return _OPEN

    def csrf_token(self, headers: Mapping[str, str], session_id: str | None) -> str:
        """The token the caller's forms carry."""
        return hmac.new(self._key, self._credential(headers, session_id), hashlib.sha256).hexdigest()

    def check_csrf(self, headers: Mapping[str, str], session_id: str | None, sent: str) -> None:
        """PermissionDeniedError unless `sent` is the caller's token."""
        if not sent:
            raise PermissionDeniedError("refused: the form has no CSRF token (post it from the console's own page); "
                                        "nothing changed")
        if not hmac.compare_digest(sent.encode(), self.csrf_token(headers, session_id).encode()):
            raise PermissionDeniedError("refused: the form's CSRF token is not this session's (reload the page and "
                                        "post it again); nothing changed")

    def is_admin(self, principal: Principal | None, headers: Mapping[str, str], session_id: str | None) -> bool:
        """Whether the caller may post actions (see the module)."""
        if self.tokens is None:
            return principal is None or principal.role >= Role.ADMIN
        if principal is None:
            return False
        if headers.get("authorization"):
            return principal.role >= Role.ADMIN
        if session_id is None:
            return False
        with self._lock:
            token_digest = self._logins.get(session_id)
        if token_digest is None:
            return False
        owner = self.tokens.authenticate_digest(token_digest)
        return owner is not None and owner.name == principal.name and owner.role >= Role.ADMIN


def request_compaction(operations: CatalogOperations, tid: str, full: bool) -> CompactionPlan:
    """One REQUESTED plan of the table's buckets that have something to compact (full: every bucket's files into
    the top level); InvalidInputError when there is none (say why)."""
    table = operations.get_table(tid)
    snap = table.latest_snapshot()
    if snap is None:
        raise InvalidInputError(f"{tid} has no snapshot yet: nothing to compact")
    held = {f for p in operations.list_compaction_plans(tid, PENDING_STATES) for f in p.input_files}
    history = compaction_history(table, latest=snap)
    units: list[PlanUnit] = []
    busy = 0
    for split in sorted(every_bucket(table, snap), key=lambda s: (s.partition, s.bucket)):
        if split.bucket == POSTPONE_BUCKET:  # placed by the compactor's own rounds, not by a plan of levels
            continue
        unit = plan_bucket(table, split, full, history)
        if unit is None or not unit.files:
            continue
        if any(f.file_name in held for f in unit.files):
            busy += 1
            continue
        units.append(PlanUnit(split.partition, split.bucket, split.total_buckets, tuple(unit.files),
                              unit.output_level))
    if not units:
        why = f"{busy} bucket(s) are in pending plans already" if busy else "no bucket has anything to compact"
        raise InvalidInputError(f"nothing to {'fully ' if full else ''}compact in {tid} now: {why}")
    return operations.request_compaction(tid, units, full)
