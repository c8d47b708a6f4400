"""Files: the FileIO every layer reads and writes through.

`open_path` is where a FileIO is made: it picks the filesystem of a URI and the conditional create of an S3,
GCS or Azure store (`conditional_create`: how snapshots are published there), then hands the FileIO to the
process's wrapper if one was set (`set_file_io_wrapper`), so that all storage access of a process can be
instrumented in one place; without one the FileIO is used as made.

Importing the package loads no pyarrow: `FileIO` and `ConditionalCreate` are imported on first use, so that
`lsmlake.fs.storage_settings` is as light as it is (the `lake` command line names settings before it opens files).
"""

from __future__ import annotations

import os
import urllib.parse
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from lsmlake.fs.storage_settings import StorageSettings

if TYPE_CHECKING:
    import pyarrow.fs as pafs

    from lsmlake.fs.file_io import FileIO

#: what `set_file_io_wrapper` takes: a function from a new FileIO to the one to use instead
FileIOWrapper = Callable[["FileIO"], "FileIO"]

__all__ = ["FileIO", "FileIOWrapper", "StorageSettings", "open_path", "set_file_io_wrapper"]


def __getattr__(name: str) -> Any:
    if name == "FileIO":
        from lsmlake.fs.file_io import FileIO

        return FileIO
    if name == "ConditionalCreate":
        from lsmlake.fs.conditional_create import ConditionalCreate

        return ConditionalCreate
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


_wrapper: FileIOWrapper | None = None


def set_file_io_wrapper(wrapper: FileIOWrapper | None) -> FileIOWrapper | None:
    """Hand every FileIO `open_path` makes from now on to `wrapper` (None: to none); returns the one replaced.

    Process-wide: FileIOs made before keep what they were. Nothing in lsmlake sets one.
    """
    global _wrapper
    previous, _wrapper = _wrapper, wrapper
    return previous


def open_path(uri: str, fs: pafs.FileSystem | None = None, publications_serialized: bool = False,
              storage: StorageSettings | None = None) -> tuple[FileIO, str]:
    """The FileIO for a warehouse URI or plain path (or a path in the given filesystem), and the path in it.

    `publications_serialized`: the caller serialises publications across processes (the catalog service), so a
    store without conditional create is a warning rather than an error (see `FileIO`).
    `storage`: S3 settings from the caller's options; an `s3://` URI is opened with the environment's settings,
    overridden by these, overridden by the URI's own (`lsmlake.fs.storage_settings`).
    """
    import pyarrow.fs as pafs

    from lsmlake.fs.conditional_create import ConditionalCreate
    from lsmlake.fs.file_io import FileIO

    scheme = ""
    if fs is not None:
        fs, path, local = fs, uri.rstrip("/"), isinstance(fs, pafs.LocalFileSystem)
        source = None
    elif "://" not in uri:
        fs, path, local = pafs.LocalFileSystem(), os.path.abspath(uri), True
        source = None
    elif uri.startswith(("s3://", "s3a://")):
        settings = StorageSettings.from_env().overlay(storage or StorageSettings()).overlay(
            StorageSettings.from_uri(uri))
        fs = pafs.S3FileSystem(**settings.filesystem_options())
        split = urllib.parse.urlsplit(uri)
        path = (split.hostname or "") + split.path.rstrip("/")
        local, source, scheme = False, uri, "s3"
    else:
        fs, path = pafs.FileSystem.from_uri(uri)
        local = isinstance(fs, pafs.LocalFileSystem)
        source = uri
        scheme = "" if local else uri.split("://", 1)[0]
    conditional = None if local else ConditionalCreate.for_filesystem(fs, source)
    io = FileIO(fs, local, conditional=conditional, root=path, publications_serialized=publications_serialized,
                scheme=scheme)
    wrapper = _wrapper
    return (io if wrapper is None else wrapper(io)), path
