"""Bad and hostile calls to the Paimon REST catalog API (`catalog_svc.rest_api`), over real HTTP.

A catalog with its REST port holds a primary-key table that pypaimon wrote through REST. The commit
pypaimon would send next is captured on its way (`paimon_rest.capture_commit`): a real body, valid but
never sent. The fuzz changes one to three of its fields to values no honest writer sends (a name that
is a path or no file, a count that lies, an id that skips or repeats, a field of the wrong type, another
table's id), sometimes beside harmless changes, and sends it raw. The oracle of every call: a 4xx with
Paimon's error body and no traceback text (or `200 {"success": false}`, the protocol's lost race, when
the change names an older snapshot), and the table's snapshots and LATEST exactly as before. At the end
the captured body itself commits, so the refusals were the changes' doing.

Then a table of specific bad requests, each against a fresh table, each with its status, its error body
and nothing changed.
"""

from __future__ import annotations

import copy
import dataclasses
import http.client
import itertools
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, note
from hypothesis import strategies as st
from pypaimon.catalog.catalog_exception import TableAlreadyExistException, TableNotExistException

from lsmlake.catalog.filesystem import FileSystemCatalog
from lsmlake.catalog.reconcile import WRITES_PROPERTY
from lsmlake.format.snapshot import COMMIT_KINDS, Snapshot
from tests.support.fuzz.hostile import FUZZ, PATH_LIKE, texts
from tests.support.local_server import local_server
from tests.support.paimon_rest import (
    Answer,
    TableState,
    call,
    capture_commit,
    check_error,
    check_no_leak,
    pk_schema,
    pypaimon_catalog,
    pypaimon_write,
    rows,
    table_path,
    table_state,
)

ROWS_PER_WRITE = 5
CAPTURED_ROWS = 4  # not ROWS_PER_WRITE: a delta list of an earlier snapshot never matches the counts by chance
SEEDED_WRITES = 3
MAX_BODY_BYTES = 16 << 20  # the server's default limit (`lsmlake.rest.http_server.MAX_BODY_BYTES`)
REFUSALS = (400, 403, 409)  # what a hostile commit may be answered (403: a commit user naming a principal)


@dataclass
class Seed:
    """A table with snapshots and the commit of its next snapshot, captured and not sent."""

    warehouse: str
    port: int
    db: str
    table: str
    path: str  # the commit's path
    body: dict[str, Any]
    latest: Snapshot
    state: TableState
    other_table_uuid: str  # another table of the catalog

    @property
    def tid(self) -> str:
        return f"{self.db}.{self.table}"

    @property
    def next_id(self) -> int:
        return self.latest.id + 1

    def snapshot(self) -> dict[str, Any]:
        return dict(self.body["snapshot"])


@dataclass
class Server:
    warehouse: str
    port: int
    catalog: Any  # pypaimon's REST catalog
    names: Iterator[int] = field(default_factory=lambda: itertools.count(1))

    def seed(self, table: str | None = None) -> Seed:
        """A new table with SEEDED_WRITES snapshots written by pypaimon, and the next commit captured."""
        name = table or f"c{next(self.names)}"
        tid = f"db.{name}"
        self.catalog.create_table(tid, pk_schema(), False)
        for i in range(SEEDED_WRITES):
            pypaimon_write(self.catalog.get_table(tid),
                           rows(range(i * ROWS_PER_WRITE, (i + 1) * ROWS_PER_WRITE), f"w{i}-"))
        path, body = capture_commit(self.port, tid, rows(range(1000, 1000 + CAPTURED_ROWS), "captured-"))
        latest = FileSystemCatalog(self.warehouse).get_table(tid).snapshots.latest()
        assert latest is not None and latest.id == SEEDED_WRITES
        other = FileSystemCatalog(self.warehouse).get_table("db.other").table_uuid
        return Seed(self.warehouse, self.port, "db", name, path, body, latest, table_state(self.warehouse, tid), other)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    warehouse = str(Path(tmp_path_factory.mktemp("rest-fuzz")) / "wh")
    # no maintenance: orphan removal would delete the captured commit's files, which no snapshot names
    with local_server(warehouse, rest_port=0, expire_interval_s=0, orphan_interval_s=0,
                      reconcile_interval_s=0) as local:
        port = local.server.rest_port
        assert port is not None
        catalog = pypaimon_catalog(port)
        catalog.create_database("db", False)
        catalog.create_table("db.other", pk_schema(), False)
        yield Server(warehouse, port, catalog)


@pytest.fixture(scope="module")
def seed(server: Server) -> Seed:
    return server.seed("t")


# -- the fuzz ---------------------------------------------------------------------------------

@dataclass(frozen=True)
class Change:
    """One change to a commit body; `race`: it names an older snapshot, so a lost race may be the answer."""

    what: str
    apply: Callable[[dict[str, Any]], None]
    key: str  # changes of one key exclude each other
    race: bool = False


def _set(where: str, key: str, value: Any, race: bool = False) -> Change:
    def apply(body: dict[str, Any]) -> None:
        target = body if where == "body" else body.get("snapshot")
        if isinstance(target, dict):
            target[key] = value

    return Change(f"{where}.{key}={str(value)[:60]!r}", apply, f"{where}.{key}", race)


def _delete(where: str, key: str) -> Change:
    def apply(body: dict[str, Any]) -> None:
        target = body if where == "body" else body.get("snapshot")
        if isinstance(target, dict):
            target.pop(key, None)

    return Change(f"del {where}.{key}", apply, f"{where}.{key}")


NOT_INTS: tuple[Any, ...] = (None, "1", "", 1.5, 1e300, True, False, [], {}, [1], {"v": 1})
BEYOND_LONG = (2**63, 2**64 + 5, -(2**63) - 1, 2**70)  # no Paimon engine reads these (Java's long)
NOT_STRINGS: tuple[Any, ...] = (None, 0, 5, 1.5, True, [], {}, ["x"], {"a": "b"})
REQUIRED = ("id", "schemaId", "baseManifestList", "deltaManifestList", "commitUser", "commitIdentifier",
            "commitKind", "timeMillis", "totalRecordCount", "deltaRecordCount")


def _ints_but(*valid: int) -> st.SearchStrategy[int]:
    return st.one_of(st.sampled_from((0, -1, 1, 2, 2**31, 2**62, *BEYOND_LONG)), st.integers()).filter(
        lambda v: v not in valid)


def hostile_changes(seed: Seed) -> st.SearchStrategy[Change]:
    """Changes after which the commit must be refused (or lost as a race)."""
    snap = seed.snapshot()
    nid, delta, total = seed.next_id, snap["deltaRecordCount"], snap["totalRecordCount"]
    lists = (snap["baseManifestList"], snap["deltaManifestList"])
    table_dir = f"{seed.warehouse}/{seed.db}.db/{seed.table}"
    older = (seed.latest.base_manifest_list, seed.latest.delta_manifest_list)  # files already in the table
    names = st.one_of(st.sampled_from((*PATH_LIKE, "", "manifest-list-nope-0", "../../other/manifest/x",
                                       *(f"{table_dir}/manifest/{n}" for n in lists),  # absolute: a path
                                       *(f"../{seed.table}/manifest/{n}" for n in lists),
                                       *(n + "\x00" for n in lists), lists[0].upper(), *older)),
                      texts.filter(lambda n: n not in lists),
                      st.sampled_from(NOT_STRINGS))
    kinds = st.one_of(st.sampled_from(("append", "", "DELETE", "ANALYZE", " APPEND", "APPEND\x00", "Overwrite")),
                      texts.filter(lambda k: k not in COMMIT_KINDS), st.sampled_from(NOT_STRINGS))
    props = st.one_of(st.sampled_from(("x", [], 5, True, {"a": 5}, {"a": None}, {"a": ["b"]}, {WRITES_PROPERTY: "[]"},
                                       {f"k{i}": "v" for i in range(1_001)}, {"k": "x" * 70_000})),
                      st.dictionaries(texts, st.sampled_from(NOT_STRINGS[1:]), min_size=1, max_size=3))
    # with '/', a commit user names a principal's commits (`<principal>/<name>`): nobody's here (no tokens)
    users = st.sampled_from(("", "x" * 1_025, "x" * 100_000, "root/nightly", "/", "a/b", *NOT_STRINGS))
    uuid_text = st.builds(lambda: str(uuid.uuid4()))
    ids = st.one_of(st.sampled_from((0, -1, 1, nid - 1, nid + 1, nid + 1_000, 2**62, *BEYOND_LONG)),
                    st.integers()).filter(lambda v: v != nid)
    by_key: list[st.SearchStrategy[Change]] = [
        ids.map(lambda v: _set("snapshot", "id", v, race=1 <= v < nid)),
        st.sampled_from(NOT_INTS).map(lambda v: _set("snapshot", "id", v)),
        st.one_of(_ints_but(0), st.sampled_from(NOT_INTS)).map(lambda v: _set("snapshot", "schemaId", v)),
        kinds.map(lambda v: _set("snapshot", "commitKind", v)),
        names.map(lambda v: _set("snapshot", "baseManifestList", v)),
        names.map(lambda v: _set("snapshot", "deltaManifestList", v)),
        # absent (None) is fine for these two
        names.filter(lambda v: v is not None).map(lambda v: _set("snapshot", "changelogManifestList", v)),
        names.filter(lambda v: v is not None).map(lambda v: _set("snapshot", "indexManifest", v)),
        st.one_of(_ints_but(delta), st.sampled_from((delta + 1, delta - 1, -delta, *NOT_INTS))).map(
            lambda v: _set("snapshot", "deltaRecordCount", v)),
        st.one_of(_ints_but(total), st.sampled_from((total + 1, total - 1, delta, *NOT_INTS))).map(
            lambda v: _set("snapshot", "totalRecordCount", v)),
        props.map(lambda v: _set("snapshot", "properties", v)),
        users.map(lambda v: _set("snapshot", "commitUser", v)),
        st.sampled_from((*NOT_INTS[1:], *BEYOND_LONG)).map(lambda v: _set("snapshot", "timeMillis", v)),
        st.sampled_from((*NOT_INTS[1:], *BEYOND_LONG)).map(lambda v: _set("snapshot", "commitIdentifier", v)),
        st.sampled_from(REQUIRED).map(lambda k: _delete("snapshot", k)),
        st.one_of(texts.filter(lambda v: v not in ("", str(seed.body.get("tableId")))), uuid_text,
                  st.just(seed.other_table_uuid), st.sampled_from(NOT_STRINGS[1:])).map(
            lambda v: _set("body", "tableId", v)),
        # another snapshot named as the base: a lost race (the client rebuilds); not a string: refused
        st.one_of(uuid_text, texts.filter(lambda v: v not in ("", seed.latest.uuid))).map(
            lambda v: _set("body", "baseSnapshotUuid", v, race=True)),
        st.sampled_from(NOT_STRINGS[1:]).map(lambda v: _set("body", "baseSnapshotUuid", v)),
        st.sampled_from((None, {}, "x", 5, True, {"a": []})).map(lambda v: _set("body", "statistics", v)),
        st.sampled_from((None, [], "x", 5, [snap])).map(lambda v: _set("body", "snapshot", v)),
        st.just(_delete("body", "snapshot")),
    ]
    return st.one_of(by_key)


def harmless_changes() -> st.SearchStrategy[Change]:
    """Changes an honest client may make: alone they commit; beside a hostile one they must not help it."""
    optional = ("version", "uuid", "writerVersion", "baseManifestListSize", "deltaManifestListSize")
    return st.one_of(
        st.sampled_from(optional).map(lambda k: _delete("snapshot", k)),
        st.sampled_from(("fuzz-user", "ü" * 10, "a b")).map(lambda v: _set("snapshot", "commitUser", v)),
        st.sampled_from(({"note": "x"}, {})).map(lambda v: _set("snapshot", "properties", v)),
        st.integers(0, 2**62).map(lambda v: _set("snapshot", "timeMillis", v)),
        st.sampled_from(("unknownField", "logOffsets")).map(lambda k: _set("snapshot", k, {"x": 1})),
        st.just(_set("body", "unknownField", [1, 2])),
        st.sampled_from(("", None)).map(lambda v: _set("body", "tableId", v)),
        st.just(_set("body", "baseSnapshotUuid", None)),
        st.just(_set("body", "statistics", [])),
    )


#: answer -> calls, printed by the fuzz (run with -s to see what it reached)
OUTCOMES: Counter[str] = Counter()
#: the first example that left the table changed: every later one fails because of it, so it is named
CULPRIT: list[str] = []


def check_commit_refused(seed: Seed, body: dict[str, Any], what: str, race: bool,
                         statuses: tuple[int, ...] = REFUSALS) -> Answer:
    """Send `body` as the seed's commit: a refusal (or a lost race when `race`), and the table as it was."""
    if table_state(seed.warehouse, seed.tid) != seed.state:
        raise AssertionError(f"an earlier call changed {seed.tid}: {CULPRIT[:1]}")
    answer = call(seed.port, "POST", seed.path, body)
    note(f"{what} -> {answer.status} {answer.text[:300]}")
    OUTCOMES[f"{answer.status}: {answer.text[12:70]}"] += 1
    after = table_state(seed.warehouse, seed.tid)
    if after != seed.state:
        CULPRIT.append(f"{what} -> {answer.status} {answer.text[:200]}")
        raise AssertionError(f"{what} was answered {answer.status} {answer.text[:300]!r} but changed {seed.tid}: "
                             f"snapshots {seed.state.ids} -> {after.ids}")
    if answer.status == 200 and race:
        check_no_leak(answer, what)
        assert answer.json() == {"success": False}, f"{what}: {answer.text[:300]}"
    else:
        check_error(answer, statuses, what=what)
    return answer


def test_mutated_commits(seed: Seed) -> None:
    changes = hostile_changes(seed)

    @FUZZ
    # one change alone half the time: beside another, a change may never reach the check it is for
    @given(hostile=st.one_of(st.lists(changes, min_size=1, max_size=1),
                             st.lists(changes, min_size=2, max_size=3, unique_by=lambda c: c.key)),
           harmless=st.lists(harmless_changes(), max_size=2, unique_by=lambda c: c.key))
    def run(hostile: list[Change], harmless: list[Change]) -> None:
        hostile_keys = {c.key for c in hostile}
        body = copy.deepcopy(seed.body)
        # harmless first: a harmless change of the same field would undo a hostile one
        for c in [c for c in harmless if c.key not in hostile_keys] + hostile:
            c.apply(body)
        what = "; ".join(c.what for c in hostile + harmless)
        check_commit_refused(seed, body, what, race=any(c.race for c in hostile))

    run()
    print("\nREST commit (mutated):", dict(OUTCOMES.most_common()))
    # the body itself was good: it commits, and the table reads with its rows
    answer = call(seed.port, "POST", seed.path, seed.body)
    assert (answer.status, answer.json()) == (200, {"success": True}), answer.text[:500]
    table = FileSystemCatalog(seed.warehouse).get_table(seed.tid)
    assert table.snapshots.ids() == [*seed.state.ids, seed.next_id]
    assert table.to_arrow().num_rows == SEEDED_WRITES * ROWS_PER_WRITE + CAPTURED_ROWS


# -- specific bad requests --------------------------------------------------------------------

def _snap(**fields: Any) -> Callable[[Seed], dict[str, Any]]:
    def body(seed: Seed) -> dict[str, Any]:
        b = copy.deepcopy(seed.body)
        b["snapshot"].update({k: v(seed) if callable(v) else v for k, v in fields.items()})
        return b

    return body


def _manifest_list_naming(manifest: str) -> Callable[[Seed], dict[str, Any]]:
    """The captured commit, with a delta manifest list (written here) that names `manifest`."""
    def body(seed: Seed) -> dict[str, Any]:
        t = FileSystemCatalog(seed.warehouse).get_table(seed.tid)
        metas = t.manifests.read_list(seed.body["snapshot"]["deltaManifestList"])
        name, _ = t.manifests.write_list([dataclasses.replace(m, file_name=manifest) for m in metas])
        return _snap(deltaManifestList=name)(seed)

    return body


def _data_file_named(file_name: str) -> Callable[[Seed], dict[str, Any]]:
    """The captured commit, its manifest entries (rewritten here) naming `file_name` as their data file."""
    def body(seed: Seed) -> dict[str, Any]:
        t = FileSystemCatalog(seed.warehouse).get_table(seed.tid)
        entries = [dataclasses.replace(e, file=dataclasses.replace(e.file, file_name=file_name))
                   for m in t.manifests.read_list(seed.body["snapshot"]["deltaManifestList"])
                   for e in t.manifests.read_manifest(m.file_name)]
        name, _ = t.manifests.write_list([t.manifests.write_manifest(entries, 0)])
        return _snap(deltaManifestList=name)(seed)

    return body


def _readding_latest(seed: Seed) -> dict[str, Any]:
    """A delta that adds the latest snapshot's files again (they are in the table already), counts that agree."""
    return _snap(deltaManifestList=seed.latest.delta_manifest_list, deltaRecordCount=ROWS_PER_WRITE,
                 totalRecordCount=(SEEDED_WRITES + 1) * ROWS_PER_WRITE)(seed)


def _create_table(name: str, type_text: str = "INT", **options: str) -> dict[str, Any]:
    return {"identifier": {"database": "db", "object": name},
            "schema": {"fields": [{"id": 0, "name": "a", "type": type_text}], "options": options}}


@dataclass(frozen=True)
class Case:
    name: str
    method: str
    path: Callable[[Seed], str]
    body: Callable[[Seed], Any] | None
    status: int
    resource_type: str | None | bool = False  # False: not checked
    words: str = ""  # in the message
    race: bool = False  # 200 {"success": false}


def _commit(name: str, body: Callable[[Seed], Any], status: int = 400, words: str = "", race: bool = False) -> Case:
    return Case(name, "POST", lambda s: s.path, body, status, "TABLE" if status != 200 else False, words, race)


CASES = [
    Case("unknown database", "GET", lambda s: "/v1/databases/nope", None, 404, "DATABASE", "'nope'"),
    Case("table of an unknown database", "GET", lambda s: table_path("nope", s.table), None, 404, "TABLE"),
    Case("unknown table", "GET", lambda s: table_path("db", "nope"), None, 404, "TABLE", "db.nope"),
    Case("snapshot of an unknown table", "GET", lambda s: table_path("db", "nope") + "/snapshot", None, 404,
         "TABLE"),
    Case("commit to an unknown table", "POST", lambda s: table_path("db", "nope") + "/commit",
         lambda s: s.body, 404, "TABLE"),
    Case("commit to an unknown database", "POST", lambda s: table_path("nope", s.table) + "/commit",
         lambda s: s.body, 404, "TABLE"),
    Case("table name '..'", "GET", lambda s: table_path("db", "%2e%2e"), None, 400, "TABLE", "table name"),
    Case("database name a path", "POST", lambda s: table_path("..%2F..%2Fetc", s.table) + "/commit",
         lambda s: s.body, 400, "TABLE", "database name"),
    _commit("malformed JSON", lambda s: b'{"snapshot": ', words="not JSON"),
    _commit("not UTF-8", lambda s: b"\xff\xfe{}", words="not JSON"),
    _commit("a list, not an object", lambda s: b"[]", words="JSON object"),
    _commit("null", lambda s: b"null", words="JSON object"),
    _commit("a string", lambda s: b'"commit"', words="JSON object"),
    _commit("arrays nested 100,000 deep", lambda s: b'{"snapshot": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"),
    Case("unknown path", "GET", lambda s: "/v1/nope", None, 404, None, "no such REST resource"),
    Case("unknown version", "GET", lambda s: "/v2/databases", None, 404, None),
    Case("commit with PUT", "PUT", lambda s: s.path, lambda s: s.body, 405, None, "PUT"),
    Case("config with DELETE", "DELETE", lambda s: "/v1/config", None, 405, None),
    Case("snapshot with POST", "POST", lambda s: table_path(s.db, s.table) + "/snapshot", lambda s: {}, 405),
    _commit("manifest list naming a manifest that does not exist", _manifest_list_naming("manifest-nope-0"),
            words="does not exist"),
    _commit("manifest list naming a path", _manifest_list_naming("../../other/manifest/x"),
            words="not a file name"),
    _commit("manifest entry naming a data file that was never written", _data_file_named("data-nope.parquet"),
            words="does not exist"),
    _commit("manifest entry naming a file outside the table", _data_file_named("../../../other/x.parquet"),
            words="not a file name"),
    _commit("manifest entry naming an absolute path", _data_file_named("/etc/passwd"), words="not a file name"),
    _commit("delta manifest list that does not exist", _snap(deltaManifestList="manifest-list-nope-0"),
            words="does not exist"),
    _commit("base manifest list of an earlier snapshot (drops files)",
            _snap(baseManifestList=lambda s: s.latest.base_manifest_list), words="base"),
    _commit("delta adding files the table holds already", _readding_latest),
    _commit("index manifest that is a manifest list", _snap(indexManifest=lambda s: s.latest.delta_manifest_list)),
    _commit("changelog naming the table's data files",
            _snap(changelogManifestList=lambda s: s.latest.delta_manifest_list)),
    _commit("statistics file that is a path", _snap(statistics="../../../other/x"), words="statistics"),
    _commit("deltaRecordCount lies", _snap(deltaRecordCount=lambda s: s.body["snapshot"]["deltaRecordCount"] + 1),
            words="deltaRecordCount"),
    _commit("totalRecordCount lies", _snap(totalRecordCount=lambda s: s.body["snapshot"]["totalRecordCount"] - 1),
            words="totalRecordCount"),
    _commit("snapshot id skipping ahead", _snap(id=lambda s: s.next_id + 1), words="does not follow"),
    _commit("snapshot id of an existing snapshot", _snap(id=lambda s: s.latest.id), status=200, race=True),
    _commit("snapshot id 1", _snap(id=1), status=200, race=True),
    _commit("schema that does not exist", _snap(schemaId=1), words="schemaId"),
    _commit("timeMillis beyond a long", _snap(timeMillis=2**70), words="timeMillis"),
    _commit("commitIdentifier beyond a long", _snap(commitIdentifier=2**63), words="commitIdentifier"),
    _commit("commit user naming a principal", _snap(commitUser="root/nightly"), status=403, words="principal"),
    _commit("the catalog's own snapshot property", _snap(properties={WRITES_PROPERTY: "[]"}), words=WRITES_PROPERTY),
    Case("tableId of another table", "POST", lambda s: s.path, lambda s: {**s.body, "tableId": s.other_table_uuid},
         409, "TABLE"),
    Case("create table with a bad type", "POST", lambda s: "/v1/databases/db/tables",
         lambda s: _create_table("bad", "STRANGE"), 400, False, "STRANGE"),
    Case("create table with a path option", "POST", lambda s: "/v1/databases/db/tables",
         lambda s: _create_table("bad", path="/tmp/elsewhere"), 400, False, "path"),
    Case("create table of an existing name", "POST", lambda s: "/v1/databases/db/tables",
         lambda s: _create_table(s.table), 409, False, "already exists"),
    Case("create table named a path", "POST", lambda s: "/v1/databases/db/tables",
         lambda s: _create_table("../../x"), 400, False, "table name"),
    Case("create table in another database than its path", "POST", lambda s: "/v1/databases/db/tables",
         lambda s: {**_create_table("x"), "identifier": {"database": "other", "object": "x"}}, 400),
    Case("create database of an existing name", "POST", lambda s: "/v1/databases", lambda s: {"name": "db"}, 409,
         "DATABASE", "already exists"),
    Case("create database named a path", "POST", lambda s: "/v1/databases", lambda s: {"name": "../x"}, 400,
         "DATABASE", "database name"),
]


def _catalog_state(warehouse: str) -> dict[str, list[str]]:
    cat = FileSystemCatalog(warehouse)
    return {db: cat.list_tables(db) for db in cat.list_databases()}


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_bad_request(server: Server, case: Case) -> None:
    seed = server.seed()
    body = case.body(seed) if case.body is not None else None
    catalog_before = _catalog_state(server.warehouse)
    answer = call(server.port, case.method, case.path(seed), body)
    after = table_state(seed.warehouse, seed.tid)
    assert after == seed.state, f"{case.name}: answered {answer.status} {answer.text[:300]!r} but snapshots " \
                                f"{seed.state.ids} -> {after.ids}"
    assert _catalog_state(server.warehouse) == catalog_before, f"{case.name}: the catalog changed"
    if case.race:
        check_no_leak(answer, case.name)
        assert (answer.status, answer.json()) == (200, {"success": False}), f"{case.name}: {answer.text[:300]}"
        return
    err = check_error(answer, case.status, case.resource_type, case.name)
    assert case.words in err["message"], f"{case.name}: {err['message']!r} does not say {case.words!r}"


def test_body_over_the_limit(server: Server) -> None:
    """A Content-Length over the limit is refused before the body is read (413), and the connection closed."""
    seed = server.seed()
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=30)
    try:
        conn.putrequest("POST", seed.path)
        conn.putheader("Content-Type", "application/json")
        conn.putheader("Content-Length", str(MAX_BODY_BYTES + 1))
        conn.endheaders()  # and no body: a server that waited for it would hang until the timeout
        r = conn.getresponse()
        answer = Answer(r.status, r.read().decode(), {k.lower(): v for k, v in r.getheaders()})
    finally:
        conn.close()
    err = check_error(answer, 413, what="Content-Length over the limit")
    assert str(MAX_BODY_BYTES) in err["message"]
    assert answer.headers.get("connection") == "close"
    assert table_state(seed.warehouse, seed.tid) == seed.state


def test_pypaimon_sees_a_missing_table(server: Server) -> None:
    """The 404 of a table's path is what pypaimon turns into its TableNotExistException; a 409 of a create into
    TableAlreadyExistException."""
    with pytest.raises(TableNotExistException):
        server.catalog.get_table("db.nope")
    with pytest.raises(TableNotExistException):
        server.catalog.get_table("nope.t")
    before = _catalog_state(server.warehouse)
    with pytest.raises(TableAlreadyExistException):
        server.catalog.create_table("db.other", pk_schema(), False)
    assert _catalog_state(server.warehouse) == before
