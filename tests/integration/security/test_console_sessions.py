"""Console sessions across the catalog's ports: a console session id opens the console's pages only, never the
REST API or gRPC; an admin's console session reads only; removing a token from the token file ends its sessions."""

from __future__ import annotations

import json
import secrets
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import grpc
import pytest

from lsmlake.auth.roles import Role
from lsmlake.proto_gen.lsmlake.v1 import catalog_pb2
from lsmlake.rpc.security import ServerSecurity
from tests.integration.security.test_console import get, session
from tests.support.local_server import Local, local_server


@dataclass(frozen=True)
class Lake:
    local: Local
    ui: int
    rest: int
    file: Path
    entries: dict[str, tuple[str, str]]  # token -> (principal, role)

    def token(self, principal: str) -> str:
        return next(t for t, (p, _) in self.entries.items() if p == principal)

    def write(self, entries: dict[str, tuple[str, str]]) -> None:
        Lake.write_file(self.file, entries)

    @staticmethod
    def write_file(path: Path, entries: dict[str, tuple[str, str]]) -> None:
        path.write_text(json.dumps({"tokens": [{"principal": p, "role": r, "token": t}
                                               for t, (p, r) in entries.items()]}))


@pytest.fixture(scope="module")
def lake(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lake]:
    """A catalog serving gRPC, REST and the console, with a token file of its own (the test may change it)."""
    home = tmp_path_factory.mktemp("sessions")
    entries = {secrets.token_urlsafe(24): (p, r) for p, r in (("ann", "reader"), ("root", "admin"),
                                                              ("temp", "reader"))}
    Lake.write_file(home / "tokens.json", entries)
    with local_server(str(home / "wh"), ui_port=0, rest_port=0, expire_interval_s=0, orphan_interval_s=0,
                      reconcile_interval_s=0, health_interval_s=0,
                      security=ServerSecurity(auth_tokens=str(home / "tokens.json"))) as local:
        assert local.server.ui_port is not None and local.server.rest_port is not None
        yield Lake(local, local.server.ui_port, local.server.rest_port, home / "tokens.json", entries)


def test_a_console_session_is_no_token_of_the_rest_api_or_grpc(lake: Lake) -> None:
    admin = lake.token("root")
    session_id = session(lake.ui, admin).partition("=")[2]
    assert get(lake.rest, "/v1/databases", token=admin)[0] == 200
    assert get(lake.rest, "/v1/databases", token=session_id)[0] == 401
    assert get(lake.rest, "/v1/databases", cookie=f"lsmlake_session={session_id}")[0] == 401
    request = catalog_pb2.ListDatabasesRequest()
    lake.local.stub.ListDatabases(request, metadata=[("authorization", f"Bearer {admin}")], timeout=30)
    with pytest.raises(grpc.RpcError) as refused:
        lake.local.stub.ListDatabases(request, metadata=[("authorization", f"Bearer {session_id}")], timeout=30)
    assert refused.value.code() == grpc.StatusCode.UNAUTHENTICATED


def test_an_admins_console_session_acts_as_a_reader(lake: Lake) -> None:
    session_id = session(lake.ui, lake.token("root")).partition("=")[2]
    assert get(lake.ui, "/", cookie=f"lsmlake_session={session_id}")[0] == 200
    ui = lake.local.server._ui  # the principal the console's HTTP server gives the session's requests
    assert ui is not None and ui.session_principal is not None
    principal = ui.session_principal(session_id)
    assert principal is not None and (principal.name, principal.role) == ("root", Role.READER)


def test_removing_a_token_from_the_token_file_ends_its_console_sessions(lake: Lake) -> None:
    temp, ann = session(lake.ui, lake.token("temp")), session(lake.ui, lake.token("ann"))
    assert get(lake.ui, "/", cookie=temp)[0] == 200
    lake.write({t: e for t, e in lake.entries.items() if e[0] != "temp"})
    deadline = time.monotonic() + 10  # the token file is looked at again at most once a second
    while get(lake.ui, "/", cookie=temp)[0] != 401:
        assert time.monotonic() < deadline, "the session of a removed token still opens the pages"
        time.sleep(0.2)
    assert get(lake.ui, "/", cookie=ann)[0] == 200
