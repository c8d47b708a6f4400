"""The process's FileIO wrapper: every FileIO `open_path` makes passes through it; none is set by default."""

from __future__ import annotations

from pathlib import Path

from lsmlake.fs import FileIO, open_path, set_file_io_wrapper


class _Marked(FileIO):
    pass


def test_open_path_hands_each_new_fileio_to_the_wrapper_until_it_is_removed(tmp_path: Path) -> None:
    seen: list[FileIO] = []

    def wrap(io: FileIO) -> FileIO:
        seen.append(io)
        return _Marked(io.fs, io.local, conditional=io.conditional, root=io.root)

    plain, _ = open_path(str(tmp_path))
    assert type(plain) is FileIO
    assert set_file_io_wrapper(wrap) is None, "lsmlake sets no wrapper of its own"
    try:
        wrapped, path = open_path(str(tmp_path))
    finally:
        assert set_file_io_wrapper(None) is wrap
    assert type(wrapped) is _Marked and path == str(tmp_path) and wrapped.root == path
    assert len(seen) == 1 and type(seen[0]) is FileIO and seen[0].root == path
    assert type(open_path(str(tmp_path))[0]) is FileIO and type(plain) is FileIO
