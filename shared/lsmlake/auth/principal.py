"""The principal a call is served for, where the servicer can see it.

The interceptor authenticates the token before the servicer runs; what a caller's identity decides
inside a method (whose commit user this is, whose request ids, whose plan) needs it there too. gRPC's
sync server runs a call's behaviour, and iterates a streamed response, on one pool thread, so the
interceptor sets the principal in a context variable around exactly that (`acting_as`).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

from lsmlake.auth.tokens import Principal

_current: ContextVar[Principal | None] = ContextVar("lsmlake_principal", default=None)

#: joins a principal's name to the names it owns (commit users, request ids, plan owners); never in a name
SEPARATOR = "/"


def current_principal() -> Principal | None:
    """The principal of the call on this thread; None when the service checks no tokens."""
    return _current.get()


def owned(name: str, principal: Principal | None) -> str:
    """`name` in the principal's namespace: `<principal>/<name>` (unchanged without tokens or when already there).

    Two principals can never name the same thing, so one cannot claim, answer or undo another's.
    """
    if principal is None:
        return name
    prefix = principal.name + SEPARATOR
    return name if name.startswith(prefix) else prefix + name


def unowned(name: str, principal: Principal | None) -> str:
    """The name a principal gave, without its namespace (inverse of `owned`)."""
    if principal is None:
        return name
    prefix = principal.name + SEPARATOR
    return name[len(prefix):] if name.startswith(prefix) else name


@contextmanager
def acting_as(principal: Principal) -> Iterator[None]:
    """Run the enclosed code with `principal` as the current principal (the interceptor wraps each call in it)."""
    token = _current.set(principal)
    try:
        yield
    finally:
        _current.reset(token)
