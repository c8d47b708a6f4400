"""How many requests lsmlake sends to an object store, counted by the local S3 server itself (its access log,
`tests.support.s3_requests`), so that folder markers, probes, temporary uploads and re-reads do not creep back.

The bounds are the issue's: an APPEND commit sends at most 15 requests; a full compaction at most 3 per input file
plus 1 per output file plus a constant (the metadata of one snapshot, read and written once, whatever the number of
buckets). Each test also says what every request it allows is for, and fails with the list of what was sent.
"""

from __future__ import annotations

import collections
from collections.abc import Callable
from pathlib import Path

import pyarrow as pa
import pytest

from lsmlake.catalog.filesystem import FileSystemCatalog
from lsmlake.errors import NotFoundError
from lsmlake.format.snapshot import settle_hints
from lsmlake.fs import open_path
from lsmlake.table.compact import compact_table
from lsmlake.table.file_store_table import FileStoreTable
from tests.support.s3_requests import S3Request, S3RequestLog, describe
from tests.support.s3_server import S3Server

pytestmark = pytest.mark.integration

BUCKETS = 4
APPEND_COMMIT_MAX = 15
#: a full compaction's requests beyond its files: the snapshot history it plans with (LATEST, the latest snapshot,
#: the probe past it, EARLIEST and the listing it falls back to, the first snapshot), the schema check, and its
#: commit (LATEST, snapshot, probe, one manifest, two manifest lists, the snapshot, the LATEST hint)
COMPACTION_CONSTANT = 20


def _table(s3_server: S3Server) -> tuple[FileSystemCatalog, FileStoreTable, str]:
    """A primary-key table with BUCKETS buckets in a fresh warehouse; (catalog, table, the warehouse's key prefix)."""
    warehouse = s3_server.warehouse()
    prefix = warehouse.split("@", 1)[1].split("?", 1)[0].split("/", 1)[1] + "/"
    cat = FileSystemCatalog(warehouse)
    cat.create_database("db")
    t = cat.create_table("db.t", "k BIGINT NOT NULL, v STRING", primary_keys=["k"], options={"bucket": str(BUCKETS)})
    return cat, t, prefix


def _rows(start: int, n: int) -> pa.Table:
    return pa.table({"k": pa.array(range(start, start + n), pa.int64()), "v": [f"v{i}" for i in range(n)]})


def _no_waste(sent: list[S3Request]) -> list[str]:
    """What no path of lsmlake should send to an object store: folder markers, temporary objects (upload, copy,
    delete), multipart uploads of small files, and probes of a folder (a listing limited to one key)."""
    problems = []
    for r in sent:
        if r.method == "PUT" and r.key.endswith("/"):
            problems.append(f"folder marker {r.key}")
        if ".tmp" in r.key:
            problems.append(f"temporary object {r.kind} {r.key}")
        if r.kind in ("CREATE_MULTIPART", "UPLOAD_PART", "COMPLETE_MULTIPART"):
            problems.append(f"multipart upload of a small file {r.key}")
        if r.kind in ("DELETE", "DELETE_OBJECTS"):
            problems.append(f"delete {r.key}")
        if r.kind == "LIST" and r.query.get("max-keys") == "1":
            problems.append(f"folder probe {r.key}")
    return problems


def test_an_append_commit_sends_at_most_15_requests(s3_server: S3Server) -> None:
    log = S3RequestLog(s3_server.log_path)
    _, t, prefix = _table(s3_server)
    t.write_arrow(_rows(0, 8))  # the first commit: the conditional-create probe, a table without snapshots
    t.write_arrow(_rows(8, 8))

    settle_hints()
    mark = log.mark()
    t.write_arrow(_rows(100, 3))  # 3 keys: at most 3 buckets written
    settle_hints()  # the LATEST hint is written after the commit returned: counted too
    sent = log.since(mark, prefix)

    shown = describe(sent)
    assert len(sent) <= APPEND_COMMIT_MAX, f"{len(sent)} requests for one APPEND commit:\n{shown}"
    assert not _no_waste(sent), f"{_no_waste(sent)}\n{shown}"
    by_what = collections.Counter(_what(r) for r in sent)
    written = t.latest_snapshot()
    assert written is not None and written.commit_kind == "APPEND"
    # what each request is for:
    assert by_what.pop("PUT data file") in (1, 2, 3)        # one per bucket written (3 keys: 1 to 3 buckets)
    assert by_what.pop("PUT manifest") == 1                 # the new files' manifest
    assert by_what.pop("PUT manifest list") == 2            # the snapshot's base and delta manifest lists
    assert by_what.pop("PUT snapshot") == 1                 # the publication: one conditional create
    assert by_what.pop("PUT LATEST") == 1                   # the LATEST hint, one overwrite, after the reply
    # the latest snapshot, looked at once, for the write, and taken by the commit (a stale look makes the create
    # fail): the one this table published last is known, so the look is its entity tag (unchanged) and none past
    # it, two HEADs at once; no read of LATEST or the snapshot
    assert by_what.pop("HEAD snapshot") == 1
    assert by_what.pop("HEAD 404 snapshot") == 1
    assert by_what.pop("HEAD 404 schema") == 1              # the table was not altered since it was loaded
    # the manifests of the snapshot written on are the writer's own, already known: not read back
    assert not by_what, f"requests nobody accounts for: {dict(by_what)}\n{shown}"
    assert t.to_arrow().num_rows == 19


def test_a_full_compaction_sends_3_requests_per_input_1_per_output_and_a_constant(s3_server: S3Server) -> None:
    log = S3RequestLog(s3_server.log_path)
    cat, t, prefix = _table(s3_server)
    for batch in range(3):  # three level-0 files in each bucket
        t.write_arrow(_rows(batch * 500, 1000))
    # a compactor in another process: it knows nothing of what this one wrote
    t = cat.get_table("db.t")
    other = FileSystemCatalog(s3_server.warehouse(prefix.rstrip("/"))).get_table("db.t")
    inputs = {f.file_name for s in other.new_scan().plan() for f in s.files}
    assert len(inputs) == 3 * BUCKETS

    settle_hints()
    mark = log.mark()
    result = compact_table(other, full=True)
    settle_hints()
    sent = log.since(mark, prefix)

    assert result.snapshot_id is not None
    outputs = {f.file_name for s in other.new_scan().plan() for f in s.files}
    assert not outputs & inputs and len(outputs) == BUCKETS
    shown = describe(sent)
    assert not _no_waste(sent), f"{_no_waste(sent)}\n{shown}"
    data_reads = [r for r in sent if _what(r) == "GET data file"]
    data_writes = [r for r in sent if _what(r) == "PUT data file"]
    # every input is read in one GET (no HEAD, no ranged reads of its footer and column chunks), once
    assert sorted(r.key.rsplit("/", 1)[1] for r in data_reads) == sorted(inputs), shown
    assert not [r for r in sent if r.method == "HEAD" and r.key.endswith(".parquet")], shown
    # every output is written in one PUT
    assert sorted(r.key.rsplit("/", 1)[1] for r in data_writes) == sorted(outputs), shown
    bound = 3 * len(inputs) + len(outputs) + COMPACTION_CONSTANT
    assert len(sent) <= bound, f"{len(sent)} requests for a full compaction of {len(inputs)} files into " \
                               f"{len(outputs)} (bound {bound}):\n{shown}"
    # the metadata does not grow with the buckets: a constant, read and written once for the whole table
    metadata = len(sent) - len(data_reads) - len(data_writes)
    assert metadata <= COMPACTION_CONSTANT, shown
    assert t.to_arrow().num_rows == 2000


def _what(r: S3Request) -> str:
    """A request's kind and the kind of file it is about (`PUT manifest list`, `GET data file`)."""
    name = r.key.rsplit("/", 1)[-1]
    if name.endswith(".parquet"):
        what = "data file"
    elif name.startswith("manifest-list-"):
        what = "manifest list"
    elif name.startswith(("manifest-", "index-manifest-")):
        what = "manifest"
    elif name.startswith("snapshot-"):
        what = "snapshot"
    elif name.startswith("schema-"):
        what = "schema"
    else:
        what = name or r.key
    return f"{r.kind} {what}"


def test_whole_object_requests_are_one_each(s3_server: S3Server) -> None:
    """The FileIO's own requests on an object store: one per write, read, file check and listing; an immutable
    file written or read once is not read again; a prefetched file is not fetched again when opened."""
    log = S3RequestLog(s3_server.log_path)
    cat = FileSystemCatalog(s3_server.warehouse())
    io, root = cat.io, cat.root
    prefix = root.split("/", 1)[1] + "/"

    def requests(action: Callable[[], object]) -> list[str]:
        mark = log.mark()
        action()
        return [r.kind for r in log.since(mark, prefix)]

    assert requests(lambda: io.write_bytes(f"{root}/a/b/file", b"x" * 10)) == ["PUT"]  # no folder markers
    assert requests(lambda: io.read_bytes(f"{root}/a/b/file")) == ["GET"]
    assert requests(lambda: io.file_exists(f"{root}/a/b/file")) == ["HEAD"]
    assert requests(lambda: io.file_exists(f"{root}/a/b/none")) == ["HEAD 404"]
    assert requests(lambda: io.size_or_none(f"{root}/a/b/file")) == ["HEAD"]
    assert io.size_or_none(f"{root}/a/b/file") == 10 and io.size_or_none(f"{root}/a/b/none") is None
    assert requests(lambda: io.list(f"{root}/absent")) == ["LIST"]
    assert io.list(f"{root}/absent") == []
    assert [i.name for i in io.list(f"{root}/a/b")] == ["file"]
    assert requests(lambda: io.write_immutable(f"{root}/m/manifest-1", b"entries")) == ["PUT"]
    assert requests(lambda: io.read_immutable(f"{root}/m/manifest-1")) == []
    io.delete(f"{root}/m/manifest-1")
    with pytest.raises(NotFoundError):
        io.read_immutable(f"{root}/m/manifest-1")  # a deleted file is forgotten, not served from memory
    paths = [f"{root}/p/{i}" for i in range(3)]
    for i, p in enumerate(paths):
        io.write_bytes(p, bytes([i]) * 100)
    assert requests(lambda: io.prefetch(paths)) == ["GET"] * 3
    assert requests(lambda: [io.open_input(p).read() for p in paths]) == []
    assert [io.open_input(p).read() for p in paths] == [bytes([i]) * 100 for i in range(3)]  # fetched anew


def test_size_or_none_on_a_local_disk(tmp_path: Path) -> None:
    io, root = open_path(str(tmp_path))
    io.write_bytes(f"{root}/f", b"abc")
    assert io.size_or_none(f"{root}/f") == 3
    assert io.size_or_none(f"{root}/none") is None
    assert io.size_or_none(root) is None  # a folder is no file
