"""File access for warehouses on a local disk or on object storage, through `pyarrow.fs`.

The one operation that needs care is publishing a snapshot: it must fail when the target exists.
On a local filesystem that is a hard link (atomic across processes). Object stores offer no such
primitive through `pyarrow.fs`, so there the commit must be serialised by a lock the caller holds
(the catalog service does this); `write_if_absent` then only guards against a stale view.
"""

from __future__ import annotations

import os
import threading
import uuid
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.fs as pafs

from .errors import NotFoundError

# Object stores have no write-if-absent through pyarrow.fs: within one process this lock makes the
# check-and-move atomic; across processes the catalog service is the single committer.
_PUBLISH_LOCK = threading.Lock()


@dataclass(frozen=True)
class FileInfo:
    """One entry of a directory listing."""

    path: str
    name: str
    size: int
    mtime_ms: int
    is_dir: bool


class FileIO:
    """Reads and writes files below a warehouse root."""

    def __init__(self, fs: pafs.FileSystem, local: bool) -> None:
        self.fs = fs
        self.local = local

    @staticmethod
    def for_path(uri: str, fs: pafs.FileSystem | None = None) -> tuple[FileIO, str]:
        """The FileIO for a warehouse URI or plain path (or a path in the given filesystem)."""
        if fs is not None:
            return FileIO(fs, isinstance(fs, pafs.LocalFileSystem)), uri.rstrip("/")
        if "://" not in uri:
            return FileIO(pafs.LocalFileSystem(), True), os.path.abspath(uri)
        fs, path = pafs.FileSystem.from_uri(uri)
        return FileIO(fs, isinstance(fs, pafs.LocalFileSystem)), path

    # -- queries -------------------------------------------------------------------------------

    def exists(self, path: str) -> bool:
        if self.local:
            return os.path.exists(path)
        return bool(self.fs.get_file_info(path).type != pafs.FileType.NotFound)

    def is_dir(self, path: str) -> bool:
        if self.local:
            return os.path.isdir(path)
        return bool(self.fs.get_file_info(path).type == pafs.FileType.Directory)

    def size(self, path: str) -> int:
        if self.local:
            return os.path.getsize(path)
        return int(self.fs.get_file_info(path).size)

    def list(self, path: str, recursive: bool = False) -> list[FileInfo]:
        """Entries of a directory; an absent directory lists as empty."""
        if not self.exists(path):
            return []
        infos = self.fs.get_file_info(pafs.FileSelector(path, recursive=recursive))
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
            with self.fs.open_input_stream(path) as f:
                return bytes(f.read())
        except FileNotFoundError:
            raise NotFoundError(f"file not found: {path}") from None

    def open_input(self, path: str) -> pa.NativeFile:
        if self.local:
            try:
                return pa.memory_map(path, "r")  # zero-copy reads of local Parquet files
            except FileNotFoundError:
                raise NotFoundError(f"file not found: {path}") from None
        return self.fs.open_input_file(path)

    # -- writes --------------------------------------------------------------------------------

    def mkdirs(self, path: str) -> None:
        if self.local:
            os.makedirs(path, exist_ok=True)
        else:
            self.fs.create_dir(path, recursive=True)

    def write_bytes(self, path: str, data: bytes) -> None:
        """Write a new file under a fresh name (no other writer uses this name)."""
        self.mkdirs(os.path.dirname(path))
        if self.local:
            with open(path, "wb") as f:
                f.write(data)
        else:
            with self.fs.open_output_stream(path) as f:
                f.write(data)

    def overwrite_atomic(self, path: str, data: bytes) -> None:
        """Replace a file so that readers see the old or the new content, never a torn one."""
        tmp = self._temp_name(path)
        self.write_bytes(tmp, data)
        if self.local:
            os.replace(tmp, path)
        else:
            self.fs.move(tmp, path)

    def write_if_absent(self, path: str, data: bytes) -> bool:
        """Publish `data` at `path` only if nothing is there; False when the target exists.

        1. write a temp file beside the target; 2. hard-link it to the target (fails if the target
        exists, atomically across processes); 3. remove the temp name.
        """
        tmp = self._temp_name(path)
        self.write_bytes(tmp, data)
        try:
            if self.local:
                try:
                    os.link(tmp, path)
                except FileExistsError:
                    return False
                return True
            with _PUBLISH_LOCK:
                if self.exists(path):
                    return False
                self.fs.move(tmp, path)
                return True
        finally:
            self.delete_quietly(tmp)

    def delete(self, path: str) -> None:
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
