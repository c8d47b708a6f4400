"""File access for warehouses on a local disk or on object storage, through `pyarrow.fs`.

The one operation that needs care is publishing a snapshot (or a schema, a tag): it must fail when the target
exists, atomically across processes. On a local filesystem that is a hard link. On S3, GCS and Azure it is one
conditional create (`lsmlake.fs.conditional_create`, through obstore, as pyarrow.fs has none), once a probe has
shown that the store refuses a second create of one name; a store that does not (an S3-compatible server without
conditional writes) gets a StorageError at its first publication, unless the FileIO was told that its caller
serialises publications (the catalog service, under its commit lock): then a failed probe is a warning and
publication checks and writes under an in-process lock. That lock is also all a filesystem handed in by the
caller that is neither local nor a known cloud store gets (pyarrow's in-memory mock: it lives in one process).

Durability on a local disk: a file's content is synced (fsync) before the file is closed, so before any
rename or link publishes it, and the directory is synced after a file or subdirectory is created,
linked or renamed into it, so the new name survives a power cut too. A write that is one of a batch
(the data files of a bucket, the manifests of a commit) may leave the directory sync to its caller,
who then calls `sync_dir` once for the batch. An object store needs neither: a completed PUT is durable.

Requests on an object store (S3, GCS, Azure), where each one costs a round trip: whole-object reads, writes and
existence checks of files go through the store's obstore client (`ConditionalCreate.get`, `put`, `size`: one request
each, where pyarrow's streams send two or three); no directory is made (an object store has none: a key needs no
parent, and an empty folder would be one more object); a listing of an absent folder is one empty listing, not a
probe first; and metadata files that are never rewritten under their name (manifests, manifest lists: their names
carry a uuid) are kept in a bounded in-process cache once written or read (`write_immutable`, `read_immutable`), so a
process that commits again and again reads back none of what it wrote.
"""

from __future__ import annotations

import collections
import concurrent.futures
import errno
import logging
import os
import threading
import uuid
from collections.abc import Sequence
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.fs as pafs

from lsmlake.errors import NotFoundError, PublicationUnsupportedError, StorageError
from lsmlake.fs.conditional_create import ConditionalCreate

_log = logging.getLogger(__name__)

#: an object of at most this size is read in one GET when a Parquet reader opens it: a reader decodes most of a
#: file's columns, and one request costs less than the footer read and the ranged reads of each column chunk
WHOLE_READ_MAX = 64 * 1024 * 1024
#: the bytes of immutable metadata files an object-store FileIO keeps in memory (least recently used first out)
IMMUTABLE_CACHE_BYTES = 64 * 1024 * 1024
#: how many objects `prefetch` fetches at once
PREFETCH_CONCURRENCY = 8

# Publication without a conditional create (an in-process store, or a caller that serialises publications):
# within one process this lock makes the check-and-move atomic.
_CHECK_THEN_WRITE_LOCK = threading.Lock()
_MAX_CREATED_TAGS = 256


@dataclass(frozen=True)
class FileInfo:
    """One entry of a directory listing."""

    path: str
    name: str
    size: int
    mtime_ms: int
    is_dir: bool


class FileIO:
    """Reads and writes files below a warehouse root.

    Args:
        conditional: the conditional create of the object store `fs` talks to (S3, GCS, Azure); None on a local
            disk, or for a store whose publications an in-process lock serialises.
        root: the warehouse root, below which the conditional-create probe writes.
        publications_serialized: the caller serialises every publication to this warehouse across processes
            (the catalog service's commit lock), so a store without conditional create only gets a warning.
    """

    def __init__(self, fs: pafs.FileSystem, local: bool, *, conditional: ConditionalCreate | None = None,
                 root: str = "", publications_serialized: bool = False, scheme: str = "") -> None:
        self.fs = fs
        self.scheme = scheme  # of the URIs other processes open this storage's paths by ("s3"); "" on a local disk
        self.local = local
        self.conditional = conditional
        self.root = root
        self.publications_serialized = publications_serialized
        self._conditional_ok: bool | None = None  # the probe's verdict, once asked
        self._created_tags: dict[str, str] = {}  # entity tags of objects just published, until asked for
        self._created_lock = threading.Lock()
        self._immutable: collections.OrderedDict[str, bytes] = collections.OrderedDict()
        self._immutable_bytes = 0
        self._immutable_lock = threading.Lock()
        self._prefetched: dict[str, bytes] = {}  # whole objects fetched ahead, each taken by one `open_input`

    @property
    def _store(self) -> ConditionalCreate | None:
        """The object store's own client for whole-object requests; None on a local disk or a filesystem without one."""
        return None if self.local else self.conditional

    def uri(self, path: str) -> str:
        """A path of this storage as another process opens it: a local path, or `<scheme>://bucket/key` (never with
        credentials: the opener brings its own settings, `lsmlake.fs.storage_settings`)."""
        if self.local or not self.scheme:
            return path
        return f"{self.scheme}://{path.lstrip('/')}"

    # -- queries -------------------------------------------------------------------------------

    def exists(self, path: str) -> bool:
        """Whether a file or a directory is at `path` (on an object store: an object, or keys below it)."""
        if self.local:
            return os.path.exists(path)
        return bool(self.fs.get_file_info(path).type != pafs.FileType.NotFound)

    def file_exists(self, path: str) -> bool:
        """Whether a file is at `path`: one HEAD on an object store (`exists` also looks for keys below it)."""
        if self.local:
            return os.path.isfile(path)
        store = self._store
        if store is not None:
            return store.size(path) is not None
        return bool(self.fs.get_file_info(path).type == pafs.FileType.File)

    def is_dir(self, path: str) -> bool:
        if self.local:
            return os.path.isdir(path)
        return bool(self.fs.get_file_info(path).type == pafs.FileType.Directory)

    def size(self, path: str) -> int:
        if self.local:
            return os.path.getsize(path)
        store = self._store
        if store is not None:
            found = store.size(path)
            if found is None:
                raise NotFoundError(f"file not found: {path}")
            return found
        return int(self.fs.get_file_info(path).size)

    def size_or_none(self, path: str) -> int | None:
        """The size of the file at `path`, None when there is none: one HEAD on an object store, where `exists`
        and then `size` are two."""
        if self.local:
            try:
                return os.path.getsize(path) if os.path.isfile(path) else None
            except FileNotFoundError:
                return None
        store = self._store
        if store is not None:
            return store.size(path)
        info = self.fs.get_file_info(path)
        return int(info.size) if info.type == pafs.FileType.File else None

    def list(self, path: str, recursive: bool = False) -> list[FileInfo]:
        """Entries of a directory; an absent directory lists as empty."""
        if self.local and not os.path.isdir(path):
            return []
        # an absent folder of an object store is an empty listing: no probe before it
        infos = self.fs.get_file_info(pafs.FileSelector(path, recursive=recursive, allow_not_found=True))
        out = []
        for i in infos:
            mtime = i.mtime_ns // 1_000_000 if i.mtime_ns is not None else 0
            out.append(FileInfo(i.path, i.base_name, i.size or 0, mtime, i.type == pafs.FileType.Directory))
        return out

    def read_bytes(self, path: str) -> bytes:
        try:
            if self.local:
                with open(path, "rb") as f:
                    return f.read()
            store = self._store
            if store is not None:
                data = store.get(path)
                assert data is not None  # no limit asked
                return data
            with self.fs.open_input_stream(path) as f:
                return bytes(f.read())
        except FileNotFoundError:
            raise NotFoundError(f"file not found: {path}") from None

    def read_immutable(self, path: str) -> bytes:
        """`read_bytes` of a file that is never rewritten under its name (its name carries a uuid): on an object
        store the bytes are kept in a bounded cache, so a second read of it costs no request."""
        if self._store is None:
            return self.read_bytes(path)
        with self._immutable_lock:
            data = self._immutable.get(path)
            if data is not None:
                self._immutable.move_to_end(path)
                return data
        data = self.read_bytes(path)
        self._remember(path, data)
        return data

    def open_input(self, path: str) -> pa.NativeFile:
        """A file for random access (Parquet): memory-mapped on a local disk; on an object store the whole object
        in one GET when it is at most `WHOLE_READ_MAX` bytes, else pyarrow's ranged reads."""
        if self.local:
            try:
                return pa.memory_map(path, "r")  # zero-copy reads of local Parquet files
            except FileNotFoundError:
                raise NotFoundError(f"file not found: {path}") from None
        store = self._store
        if store is not None:
            with self._immutable_lock:
                ahead = self._prefetched.pop(path, None)
            if ahead is not None:
                return pa.BufferReader(ahead)
            try:
                data = store.get(path, limit=WHOLE_READ_MAX)
            except FileNotFoundError:
                raise NotFoundError(f"file not found: {path}") from None
            if data is not None:
                return pa.BufferReader(data)
        return self.fs.open_input_file(path)

    def prefetch(self, paths: Sequence[str]) -> None:
        """Fetch the objects at `paths` concurrently, each for the one `open_input` of it that follows: a caller
        about to read several files one after the other (a compaction's section) waits for one round trip, not
        one per file. Only on an object store, and only objects of at most `WHOLE_READ_MAX` bytes; a file that
        cannot be fetched now is left to `open_input`, which reports the problem."""
        store = self._store
        if store is None:
            return
        with self._immutable_lock:
            paths = [p for p in paths if p not in self._prefetched]  # fetched ahead already
        if len(paths) < 2:
            return

        def fetch(path: str) -> bytes | None:
            try:
                return store.get(path, limit=WHOLE_READ_MAX)
            except OSError:
                return None

        with concurrent.futures.ThreadPoolExecutor(min(PREFETCH_CONCURRENCY, len(paths)),
                                                   thread_name_prefix="lsmlake-prefetch") as pool:
            fetched = list(pool.map(fetch, paths))
        with self._immutable_lock:
            for path, data in zip(paths, fetched, strict=True):
                if data is not None:
                    self._prefetched[path] = data

    def forget_prefetched(self, paths: Sequence[str]) -> None:
        """Drop what `prefetch` fetched and nobody opened (a read that failed half-way)."""
        with self._immutable_lock:
            for path in paths:
                self._prefetched.pop(path, None)

    # -- writes --------------------------------------------------------------------------------

    def mkdirs(self, path: str) -> None:
        """Create a directory and its missing parents; on a local disk each new entry is synced into its parent.

        On an object store this writes folder marker objects: only for what must exist while empty (a database);
        files need no parent there (`write_bytes` makes none)."""
        if not self.local:
            self.fs.create_dir(path, recursive=True)
            return
        if os.path.isdir(path):
            return
        missing = []
        d = path
        while not os.path.isdir(d) and os.path.dirname(d) != d:
            missing.append(d)
            d = os.path.dirname(d)
        for d in reversed(missing):
            try:
                os.mkdir(d)
            except FileExistsError:
                if not os.path.isdir(d):
                    raise
                # made by a concurrent writer, whose parent sync may not have happened yet: ours covers it
            _fsync_dir(os.path.dirname(d))

    def write_bytes(self, path: str, data: bytes, sync_dir: bool = True) -> None:
        """Write a new file under a fresh name (no other writer uses this name).

        On a local disk the content is synced before the file is closed and, unless `sync_dir` is False
        (the caller syncs the directory once for a batch of files, see `sync_dir`), the directory after.
        On failure (disk full, say) the partial file is removed and StorageError raised.
        """
        directory = os.path.dirname(path)
        try:
            if self.conditional is None:  # an S3, GCS or Azure key needs no parent: spare the requests
                self.mkdirs(directory)  # a full disk refuses new directories too
            self._write_file(path, data)
            if sync_dir and self.local:
                _fsync_dir(directory)
        except OSError as e:
            self.delete_quietly(path)
            raise _storage_error("write", path, e) from e

    def write_immutable(self, path: str, data: bytes, sync_dir: bool = True) -> None:
        """`write_bytes` of a file never rewritten under its name: on an object store its bytes are kept for
        `read_immutable`, so the writer's next commit reads back none of it."""
        self.write_bytes(path, data, sync_dir=sync_dir)
        if self._store is not None:
            self._remember(path, data)

    def _remember(self, path: str, data: bytes) -> None:
        if len(data) > IMMUTABLE_CACHE_BYTES // 8:
            return  # one large file would push out many small ones
        with self._immutable_lock:
            old = self._immutable.pop(path, None)
            if old is not None:
                self._immutable_bytes -= len(old)
            self._immutable[path] = data
            self._immutable_bytes += len(data)
            while self._immutable_bytes > IMMUTABLE_CACHE_BYTES:
                _, dropped = self._immutable.popitem(last=False)
                self._immutable_bytes -= len(dropped)

    def forget(self, path: str) -> None:
        """Drop a file from the immutable cache (it was deleted: a rolled-back commit, an expiration)."""
        with self._immutable_lock:
            old = self._immutable.pop(path, None)
            if old is not None:
                self._immutable_bytes -= len(old)

    def sync_dir(self, path: str) -> None:
        """Make the names created in a local directory survive a power cut; nothing to do on an object store.

        Raises StorageError when the storage cannot sync (then the names may be lost).
        """
        if not self.local:
            return
        try:
            _fsync_dir(path)
        except OSError as e:
            raise _storage_error("sync", path, e) from e

    def overwrite_atomic(self, path: str, data: bytes) -> None:
        """Replace a file so that readers see the old or the new content, never a torn one.

        On a local disk the new content is synced before the rename and the directory after it. On S3, GCS and
        Azure an upload replaces an object atomically: one write, no temp object to copy.
        """
        if self.conditional is not None:
            self.write_bytes(path, data)
            return
        tmp = self._temp_name(path)
        self.write_bytes(tmp, data, sync_dir=False)  # the rename is what the directory sync must keep
        try:
            self._rename(tmp, path)
        except OSError as e:
            self.delete_quietly(tmp)
            raise _storage_error("replace", path, e) from e
        self.sync_dir(os.path.dirname(path))

    def write_if_absent(self, path: str, data: bytes) -> bool:
        """Publish `data` at `path` only if nothing is there; False when the target exists.

        On a local disk: 1. write a temp file beside the target (its content synced here, so nothing unsynced
        is ever published); 2. hard-link it to the target (fails if the target exists, atomically across
        processes); 3. remove the temp name; 4. sync the directory, so the published name survives a power cut.
        On S3, GCS or Azure: one conditional create (after the once-per-warehouse probe, see `_use_conditional`).
        Elsewhere: temp file, then check and move under an in-process lock.

        A StorageError from step 1 means nothing was published; from the link, the create or step 4, the caller
        checks whether the target holds its content (and, on a local disk, must treat its durability as
        unknown: the directory sync did not complete). A store that cannot create conditionally raises
        StorageError here, before anything is written (unless publications are serialised).
        """
        if not self.local and self._use_conditional():
            try:
                return self._create(path, data)
            except OSError as e:
                raise _storage_error("publish", path, e) from e
        tmp = self._temp_name(path)
        self.write_bytes(tmp, data, sync_dir=False)  # the temp name is removed again: only the link needs a sync
        try:
            if self.local:
                try:
                    self._link(tmp, path)
                except FileExistsError:
                    return False
            else:
                with _CHECK_THEN_WRITE_LOCK:
                    if self.exists(path):
                        return False
                    self._rename(tmp, path)
                    return True
        except OSError as e:
            raise _storage_error("publish", path, e) from e
        finally:
            self.delete_quietly(tmp)
        self.sync_dir(os.path.dirname(path))  # after removing the temp name: one sync keeps both changes
        return True

    def _use_conditional(self) -> bool:
        """Whether publication is a conditional create: the store has one and refuses a second create.

        The probe runs once per warehouse and process (`ConditionalCreate.refuses_second_create`). When it
        fails, StorageError, unless the caller serialises publications: then a warning, and the in-process lock.
        """
        if self.conditional is None:
            return False
        if self._conditional_ok is None:
            cc = self.conditional
            ok = cc.refuses_second_create(self.root)
            if not ok:
                problem = (f"the object store ({cc.label}) does not refuse to create an object that exists "
                           f"(conditional create: If-None-Match / ifGenerationMatch=0), so processes committing "
                           f"to the warehouse {self.root} could overwrite each other's snapshots")
                if not self.publications_serialized:
                    raise PublicationUnsupportedError(f"{problem}; commit through the catalog service (catalog-svc "
                                                      "serialises commits), or use a store that supports conditional "
                                                      "writes")
                _log.warning("%s; publications are serialised by the caller, so they check and write under "
                             "an in-process lock", problem)
            self._conditional_ok = ok
        return self._conditional_ok

    # -- the primitives a fault-injecting FileIO (`fault_fs`) wraps ---------------------------

    def _write_file(self, path: str, data: bytes) -> None:
        if self.local:
            with open(path, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())  # before the close, so before any rename or link publishes the file
        elif self._store is not None:
            self._store.put(path, data)
        else:
            with self.fs.open_output_stream(path) as f:
                f.write(data)

    def _create(self, path: str, data: bytes) -> bool:
        """One conditional create on the object store; False when the object exists."""
        assert self.conditional is not None
        created, tag = self.conditional.create_tagged(path, data)
        if created and tag:
            with self._created_lock:
                if len(self._created_tags) >= _MAX_CREATED_TAGS:  # tags nobody asked for: drop the oldest
                    self._created_tags.pop(next(iter(self._created_tags)))
                self._created_tags[path] = tag
        return created

    def created_tag(self, path: str) -> str | None:
        """The entity tag of the object this FileIO just published at `path` (`write_if_absent`), once; None when
        unknown (a local disk, a store that gives none, or asked before)."""
        with self._created_lock:
            return self._created_tags.pop(path, None)

    def read_tagged(self, path: str) -> tuple[bytes, str | None]:
        """`read_bytes`, and on an object store the object's entity tag (None elsewhere)."""
        store = self._store
        if store is None:
            return self.read_bytes(path), None
        try:
            return store.get_tagged(path)
        except FileNotFoundError:
            raise NotFoundError(f"file not found: {path}") from None

    def tag(self, path: str) -> str | None:
        """The entity tag of the object at `path` (one HEAD on an object store); None when there is no object, or
        on a local disk (which has none: callers there read the file instead)."""
        store = self._store
        return None if store is None else store.tag(path)

    def _rename(self, src: str, dst: str) -> None:
        if self.local:
            os.replace(src, dst)
        else:
            self.fs.move(src, dst)

    def _link(self, src: str, dst: str) -> None:
        os.link(src, dst)

    def delete(self, path: str) -> None:
        self.forget(path)
        if self.local:
            os.remove(path)
        else:
            self.fs.delete_file(path)

    def delete_quietly(self, path: str) -> bool:
        try:
            self.delete(path)
            return True
        except (FileNotFoundError, OSError):
            return False

    def delete_dir_if_empty(self, path: str) -> None:
        if self.local:
            try:
                os.rmdir(path)
            except OSError:
                pass
        elif not self.list(path):
            self.fs.delete_dir(path)

    @staticmethod
    def _temp_name(path: str) -> str:
        d, name = os.path.split(path)
        return os.path.join(d, f".{name}.{uuid.uuid4()}.tmp")


def _fsync_dir(path: str) -> None:
    """Sync a local directory: the names created, linked, renamed or removed in it survive a power cut."""
    fd = os.open(path or ".", os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _storage_error(action: str, path: str, cause: OSError) -> StorageError:
    """A StorageError naming the file and the storage's complaint (errno kept for callers that branch on it)."""
    if isinstance(cause, StorageError):
        return cause
    what = os.strerror(cause.errno) if cause.errno else str(cause)
    hint = " (the warehouse storage is full)" if cause.errno in (errno.ENOSPC, errno.EDQUOT) else ""
    e = StorageError(f"cannot {action} {path}: {what}{hint}")
    e.errno = cause.errno
    return e
