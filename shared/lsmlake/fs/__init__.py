"""Files: the FileIO every layer reads and writes through, and its fault-injecting test double.

`open_path` is where a FileIO is made: it picks the filesystem of a URI and, with `LSMLAKE_FAULT_FS` set (a test
facility, see `faults`), wraps it in fault injection, checked once per FileIO so a normal one pays nothing.
"""

from __future__ import annotations

import os

import pyarrow.fs as pafs

from lsmlake.fs.file_io import FileIO

#: environment variable that turns on fault injection (a test facility: see `faults`)
FAULT_FS_ENV = "LSMLAKE_FAULT_FS"

__all__ = ["FAULT_FS_ENV", "FileIO", "open_path"]


def open_path(uri: str, fs: pafs.FileSystem | None = None) -> tuple[FileIO, str]:
    """The FileIO for a warehouse URI or plain path (or a path in the given filesystem), and the path in it."""
    if fs is not None:
        fs, path, local = fs, uri.rstrip("/"), isinstance(fs, pafs.LocalFileSystem)
    elif "://" not in uri:
        fs, path, local = pafs.LocalFileSystem(), os.path.abspath(uri), True
    else:
        fs, path = pafs.FileSystem.from_uri(uri)
        local = isinstance(fs, pafs.LocalFileSystem)
    spec = os.environ.get(FAULT_FS_ENV)
    if spec:
        from lsmlake.fs.faults import FaultyFileIO, injector_for

        return FaultyFileIO(fs, local, injector_for(spec)), path
    return FileIO(fs, local), path
