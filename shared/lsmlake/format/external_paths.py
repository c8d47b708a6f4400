"""Where a table's files may live: its own folder, and the external roots its options name.

A manifest entry's `external_path` is trusted by every reader and, once the file is unreachable, by
expiration, which deletes it. So a path is accepted only in normal form (no `.`/`..` or empty segments,
no backslash or NUL, no trailing slash) and strictly under the table folder or one of the roots in
`data-file.external-paths`; the same test guards every deletion.
"""

from __future__ import annotations

from lsmlake.errors import InvalidInputError
from lsmlake.format.options import DATA_FILE_EXTERNAL_PATHS, TableOptions

MAX_PATH_CHARS = 4096


def _segments(path: str) -> tuple[str, list[str]] | None:
    """(scheme part, path segments) of a normal path; None when the path is not in normal form."""
    if not path or len(path) > MAX_PATH_CHARS or "\\" in path or "\x00" in path:
        return None
    scheme, sep, rest = path.partition("://")
    if not sep:
        scheme, rest = "", path
    elif not scheme.isalnum():
        return None
    if not rest.startswith("/") and not sep:
        return None  # a relative local path means nothing to a reader in another working directory
    body = rest[1:] if rest.startswith("/") else rest
    parts = body.split("/")
    if any(p in ("", ".", "..") for p in parts):
        return None
    return scheme + sep + ("/" if rest.startswith("/") else ""), parts


def is_normal(path: str) -> bool:
    """Whether `path` is absolute (or a URI) in normal form."""
    return _segments(path) is not None


def is_under(path: str, root: str) -> bool:
    """Whether `path` lies strictly inside `root` (both compared in normal form)."""
    p, r = _segments(path), _segments(root.rstrip("/") or root)
    if p is None or r is None or p[0] != r[0]:
        return False
    return len(p[1]) > len(r[1]) and p[1][:len(r[1])] == r[1]


def external_roots(options: TableOptions) -> list[str]:
    """The roots of `data-file.external-paths`; InvalidInputError for one that is not a normal absolute path."""
    text = options.get(DATA_FILE_EXTERNAL_PATHS) or ""
    roots = [r.strip().rstrip("/") for r in text.split(",") if r.strip()]
    for r in roots:
        if not is_normal(r):
            raise InvalidInputError(f"option 'data-file.external-paths': {r!r} is not an absolute path in normal form")
    return roots


def check_external_path(path: str, options: TableOptions, where: str) -> None:
    """InvalidInputError naming `where` unless `path` may hold a data file of this table."""
    if not is_normal(path):
        raise InvalidInputError(f"{where}: external_path {path[:200]!r} is not an absolute path in normal form "
                                "(no '.', '..' or empty segments, no backslash or NUL)")
    roots = external_roots(options)
    if not roots:
        raise InvalidInputError(f"{where}: external_path {path[:200]!r} is not accepted: the table names no "
                                "external roots (table option 'data-file.external-paths')")
    if not any(is_under(path, r) for r in roots):
        raise InvalidInputError(f"{where}: external_path {path[:200]!r} is not under an external root of the "
                                f"table ({', '.join(roots)})")


def may_delete(path: str, table_path: str, options: TableOptions) -> bool:
    """Whether maintenance may delete `path`: inside the table folder or under one of its external roots."""
    if is_under(path, table_path):
        return True
    try:
        roots = external_roots(options)
    except InvalidInputError:
        return False
    return any(is_under(path, r) for r in roots)
