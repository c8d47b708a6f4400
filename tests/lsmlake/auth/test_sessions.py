"""Console sessions (`lsmlake.auth.sessions`): a login trades a valid token for a random session id whose principal
reads only; a session ends when idle too long, at its lifetime, at logout, when its token leaves the token file,
or when newer logins need its room."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

from lsmlake.auth.roles import Role
from lsmlake.auth.sessions import SessionStore
from lsmlake.auth.tokens import Principal, TokenStore

READER, WRITER, ADMIN, UNKNOWN = ("reader-token-0123456789", "writer-token-0123456789", "admin-token-0123456789",
                                  "unknown-token-0123456789")


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def write_tokens(path: Path, entries: dict[str, tuple[str, str]]) -> None:
    """`entries`: token -> (principal, role)."""
    path.write_text(json.dumps({"tokens": [{"principal": p, "role": r, "token": t}
                                           for t, (p, r) in entries.items()]}))


ALL = {READER: ("ann", "reader"), WRITER: ("bob", "writer"), ADMIN: ("root", "admin")}


@pytest.fixture
def file(tmp_path: Path) -> Path:
    path = tmp_path / "tokens.json"
    write_tokens(path, ALL)
    return path


def sessions(file: Path, clock: Clock, **bounds: Any) -> SessionStore:
    return SessionStore(TokenStore(str(file)), clock=clock, **bounds)


def login(store: SessionStore, token: str) -> str:
    session = store.open(token)
    assert session is not None
    return session


def test_a_login_trades_a_valid_token_for_a_random_session_id(file: Path) -> None:
    store = sessions(file, Clock())
    first, second = login(store, READER), login(store, READER)
    assert first != second
    assert len(first) >= 43 and READER not in first  # 32 random bytes, url-safe
    assert store.principal(first) == Principal("ann", Role.READER) == store.principal(second)
    assert store.open(UNKNOWN) is None and len(store) == 2
    assert store.principal(READER) is None and store.principal("") is None  # a token is no session id


def test_every_session_reads_only_even_an_admins(file: Path) -> None:
    """The console only reads: a stolen session cookie can never write, whatever the token it was opened with."""
    store = sessions(file, Clock())
    for token, name in ((ADMIN, "root"), (WRITER, "bob")):
        assert store.principal(login(store, token)) == Principal(name, Role.READER)


def test_a_session_ends_when_idle_too_long(file: Path) -> None:
    clock = Clock()
    store = sessions(file, clock, idle_s=600, lifetime_s=3600)
    session = login(store, READER)
    for _ in range(3):  # each use keeps it open for another idle time
        clock.now += 599
        assert store.principal(session) is not None
    clock.now += 601
    assert store.principal(session) is None and len(store) == 0


def test_a_session_ends_at_its_lifetime_however_busy(file: Path) -> None:
    clock = Clock()
    store = sessions(file, clock, idle_s=600, lifetime_s=3600)
    session = login(store, READER)
    opened = clock.now
    while clock.now + 300 < opened + 3600:
        clock.now += 300
        assert store.principal(session) is not None
    clock.now = opened + 3600
    assert store.principal(session) is None


def test_logging_out_ends_a_session(file: Path) -> None:
    store = sessions(file, Clock())
    session, other = login(store, READER), login(store, READER)
    store.close(session)
    assert store.principal(session) is None and store.principal(other) is not None
    store.close(session)  # twice, or an unknown id: nothing happens
    store.close("nonsense")


def test_the_number_of_sessions_is_bounded_and_the_oldest_login_goes_first(file: Path) -> None:
    clock = Clock()
    store = sessions(file, clock, max_sessions=3, idle_s=600)
    opened = [login(store, READER) for _ in range(3)]
    clock.now += 1
    assert store.principal(opened[0]) is not None  # using the oldest does not make it younger: logins count
    newest = login(store, ADMIN)
    assert len(store) == 3 and store.principal(opened[0]) is None
    assert all(store.principal(s) is not None for s in [*opened[1:], newest])
    # expired sessions make room before a live one is dropped
    clock.now += 500
    assert store.principal(newest) is not None
    clock.now += 200  # the other two have been idle for 700 s, past 600; `newest` for 200 s
    more = [login(store, WRITER), login(store, WRITER)]
    assert len(store) == 3 and all(store.principal(s) is not None for s in [newest, *more])
    with pytest.raises(ValueError, match="max_sessions"):
        sessions(file, clock, max_sessions=0)


def test_a_token_removed_from_the_token_file_ends_its_sessions(file: Path) -> None:
    """The token store reads the file again when it changes (at most once a second); every use of a session checks
    that its token still stands for the same principal."""
    store = sessions(file, Clock())
    reader, writer, admin = login(store, READER), login(store, WRITER), login(store, ADMIN)
    write_tokens(file, {ADMIN: ("root", "admin"), WRITER: ("mallory", "writer")})  # bob's token now names mallory
    deadline = time.monotonic() + 10
    while store.principal(reader) is not None or store.principal(writer) is not None:
        assert time.monotonic() < deadline, "the sessions of removed tokens still work"
        time.sleep(0.1)
    assert store.principal(admin) == Principal("root", Role.READER)
    assert store.open(READER) is None
