"""Files: the FileIO every layer reads and writes through, and its fault-injecting test double.

`open_path` is where a FileIO is made: it picks the filesystem of a URI, the conditional create of an S3, GCS or
Azure store (`conditional_create`: how snapshots are published there) and, with `LSMLAKE_FAULT_FS` set (a test
facility, see `faults`), wraps it in fault injection, checked once per FileIO so a normal one pays nothing.
"""

from __future__ import annotations

import os

import pyarrow.fs as pafs

from lsmlake.fs.conditional_create import ConditionalCreate
from lsmlake.fs.file_io import FileIO

#: environment variable that turns on fault injection (a test facility: see `faults`)
FAULT_FS_ENV = "LSMLAKE_FAULT_FS"

__all__ = ["FAULT_FS_ENV", "FileIO", "open_path"]


def open_path(uri: str, fs: pafs.FileSystem | None = None,
              publications_serialized: bool = False) -> tuple[FileIO, str]:
    """The FileIO for a warehouse URI or plain path (or a path in the given filesystem), and the path in it.

    `publications_serialized`: the caller serialises publications across processes (the catalog service), so a
    store without conditional create is a warning rather than an error (see `FileIO`).
    """
    if fs is not None:
        fs, path, local = fs, uri.rstrip("/"), isinstance(fs, pafs.LocalFileSystem)
        source = None
    elif "://" not in uri:
        fs, path, local = pafs.LocalFileSystem(), os.path.abspath(uri), True
        source = None
    else:
        fs, path = pafs.FileSystem.from_uri(uri)
        local = isinstance(fs, pafs.LocalFileSystem)
        source = uri
    conditional = None if local else ConditionalCreate.for_filesystem(fs, source)
    spec = os.environ.get(FAULT_FS_ENV)
    if spec:
        from lsmlake.fs.faults import FaultyFileIO, injector_for

        return FaultyFileIO(fs, local, injector_for(spec), conditional=conditional, root=path,
                            publications_serialized=publications_serialized), path
    return FileIO(fs, local, conditional=conditional, root=path, publications_serialized=publications_serialized), path
