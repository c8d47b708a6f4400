"""The README, top to bottom, as a user on a fresh machine follows it: every command and snippet in it runs.

Every fenced block of README.md is read here (```sh commands and ```python snippets), so a README change that
breaks a command breaks this test; a command of a kind this file does not know how to run fails
`test_every_readme_command_is_run` instead of being passed over.

Each section runs in a fresh temporary directory, the user's working directory (`wh`, `rows.parquet` are
relative to it). Sections that depend on each other share one, in README order: the client example runs
against the README's own `catalog-svc` and `writer-svc` lines (without their optional flags), and the same
folder, which then holds `shop.orders`, serves the service lines with all their flags (`--ingest
shop.orders:debezium`); the `lake` CLI block runs in order in another folder, and the cluster block starts
`lake up` on that warehouse, where the CLI commands that need a cluster (`timeline`, and `lake produce` from
the prose) run against it. The *Security* section runs in a folder of its own: its token file (the ```json
block), its catalog line with TLS and tokens (test certificates from tests/support/certs.py as `server.crt`,
`server.key` and `ca.crt`), then its client snippet and its `lake` command against that catalog. The *Spark*
script runs in a folder of its own too, and starts the local Spark session it uses itself.

Substituted, and nothing else: free ports for the README's fixed ones (the same free port for the same
README port within a section), the embedded broker's address for `127.0.0.1:9092`, a temporary folder for
`/data/warehouse`, the installed console scripts for `.venv/bin/` (this interpreter's environment), and a
PostgreSQL schema of the test server for the `postgresql://...` placeholder. An optional group `[...]` runs
both ways: the command without its optional groups, then with all of them.
"""

from __future__ import annotations

import ast
import contextlib
import csv
import io
import json
import os
import re
import shlex
import signal
import subprocess
import sys
import time
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path
from typing import Any

import grpc
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from lsmlake.catalog.filesystem import FileSystemCatalog
from lsmlake.cli import main as cli
from lsmlake.cli.cluster import find_endpoints
from lsmlake.kafka.broker import EmbeddedBroker, free_port
from lsmlake.table.file_store_table import FileStoreTable
from tests.support.health_check import serving
from tests.support.paths import ROOT

pytestmark = pytest.mark.integration

README = ROOT / "README.md"
BIN = Path(sys.executable).parent  # the environment `make` built: `.venv/bin/` of the README
START_TIMEOUT_S = 180.0  # a service with Spark on a busy 2-core machine
STOP_TIMEOUT_S = 60.0

SERVICES = {"catalog-svc": "catalog_svc", "writer-svc": "writer_svc",
            "compactor-svc": "compactor_svc"}
PROGRAMS = {"make", "lake", *SERVICES}
CLUSTER_BLOCK = {"up", "status", "down"}  # the README's cluster block, run by test_cluster_block
NEEDS_CLUSTER = {"timeline", "produce"}  # other `lake` commands that need the cluster (or its metadata store)
PORT_FLAGS = {"--port", "--metrics-port", "--rest-port", "--ui-port"}
HOST_PORT = re.compile(r"127\.0\.0\.1:(\d+)")
PLACEHOLDER = "..."
# optional groups that name a placeholder, and the test that substitutes something real for it
PLACEHOLDERS = {("catalog-svc", "--metastore"): "test_catalog_svc_on_postgresql"}
PARTITION_VALUES = ("2026-11-21", "2026-11-22")  # the day the README's `--partition`/`--where` examples name
SECURITY = "Security"  # the section whose commands run against a catalog with TLS and tokens (test_security_section)
SPARK = "Spark"  # the section whose script test_spark_block runs with a real Spark session


# ---------------------------------------------------------------------------------------------------------
# Reading the README
# ---------------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Block:
    """One fenced code block: its language, the README line of its first line of code, the section heading."""

    lang: str
    line: int
    heading: str
    text: str


Word = str | tuple[str, ...]  # a tuple is an optional group `[...]`


@dataclass(frozen=True)
class Command:
    """One shell command of a ```sh block (continuation lines joined, the comment dropped)."""

    line: int
    text: str
    words: tuple[Word, ...]
    heading: str = ""

    @property
    def program(self) -> str:
        first = self.words[0]
        assert isinstance(first, str), self.text
        return Path(first).name

    @property
    def groups(self) -> list[tuple[str, ...]]:
        return [w for w in self.words if isinstance(w, tuple)]

    def args(self, optional: bool | tuple[str, ...] = False) -> list[str]:
        """The arguments: without the optional groups, with all runnable ones (True), or with the one named."""
        out: list[str] = []
        for w in self.words[1:]:
            if isinstance(w, str):
                out.append(w)
            elif (optional is True and not any(PLACEHOLDER in x for x in w)) or optional == w:
                out.extend(w)
        return out

    def variants(self) -> list[list[str]]:
        """The command without its optional groups, then (if it has runnable ones) with all of them."""
        full = self.args(optional=True)
        return [self.args()] + ([full] if full != self.args() else [])

    @property
    def subcommand(self) -> str:
        """For `lake`: the command word after the global options (`lake --warehouse wh scan ...` -> scan)."""
        words = self.args()
        i = 0
        while i < len(words) and words[i].startswith("--"):
            i += 2  # every global option takes a value
        return words[i] if i < len(words) else ""

    def __str__(self) -> str:
        return f"README.md:{self.line}: {self.text}"


def readme_blocks() -> list[Block]:
    blocks: list[Block] = []
    heading, lang, start, code = "", None, 0, []
    for no, line in enumerate(README.read_text().splitlines(), 1):
        if lang is None:
            if line.startswith("## "):
                heading = line[3:].strip()
            elif line.startswith("```"):
                lang, start, code = line[3:].strip(), no + 1, []
        elif line.startswith("```"):
            blocks.append(Block(lang, start, heading, "\n".join(code) + "\n"))
            lang = None
        else:
            code.append(line)
    assert lang is None, "README.md has an unclosed code fence"
    return blocks


def _group(words: list[str], where: str) -> tuple[Word, ...]:
    out: list[Word] = []
    group: list[str] | None = None
    for w in words:
        if group is None and w.startswith("["):
            group, w = [], w[1:]
        if group is None:
            out.append(w)
            continue
        closed = w.endswith("]")
        group.append(w[:-1] if closed else w)
        if closed:
            out.append(tuple(group))
            group = None
    assert group is None, f"{where}: unclosed optional group"
    return tuple(out)


def block_commands(block: Block) -> list[Command]:
    commands: list[Command] = []
    lines = block.text.split("\n")
    no = 0
    while no < len(lines):
        first = no
        text = lines[no]
        while text.endswith("\\"):  # a continuation line
            no += 1
            text = text[:-1] + " " + lines[no].strip()
        no += 1
        words = shlex.split(text, comments=True)
        if words:
            where = f"README.md:{block.line + first}"
            commands.append(Command(block.line + first, " ".join(words), _group(words, where), block.heading))
    return commands


def sh_commands() -> list[Command]:
    return [c for b in readme_blocks() if b.lang == "sh" for c in block_commands(b)]


def prose_lake_commands() -> list[Command]:
    """`lake produce ...`: a command the prose gives (in backticks) that no block repeats; it needs the cluster."""
    text = README.read_text()
    found = []
    for m in re.finditer(r"`(lake produce [^`]+)`", text):
        line = text.count("\n", 0, m.start()) + 1
        words = shlex.split(" ".join(m[1].split()))
        found.append(Command(line, " ".join(words), _group(words, f"README.md:{line}")))
    return found


def only(program: str) -> Command:
    """The one `program` line outside the *Security* section (whose lines test_security_section runs)."""
    found = [c for c in sh_commands() if c.program == program and c.heading != SECURITY]
    assert len(found) == 1, f"expected one `{program}` command in the README, found {[str(c) for c in found]}"
    return found[0]


def python_block(heading: str, lang: str = "python") -> Block:
    found = [b for b in readme_blocks() if b.lang == lang and b.heading == heading]
    assert len(found) == 1, f"expected one {lang} block under '## {heading}'"
    return found[0]


# ---------------------------------------------------------------------------------------------------------
# Running it
# ---------------------------------------------------------------------------------------------------------

def executable(program: str) -> list[str]:
    """`.venv/bin/<program>`: the console script of this environment, else the same entry point by module."""
    script = BIN / program
    if script.exists():
        return [str(script)]
    if program == "lake":
        return [sys.executable, "-c", "from lsmlake.cli.main import main; raise SystemExit(main())"]
    return [sys.executable, "-m", SERVICES[program]]


class Ports:
    """The README's fixed ports mapped to free ones: the same free port for the same README port."""

    def __init__(self, fixed: dict[int, int] | None = None) -> None:
        self.map = dict(fixed or {})

    def __call__(self, port: int) -> int:
        if port not in self.map:
            self.map[port] = free_port()
        return self.map[port]

    def args(self, args: list[str]) -> list[str]:
        out = []
        for i, a in enumerate(args):
            if i and args[i - 1] in PORT_FLAGS and a.isdigit():
                a = str(self(int(a)))
            out.append(self.text(a))
        return out

    def text(self, text: str) -> str:
        return HOST_PORT.sub(lambda m: f"127.0.0.1:{self(int(m[1]))}", text)


def _flag(args: list[str], name: str) -> str | None:
    return args[args.index(name) + 1] if name in args else None


class Service:
    """A README service command as a real process; its output goes to a log in the section's folder."""

    def __init__(self, command: Command, args: list[str], cwd: Path) -> None:
        self.command = command
        self.args = args
        name = f"{command.program}-{uuid.uuid4().hex[:6]}"
        self.out, self.log = cwd / f"{name}.out", cwd / f"{name}.log"
        with open(self.out, "wb") as out, open(self.log, "wb") as log:
            self.proc = subprocess.Popen([*executable(command.program), *args], cwd=cwd, stdin=subprocess.DEVNULL,
                                         stdout=out, stderr=log, env={**os.environ, "PYTHONUNBUFFERED": "1"})

    def tail(self) -> str:
        return (self.out.read_text(errors="replace") + self.log.read_text(errors="replace"))[-3000:]

    def _alive(self, deadline: float, what: str) -> None:
        assert self.proc.poll() is None, f"{self.command}\nexited with {self.proc.returncode}:\n{self.tail()}"
        assert time.monotonic() < deadline, f"{self.command}\n{what}:\n{self.tail()}"

    def port(self, deadline: float) -> int:
        """`--port N`, or without it the port the service picked and printed (`... listening on HOST:PORT`)."""
        given = _flag(self.args, "--port")
        while given is None:
            m = re.search(r"listening on [^\s:]+:(\d+)\n", self.out.read_text(errors="replace"))
            if m:
                return int(m[1])
            self._alive(deadline, "printed no address")
            time.sleep(0.05)  # polling interval, bounded by the deadline
        return int(given)

    def wait_serving(self, credentials: grpc.ChannelCredentials | None = None) -> None:
        """Poll gRPC health until SERVING (and the metrics endpoint, when asked for), within the deadline; over
        TLS with `credentials`. Health needs no token."""
        deadline = time.monotonic() + START_TIMEOUT_S
        target = f"127.0.0.1:{self.port(deadline)}"
        with (grpc.secure_channel(target, credentials) if credentials else grpc.insecure_channel(target)) as channel:
            while True:
                self._alive(deadline, "never SERVING")
                if serving(channel):
                    break
                time.sleep(0.1)  # polling interval, bounded by the deadline
        metrics = _flag(self.args, "--metrics-port")
        if metrics is not None:
            while True:
                try:
                    with urllib.request.urlopen(f"http://127.0.0.1:{metrics}/metrics", timeout=2) as r:
                        assert r.status == 200
                        break
                except OSError:
                    self._alive(deadline, f"no metrics on port {metrics}")
                    time.sleep(0.1)

    def stop(self) -> int:
        """SIGTERM and wait for the graceful shutdown; SIGKILL only if it overruns. Returns the exit code."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        return self.proc.returncode


@contextlib.contextmanager
def services() -> Iterator[list[Service]]:
    """Collects started services; any still running at the end (a failed test) is stopped."""
    started: list[Service] = []
    try:
        yield started
    finally:
        for s in reversed(started):
            s.stop()


def start(running: list[Service], command: Command, args: list[str], cwd: Path) -> Service:
    s = Service(command, args, cwd)
    running.append(s)
    return s


def stop_all(running: list[Service]) -> None:
    """Stop in the reverse order of starting (the catalog last), each with SIGTERM; each must exit 0."""
    for s in reversed(running):
        code = s.stop()
        assert code == 0, f"{s.command}\nexited with {code} on SIGTERM:\n{s.tail()}"


def run_lake(argv: list[str], cwd: Path) -> str:
    """`lake ARGS` in-process (the console script is `lsmlake.cli.main:main`), in the section's folder."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.chdir(cwd), contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = cli.main(argv)
    assert code == 0, f"lake {shlex.join(argv)} exited {code}: {err.getvalue()}"
    assert "error" not in err.getvalue(), err.getvalue()
    return out.getvalue()


def run_python(block: Block, code: str, cwd: Path) -> tuple[str, dict[str, Any]]:
    """Exec a README snippet in the section's folder; tracebacks name the README's own line numbers."""
    namespace: dict[str, Any] = {"__name__": "__readme__"}
    out = io.StringIO()
    compiled = compile("\n" * (block.line - 1) + code, str(README), "exec")
    with contextlib.chdir(cwd), contextlib.redirect_stdout(out):
        exec(compiled, namespace)
    return out.getvalue(), namespace


# ---------------------------------------------------------------------------------------------------------
# Input files and tables the README's commands name but do not create
# ---------------------------------------------------------------------------------------------------------

def _value(f: pa.Field, key: int, version: int, partition: bool) -> Any:
    t = f.type
    if pa.types.is_integer(t):
        return key
    if pa.types.is_decimal(t):
        return (Decimal(key) + Decimal(version) / 4).quantize(Decimal(1).scaleb(-t.scale))
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        return PARTITION_VALUES[key % 2] if partition else f"v{key}.{version}"
    if pa.types.is_floating(t):
        return key + version / 4
    if pa.types.is_boolean(t):
        return key % 2 == 0
    raise AssertionError(f"no sample values for column {f}: extend _value")


def _row(table: FileStoreTable, key: int, version: int) -> dict[str, Any]:
    parts = set(table.schema.partition_keys)
    return {f.name: _value(f, key, version, f.name in parts) for f in table.schema.arrow_schema}


@dataclass
class Model:
    """The rows a table should hold after the README's writes: the newest row per primary key."""

    keys: tuple[str, ...]
    rows: dict[tuple[Any, ...], dict[str, Any]] = field(default_factory=dict)

    def apply(self, row: dict[str, Any], kind: str) -> None:
        key = tuple(row[k] for k in self.keys)
        if kind == "-D":
            self.rows.pop(key, None)
        else:
            self.rows[key] = row

    def as_json(self) -> list[str]:
        return sorted(json.dumps({k: str(v) for k, v in r.items()}, sort_keys=True) for r in self.rows.values())


def make_input_files(table: FileStoreTable, files: list[str], cwd: Path, model: Model) -> None:
    """Rows for the table in each file the write names: new keys in every file, and from the second file on an
    update of a key written before and (in formats that carry `_row_kind`) a delete of another."""
    schema = table.schema.arrow_schema
    for i, name in enumerate(files):
        path = cwd / name
        rows: list[tuple[dict[str, Any], str]] = [(_row(table, k, i), "+I") for k in range(4 * i, 4 * i + 4)]
        ext = path.suffix
        if i:
            rows.append((_row(table, 0, i), "+U"))
            if ext != ".parquet":
                rows.append((_row(table, 1, 0), "-D"))
        for row, kind in rows:
            model.apply(row, kind)
        if ext == ".parquet":
            pq.write_table(pa.Table.from_pylist([r for r, _ in rows], schema=schema), path)
        elif ext == ".csv":
            with open(path, "w", newline="") as fh:
                w = csv.writer(fh)
                w.writerow([*schema.names, "_row_kind"])
                w.writerows([*(str(r[n]) for n in schema.names), kind] for r, kind in rows)
        elif ext in (".jsonl", ".ndjson"):
            path.write_text("".join(json.dumps({**r, "_row_kind": kind}, default=str) + "\n" for r, kind in rows))
        else:
            raise AssertionError(f"no sample file for {name}: extend make_input_files")


def create_append_table(name: str, where: list[tuple[str, str]], warehouse: str, cwd: Path) -> list[dict[str, str]]:
    """The append table with deletion vectors a `lake delete` names: the where-columns plus `msg`, with rows
    that match the condition and rows that do not. Created and written with the `lake` CLI itself."""
    columns = [c for c, _ in where]
    run_lake(["--warehouse", warehouse, "table", "create", name, "--schema",
              ", ".join(f"{c} STRING" for c in [*columns, "msg"]), "--option", "deletion-vectors.enabled=true"], cwd)
    rows = [{**dict(where), "msg": "matches"}, {**{c: v + "-other" for c, v in where}, "msg": "kept"}]
    (cwd / "events.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    run_lake(["--warehouse", warehouse, "write", name, "events.jsonl"], cwd)
    return rows


def positionals(args: list[str], after: str) -> list[str]:
    """The positional words after the command word `after` (`write db.t a.csv b.csv` -> [db.t, a.csv, b.csv])."""
    words = args[args.index(after) + 1:]
    out, i = [], 0
    while i < len(words):
        if words[i].startswith("--"):
            i += 1 if words[i] == "--full" else 2  # the one flag without a value in these commands
        else:
            out.append(words[i])
            i += 1
    return out


# ---------------------------------------------------------------------------------------------------------
# What the README contains, and that each kind of command has a test here
# ---------------------------------------------------------------------------------------------------------

def test_every_readme_command_is_run() -> None:
    blocks = readme_blocks()
    assert {b.lang for b in blocks} <= {"sh", "python", "json"}, [b.lang for b in blocks]
    # the python snippets each have their test below; a new one needs a test too
    assert sorted(b.heading for b in blocks if b.lang == "python") == ["Iceberg engines", REST, SECURITY, SPARK,
                                                                       "The client", "The library"]
    assert [b.heading for b in blocks if b.lang == "json"] == [SECURITY]  # the token file of test_security_section
    commands = sh_commands()
    for c in commands:
        assert c.program in PROGRAMS, (f"{c}\nno test runs `{c.program}` commands: "
                                       "add one to tests/integration/test_readme.py")
        first = c.words[0]
        if isinstance(first, str) and first.startswith(".venv/bin/"):  # `make` installs these console scripts
            assert f'\n{c.program} = "' in (ROOT / "pyproject.toml").read_text(), f"{c}: no console script"
        for g in c.groups:
            if any(PLACEHOLDER in w for w in g):
                assert (c.program, g[0]) in PLACEHOLDERS, f"{c}\nthe placeholder in [{' '.join(g)}] is not run"
    for program in SERVICES:
        only(program)  # exactly one line each: the service tests run that line
    assert [c.program for c in commands].count("make") == 2
    subcommands = [c.subcommand for c in commands if c.program == "lake"]
    for sub in CLUSTER_BLOCK:
        assert subcommands.count(sub) == 1, f"expected one `lake {sub}` command, found {subcommands.count(sub)}"
    assert prose_lake_commands(), "the README no longer shows `lake produce`: drop it from test_cluster_block"


def test_make_lines_come_first_and_run_the_demo_and_the_suite() -> None:
    """`make demo` and `make test` are not re-run here: `make test` IS this suite (pytest over tests/, this
    file included), and the demo is run by tests/integration/test_demo.py (at the CI size). This checks that the
    README starts with exactly those two commands and that the Makefile targets run exactly the demo module and
    pytest (after installing the browser the console's tests drive and the Azure emulator the publication tests
    start)."""
    first = sh_commands()[:2]
    assert [c.args() for c in first] == [["demo"], ["test"]] and {c.program for c in first} == {"make"}, first
    makefile = (ROOT / "Makefile").read_text()

    def recipe(target: str) -> tuple[str, list[str]]:
        m = re.search(rf"^{target}:(.*)\n((?:\t.*\n)+)", makefile, re.MULTILINE)
        assert m, f"the Makefile has no `{target}` target"
        return m[1].split(), [ln.strip() for ln in m[2].splitlines()]

    assert recipe("demo") == (["venv"], ["$(BIN)/python -m lsmlake.cli.demo"])
    assert recipe("test") == (["venv", "browser", "azurite"], ["$(BIN)/python -m pytest -q"])
    _, browser = recipe("browser")  # the console's browser tests: Debian's packages, as the README says
    assert any("apt-get install" in ln and "chromium chromium-driver" in ln for ln in browser), browser
    _, azurite = recipe("azurite")  # the Azure publication tests' emulator: from npm, as the README says
    assert any("npm install --prefix .node" in ln and "azurite@" in ln for ln in azurite), azurite
    assert "make azurite" in (ROOT / "README.md").read_text()
    assert 'testpaths = ["tests"]' in (ROOT / "pyproject.toml").read_text()
    assert '"-m", "lsmlake.cli.demo"' in (ROOT / "tests" / "integration" / "test_demo.py").read_text()


# ---------------------------------------------------------------------------------------------------------
# The client, then the services with all their flags, in one folder
# ---------------------------------------------------------------------------------------------------------

@dataclass
class ClientSection:
    home: Path
    output: str


@pytest.fixture(scope="module")
def client_section(tmp_path_factory: pytest.TempPathFactory) -> ClientSection:
    """The client example against the README's `catalog-svc` and `writer-svc` lines (no optional flags), on the
    ports the example names (mapped to free ones consistently); both then stop on SIGTERM with exit code 0."""
    home = tmp_path_factory.mktemp("readme-client")
    ports = Ports()
    block = python_block("The client")
    with services() as running:
        catalog = start(running, only("catalog-svc"), ports.args(only("catalog-svc").args()), home)
        catalog.wait_serving()
        writer = start(running, only("writer-svc"), ports.args(only("writer-svc").args()), home)
        writer.wait_serving()
        output, _ = run_python(block, ports.text(block.text), home)
        stop_all(running)
    return ClientSection(home, output)


def test_client_block(client_section: ClientSection) -> None:
    printed = ast.literal_eval(client_section.output.strip().splitlines()[-1])
    assert isinstance(printed, list) and printed and all(isinstance(r, dict) for r in printed), printed
    # what the client's scan printed is what the catalog committed to the warehouse
    warehouse = _flag(only("catalog-svc").args(), "--warehouse")
    assert warehouse
    tables = FileSystemCatalog(str(client_section.home / warehouse))
    written = tables.get_table("shop.orders").to_arrow().to_pylist()
    key = sorted(printed[0])
    assert sorted(printed, key=lambda r: [r[k] for k in key]) == sorted(written, key=lambda r: [r[k] for k in key])


def test_service_commands(client_section: ClientSection, tmp_path: Path) -> None:
    """Each service line with all its flags (but the placeholder) as a real process: the catalog, then the writer
    (ingesting `shop.orders` from Kafka) and the compactor (Spark) side by side; each reaches SERVING and exits 0
    on SIGTERM. Kafka is the embedded broker, in place of 127.0.0.1:9092."""
    home = client_section.home
    with EmbeddedBroker(log_dir=tmp_path / "kafka") as broker, services() as running:
        ports = Ports({9092: broker.port})
        catalog = start(running, only("catalog-svc"), ports.args(only("catalog-svc").args(optional=True)), home)
        catalog.wait_serving()
        started = [start(running, only(p), ports.args(only(p).args(optional=True)), home)
                   for p in ("writer-svc", "compactor-svc")]
        for s in started:
            s.wait_serving()
        stop_all(running)


REST = "Paimon engines through the REST catalog"


def test_rest_catalog_block(tmp_path: Path) -> None:
    """The pypaimon example against the README's catalog line with its `--rest-port`: the rows it wrote are the
    table's, committed by the catalog (the events' commit path), as lsmlake reads them."""
    block = python_block(REST)
    line = only("catalog-svc")
    rest = [g for g in line.words[1:] if not isinstance(g, str) and "--rest-port" in g]
    assert rest, "the catalog-svc line names no [--rest-port ...] any more: update this test"
    ports = Ports()
    with services() as running:
        catalog = start(running, line, ports.args(line.args() + list(rest[0])), tmp_path)
        catalog.wait_serving()
        run_python(block, ports.text(block.text), tmp_path)
        stop_all(running)
    table = FileSystemCatalog(str(tmp_path / str(_flag(line.args(), "--warehouse")))).get_table("shop.items")
    assert table.snapshots.latest_id() == 1
    files = [f for s in table.plan() for f in s.files]  # level 0, which a deletion-vector read skips until compacted
    assert {f.level for f in files} == {0} and sum(f.row_count for f in files) == 2


def test_catalog_svc_on_postgresql(tmp_path: Path, pg_url: str) -> None:
    """The catalog line with `--metastore postgresql://...`: the placeholder becomes a schema of our own on the
    test server (`pg_url`, LSMLAKE_TEST_PG_URL), dropped afterwards."""
    command = only("catalog-svc")
    (group,) = [g for g in command.groups if g[0] == "--metastore"]
    args = [w.replace("postgresql://...", pg_url)  # after the README's ports are mapped
            for w in Ports().args(command.args(optional=group))]
    with services() as running:
        start(running, command, args, tmp_path).wait_serving()
        stop_all(running)


# ---------------------------------------------------------------------------------------------------------
# Security: the catalog with TLS and tokens, the client and `lake` with a token
# ---------------------------------------------------------------------------------------------------------

def test_security_section(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The token file (the ```json block) as the file the catalog line names, test certificates as the
    `server.crt`, `server.key` and `ca.crt` the section names, and the section's catalog line as a real process
    serving TLS. A call without a token is refused with UNAUTHENTICATED and changes nothing; the client snippet
    with the admin token in `LAKE_TOKEN` creates its database; the `lake` command, with that token in its
    `--token-file` and no `LAKE_TOKEN`, creates its table through the catalog. The catalog then exits 0."""
    from lsmlake.client.client import Client
    from lsmlake.errors import LakeError
    from tests.support.certs import make_certs

    commands = [c for c in sh_commands() if c.heading == SECURITY]
    assert sorted(c.program for c in commands) == ["catalog-svc", "lake"], [str(c) for c in commands]
    assert not any(c.groups for c in commands), "optional groups in the Security section: run them here"
    (service,) = [c for c in commands if c.program == "catalog-svc"]
    ports = Ports()
    args = ports.args(service.args())
    tokens = python_block(SECURITY, "json").text
    auth_tokens = _flag(args, "--auth-tokens")
    assert auth_tokens and _flag(args, "--tls-cert") and _flag(args, "--tls-key"), service
    (tmp_path / auth_tokens).write_text(tokens)
    (admin,) = [e["token"] for e in json.loads(tokens)["tokens"] if e["role"] == "admin"]
    certs = make_certs(tmp_path)
    for name in (_flag(args, "--tls-cert"), _flag(args, "--tls-key"), "ca.crt"):
        assert (tmp_path / name).exists(), f"{service}: tests/support/certs.py wrote no {name}"
    warehouse = FileSystemCatalog(str(tmp_path / (_flag(args, "--warehouse") or "")))
    monkeypatch.delenv("LAKE_TOKEN", raising=False)
    block = python_block(SECURITY)
    with services() as running:
        start(running, service, args, tmp_path).wait_serving(grpc.ssl_channel_credentials(Path(certs.ca).read_bytes()))
        with Client(f"127.0.0.1:{_flag(args, '--port')}", tls_ca=certs.ca) as anonymous, \
                pytest.raises(LakeError, match="^UNAUTHENTICATED"):
            anonymous.create_database("shop")
        assert "shop" not in warehouse.list_databases()

        monkeypatch.setenv("LAKE_TOKEN", admin)
        output, _ = run_python(block, ports.text(block.text), tmp_path)
        assert "shop" in ast.literal_eval(output.strip().splitlines()[-1]), output
        assert "shop" in warehouse.list_databases()
        monkeypatch.delenv("LAKE_TOKEN")

        for command in (c for c in commands if c.program == "lake"):
            lake_args = ports.args(command.args())
            token_file = _flag(lake_args, "--token-file")
            assert token_file and command.subcommand == "table", f"{command}: extend test_security_section"
            (tmp_path / token_file).write_text(admin + "\n")
            run_lake(lake_args, tmp_path)
            (name,) = positionals(lake_args, "create")
            assert warehouse.table_exists(name), command
        stop_all(running)


# ---------------------------------------------------------------------------------------------------------
# The library
# ---------------------------------------------------------------------------------------------------------

def test_library_block(tmp_path: Path) -> None:
    block = python_block("The library")
    code = re.sub(r"([\"'])(/data/[^\"']*)\1", lambda m: repr(str(tmp_path / m[2].lstrip("/"))), block.text)
    assert code != block.text, "the library example names no /data/ folder any more: update this test"
    _, namespace = run_python(block, code, tmp_path)
    table = namespace["t"]
    assert isinstance(table, FileStoreTable)
    # still readable after the compactions, the expiry and the orphan cleanup, at its latest snapshot
    assert table.to_arrow().column_names == table.schema.arrow_schema.names


def test_iceberg_block(tmp_path: Path) -> None:
    """The Iceberg example: pyiceberg reads the three rows through the metadata published with the commits."""
    block = python_block("Iceberg engines")
    code = re.sub(r"([\"'])(/data/[^\"']*)\1", lambda m: repr(str(tmp_path / m[2].lstrip("/"))), block.text)
    assert code != block.text, "the Iceberg example names no /data/ folder any more: update this test"
    output, namespace = run_python(block, code, tmp_path)
    assert namespace["metadata"].endswith("/metadata/v2.metadata.json"), namespace["metadata"]
    assert "pen" in output and "ink" in output and "pad" in output, output


# ---------------------------------------------------------------------------------------------------------
# Spark
# ---------------------------------------------------------------------------------------------------------

SPARK_TRIES = 3  # the JVM launch fails now and then on this machine (before the script has done anything)


def shown_tables(output: str) -> list[list[tuple[str, ...]]]:
    """The tables `DataFrame.show()` printed, in order: each a list of rows of the cells' text, header first."""
    tables: list[list[tuple[str, ...]]] = []
    inside = False  # a table is a run of border (`+---+`) and row (`| a |`) lines; show() ends it with a blank line
    for line in output.splitlines():
        if not line.startswith(("+-", "|")):
            inside = False
            continue
        if not inside:
            tables.append([])
            inside = True
        if line.startswith("|"):
            tables[-1].append(tuple(c.strip() for c in line.strip("|").split("|")))
    return tables


def test_spark_block(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The *Spark* script as a user runs it, in an empty folder (its `wh`, `changes` and `checkpoint` are relative
    to it), with a real local Spark session that the script starts. What it printed is what the writes should
    leave: the newest snapshot after the partition overwrite, snapshot 1 by id and by time, the filtered and
    pruned read; the stream's sink, written by two runs of the query on one checkpoint, holds each change once.
    The warehouse then holds the same rows for lsmlake's own reader."""
    from pyspark.sql import SparkSession

    # the sink's relative paths resolve against the JVM's folder: as when a user runs the script, it must start
    # the JVM itself, in its own folder (a stopped session keeps its JVM: end that one first)
    _end_jvm()
    monkeypatch.setenv("PYSPARK_PYTHON", sys.executable)  # restored afterwards; the script sets the same
    block = python_block(SPARK)
    for attempt in range(SPARK_TRIES):
        home = tmp_path / f"run{attempt}"
        home.mkdir()
        try:
            output, namespace = run_python(block, block.text, home)
            break
        except Exception as e:
            session = SparkSession._instantiatedSession
            if session is not None:
                session.stop()
            if session is not None or "JAVA_GATEWAY_EXITED" not in str(e) or attempt == SPARK_TRIES - 1:
                raise
            time.sleep(2 * (attempt + 1))  # a failed JVM launch: the script did nothing yet
    try:
        latest, first, as_of, d1, changes = shown_tables(output)
        header = ("id", "v", "dt")
        assert latest == [header, ("1", "a", "d1"), ("2", "B", "d1"), ("5", "e", "d2")], output  # d2 overwritten
        assert first == as_of == [header, ("1", "a", "d1"), ("2", "b", "d1"), ("3", "c", "d2")], output
        assert d1 == [("id", "v"), ("2", "B")], output
        # run 1: the newest snapshot as +I; run 2 (from the checkpoint): only the update and the delete
        assert changes == [(*header, "_row_kind"), ("1", "a", "d1", "+I"), ("2", "B", "d1", "+I"),
                           ("5", "e", "d2", "+I"), ("1", "A", "d1", "+U"), ("5", "NULL", "d2", "-D")], output
        assert sorted(p.name for p in (home / "checkpoint" / "commits").iterdir() if p.name.isdigit()) == \
            ["0", "1"], "expected one micro-batch per run of the query"
        sink = pq.read_table(home / "changes").to_pylist()
        assert sorted(sink, key=lambda r: (r["_row_kind"], r["id"])) == [
            {"id": 1, "v": "a", "dt": "d1", "_row_kind": "+I"}, {"id": 2, "v": "B", "dt": "d1", "_row_kind": "+I"},
            {"id": 5, "v": "e", "dt": "d2", "_row_kind": "+I"}, {"id": 1, "v": "A", "dt": "d1", "_row_kind": "+U"},
            {"id": 5, "v": None, "dt": "d2", "_row_kind": "-D"}]
        table = FileSystemCatalog(str(home / "wh")).get_table("db.t")
        rows = sorted(table.to_arrow().to_pylist(), key=lambda r: r["id"])
        assert rows == [{"id": 1, "v": "A", "dt": "d1"}, {"id": 2, "v": "B", "dt": "d1"}]
        assert sorted(r["id"] for r in namespace["latest"].collect()) == [1, 2]  # Spark reads the newest too
        assert [table.snapshots.snapshot(i).commit_kind for i in (1, 2, 3, 4)] == \
            ["APPEND", "APPEND", "OVERWRITE", "APPEND"]
    finally:
        namespace["spark"].stop()
        _end_jvm()  # later sessions get a JVM in the suite's folder, not in this test's


def _end_jvm() -> None:
    """Stop the active session, if any, and the JVM behind it, so that the next session launches a new one."""
    from pyspark import SparkContext
    from pyspark.sql import SparkSession

    if SparkSession._instantiatedSession is not None:
        SparkSession._instantiatedSession.stop()
    gateway = SparkContext._gateway
    if gateway is None:
        return
    SparkContext._gateway = None
    SparkContext._jvm = None
    gateway.shutdown()
    proc = getattr(gateway, "proc", None)
    if proc is not None:  # the JVM ends when its stdin closes; kill it if it does not
        proc.stdin.close()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=30)


# ---------------------------------------------------------------------------------------------------------
# The `lake` CLI, then the cluster on its warehouse
# ---------------------------------------------------------------------------------------------------------

@dataclass
class CliSection:
    home: Path
    warehouses: set[str] = field(default_factory=set)
    ran: list[str] = field(default_factory=list)
    checked: list[str] = field(default_factory=list)  # the commands whose output was checked against a model


@pytest.fixture(scope="module")
def cli_section(tmp_path_factory: pytest.TempPathFactory) -> CliSection:
    """Every `lake` command of the README but those of the cluster, in README order, each variant in turn. Input
    files a write names are made for the table; a table a command names but no command creates (the append table
    of `lake delete`) is made with the CLI first. Results are checked as they come: a scan shows what the writes
    left, a delete removes the matching rows."""
    section = CliSection(tmp_path_factory.mktemp("readme-cli"))
    models: dict[str, Model] = {}
    for command in sh_commands():
        if command.program != "lake" or command.subcommand in CLUSTER_BLOCK | NEEDS_CLUSTER \
                or command.heading == SECURITY:
            continue
        for args in command.variants():
            warehouse = _flag(args, "--warehouse")
            assert warehouse, f"{command}: no --warehouse"
            section.warehouses.add(warehouse)
            catalog = FileSystemCatalog(str(section.home / warehouse))
            sub = command.subcommand
            if sub == "write":
                name, *files = positionals(args, "write")
                model = models.setdefault(name, Model(catalog.get_table(name).schema.primary_keys))
                make_input_files(catalog.get_table(name), [f for f in files if not (section.home / f).exists()],
                                 section.home, model)
            elif sub == "delete":
                (name,) = positionals(args, "delete")
                where = [tuple(w.split("=", 1)) for w in args[args.index("--where") + 1::2] if "=" in w]
                rows = create_append_table(name, where, warehouse, section.home)
            out = run_lake(args, section.home)
            section.ran.append(shlex.join(args))
            if sub == "scan" and _flag(args, "--format") == "jsonl" and "--snapshot" not in args:
                (name,) = positionals(args, "scan")
                if name in models:
                    got = sorted(json.dumps({k: str(v) for k, v in json.loads(ln).items()}, sort_keys=True)
                                 for ln in out.splitlines())
                    assert got == models[name].as_json(), f"{command}: the scan disagrees with the writes"
                    section.checked.append("scan")
            if sub == "delete":
                left = catalog.get_table(name).to_arrow().to_pylist()
                assert left == [r for r in rows if r["msg"] == "kept"], f"{command}: {left}"
                section.checked.append("delete")
    assert section.ran, "no `lake` commands found in the README"
    return section


def test_cli_block(cli_section: CliSection) -> None:
    readme = [c for c in sh_commands() if c.program == "lake" and c.subcommand not in CLUSTER_BLOCK | NEEDS_CLUSTER
              and c.heading != SECURITY]
    assert len(cli_section.ran) == sum(len(c.variants()) for c in readme)
    # the README writes, scans (jsonl) and deletes: each of those results was compared with what it should be
    assert {"scan", "delete"} <= set(cli_section.checked), cli_section.checked


def test_cluster_block(cli_section: CliSection) -> None:
    """`lake up` in the background on the CLI block's warehouse (free ports instead of 50051-50053), `lake status`,
    the commands that need the cluster (`lake timeline` from the CLI block, `lake produce` from the prose), and
    `lake down`, which stops `lake up` with exit code 0."""
    home = cli_section.home
    up, status, down = (next(c for c in sh_commands() if c.program == "lake" and c.subcommand == s)
                        for s in ("up", "status", "down"))
    warehouse = _flag(up.args(), "--warehouse")
    assert warehouse in cli_section.warehouses, "the cluster block should run on the CLI block's warehouse"
    log = home / "lake-up.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen([*executable("lake"), *up.args(), "--catalog-port", str(free_port()),
                                 "--writer-port", str(free_port()), "--compactor-port", str(free_port())],
                                cwd=home, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        while find_endpoints(str(home / warehouse)) is None:
            assert proc.poll() is None, f"{up}\nexited {proc.returncode}:\n{log.read_text()[-3000:]}"
            assert time.monotonic() < deadline, f"{up}\nnever came up:\n{log.read_text()[-3000:]}"
            time.sleep(0.3)  # polling interval, bounded by the deadline

        shown = subprocess.run([*executable("lake"), *status.args()], cwd=home, capture_output=True, text=True,
                               timeout=STOP_TIMEOUT_S)
        assert shown.returncode == 0, f"{status}\n{shown.stdout}{shown.stderr}"
        assert all(f"{s}" in shown.stdout for s in ("catalog", "writer", "compactor")), shown.stdout
        assert "NOT SERVING" not in shown.stdout

        cluster_commands = [c for c in sh_commands() if c.program == "lake" and c.subcommand in NEEDS_CLUSTER]
        for command in [*cluster_commands, *prose_lake_commands()]:
            for args in command.variants():
                args = args if "--warehouse" in args else ["--warehouse", warehouse, *args]  # as `lake up` runs on
                if command.subcommand == "produce":
                    name, *files = positionals(args, "produce")
                    lines = _produce_input(name, files, _flag(args, "--format") or "json", home / warehouse, home)
                    assert f"sent {lines} message(s) to lake.ingest.{name}" in run_lake(args, home), command
                else:
                    assert "plan_id" in run_lake(args, home), command

        stopped = subprocess.run([*executable("lake"), *down.args()], cwd=home, capture_output=True, text=True,
                                 timeout=STOP_TIMEOUT_S + 30)
        assert stopped.returncode == 0 and "cluster stopped" in stopped.stdout, f"{down}\n{stopped.stderr}"
        assert proc.wait(STOP_TIMEOUT_S) == 0, f"{up}\n{log.read_text()[-3000:]}"
        assert find_endpoints(str(home / warehouse)) is None
    finally:
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(10)


def _produce_input(name: str, files: list[str], fmt: str, warehouse: Path, cwd: Path) -> int:
    """The lines `lake produce` sends: the rows of the table's current state as plain JSON (with `_row_kind`) or
    as Debezium change events, whichever the command's `--format` says. Returns the number of lines."""
    table = FileSystemCatalog(str(warehouse)).get_table(name)
    rows = table.to_arrow().to_pylist()[:3] or [_row(table, 100, 0)]
    if fmt == "debezium":
        lines = [{"payload": {"before": None, "after": r, "op": "c"}} for r in rows]
    else:
        lines = [{**r, "_row_kind": "+U"} for r in rows]
    for f in files:
        (cwd / f).write_text("".join(json.dumps(x, default=str) + "\n" for x in lines))
    return len(lines) * len(files)
