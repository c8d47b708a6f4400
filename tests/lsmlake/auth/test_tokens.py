"""The token file: what it accepts, what it refuses (naming the entry), and reloading when it changes."""

from __future__ import annotations

import json
import os
import secrets
import time
from pathlib import Path

import pytest

from lsmlake.auth.roles import Role
from lsmlake.auth.tokens import Principal, TokenStore, digest, parse_tokens
from lsmlake.errors import InvalidInputError
from lsmlake.rpc.interceptor import bearer_token

TOKEN = "t0ken-of-twenty-chars"


def test_plaintext_and_hashed_tokens_name_their_principal_and_role(tmp_path: Path) -> None:
    other = secrets.token_hex(16)
    path = tmp_path / "tokens.json"
    path.write_text(json.dumps({"tokens": [{"principal": "bob", "role": "Writer", "token": TOKEN},
                                           {"principal": "eve", "role": "reader", "sha256": digest(other).hex()}]}))
    store = TokenStore(str(path))
    assert len(store) == 2
    assert store.authenticate(TOKEN) == Principal("bob", Role.WRITER)
    assert store.authenticate(other) == Principal("eve", Role.READER)
    assert store.authenticate(TOKEN + "x") is None and store.authenticate("") is None
    assert store.authenticate(digest(other).hex()) is None  # the digest itself is no token


@pytest.mark.parametrize(("doc", "message"), [
    ("not json", "not JSON"),
    ([], 'expected an object {"tokens"'),
    ({"tokens": [], "extra": 1}, 'expected an object {"tokens"'),
    ({"tokens": ["x"]}, "tokens[0]: expected an object"),
    ({"tokens": [{"role": "reader", "token": TOKEN}]}, "tokens[0]: 'principal'"),
    ({"tokens": [{"principal": "a", "role": "root", "token": TOKEN}]}, "tokens[0]: 'role': unknown role 'root'"),
    ({"tokens": [{"principal": "a", "role": "reader"}]}, "exactly one of 'token' and 'sha256'"),
    ({"tokens": [{"principal": "a", "role": "reader", "token": TOKEN, "sha256": "00" * 32}]}, "exactly one"),
    ({"tokens": [{"principal": "a", "role": "reader", "token": "short"}]}, "at least 16 characters"),
    ({"tokens": [{"principal": "a", "role": "reader", "sha256": "abc"}]}, "64 hex digits"),
    ({"tokens": [{"principal": "a", "role": "reader", "token": TOKEN, "note": 1}]}, "unknown field(s) note"),
    ({"tokens": [{"principal": "a", "role": "reader", "token": TOKEN},
                 {"principal": "b", "role": "admin", "token": TOKEN}]}, "tokens[1]: the same token appears twice"),
])
def test_a_bad_token_file_is_refused_naming_the_problem(doc: object, message: str) -> None:
    with pytest.raises(InvalidInputError) as e:
        parse_tokens(doc if isinstance(doc, str) else json.dumps(doc), "f.json")
    assert message in str(e.value) and "f.json" in str(e.value)


def test_a_missing_token_file_fails_at_start(tmp_path: Path) -> None:
    with pytest.raises(InvalidInputError, match="cannot use token file.*nope.json"):
        TokenStore(str(tmp_path / "nope.json"))


def test_a_changed_file_is_reloaded_and_a_broken_one_keeps_the_old_tokens(tmp_path: Path) -> None:
    path = tmp_path / "tokens.json"
    path.write_text(json.dumps({"tokens": [{"principal": "a", "role": "reader", "token": TOKEN}]}))
    store = TokenStore(str(path))
    assert store.authenticate(TOKEN) == Principal("a", Role.READER)
    new = "a-brand-new-token-value"
    path.write_text(json.dumps({"tokens": [{"principal": "a", "role": "admin", "token": new}]}))
    os.utime(path, ns=(time.time_ns(), time.time_ns() + 10**9))  # a distinct mtime even on a coarse clock
    deadline = time.monotonic() + 10
    while store.authenticate(new) is None:
        assert time.monotonic() < deadline, "the changed token file was never reloaded"
        time.sleep(0.2)  # the store looks at the file at most once a second
    assert store.authenticate(new) == Principal("a", Role.ADMIN) and store.authenticate(TOKEN) is None
    path.write_text("{broken")
    os.utime(path, ns=(time.time_ns(), time.time_ns() + 2 * 10**9))
    time.sleep(1.2)
    assert store.authenticate(new) == Principal("a", Role.ADMIN)


def test_the_bearer_token_is_read_from_the_authorization_metadata() -> None:
    assert bearer_token([("x", "y"), ("authorization", "Bearer abc")]) == "abc"
    assert bearer_token([("authorization", "bearer  abc ")]) == "abc"
    assert bearer_token([("authorization", "Basic abc")]) is None
    assert bearer_token(None) is None
