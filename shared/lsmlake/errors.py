"""The one exception hierarchy of lsmlake.

Subclasses are chosen by what the caller does next: fix the input, retry, stop cleaning up, or
report a missing object. Services map them to gRPC status codes in one place.
"""

from __future__ import annotations


class LakeError(Exception):
    """Root of every error lsmlake raises on purpose."""


class InvalidInputError(LakeError, ValueError):
    """The caller's input is wrong; nothing was changed. The message names the offending field."""


class SchemaMismatchError(InvalidInputError):
    """Rows whose columns or types do not fit the table's schema."""


class UnknownOptionError(InvalidInputError):
    """A table option key that lsmlake does not know."""


class NotFoundError(LakeError, LookupError):
    """A database, table, snapshot or file that does not exist."""


class PermissionDeniedError(LakeError):
    """The caller's token does not allow what the request would do; nothing was applied."""


class AlreadyExistsError(LakeError):
    """Creating something that already exists."""


class CommitConflictError(LakeError):
    """A commit lost a race it cannot win by retrying (its input files are gone). Nothing was applied."""


class CommitRetryExhaustedError(CommitConflictError):
    """A commit kept losing the snapshot-id race until its retry budget ran out."""


class CommitStateUnknownError(LakeError):
    """The outcome of a commit is unknown: it may be in the table. The caller must not delete the files it
    wrote; sending the commit again as it was (the same request id, or commit user and identifier) applies it
    at most once. A client raises it for any call that changes state (a write, a commit, a table change) whose
    service gave no definite answer (UNAVAILABLE, DEADLINE_EXCEEDED, INTERNAL...)."""


class StaleTableError(LakeError):
    """The table was dropped and created again since the caller loaded it: reload the table; nothing was applied."""


class StorageError(LakeError, OSError):
    """Writing to the warehouse failed (disk full, quota exceeded, I/O error): the operation that raised it
    was not applied and left nothing visible; retry once the storage is back. `errno` is the cause's."""


class PublicationUnsupportedError(StorageError):
    """The warehouse's store cannot publish a file only if it is absent (no conditional create), so a commit there
    could overwrite another's snapshot: refused before anything was sent. Commit through the catalog service."""


class CorruptMetadataError(LakeError):
    """A metadata file on disk cannot be parsed."""


class InvariantError(LakeError):
    """Metadata that breaks an invariant of the LSM tree (for example overlapping files in one sorted run)."""


class BackPressureError(LakeError):
    """A write waited for compaction longer than its deadline allows (too many sorted runs in a bucket),
    or asked for more than a service accepts at once; retry later."""


class UnsupportedOperationError(LakeError):
    """The operation is not supported here (by this store, this service or this version), whatever the input:
    nothing was applied, and asking again will not help; the message says what to do instead."""


class ServiceUnavailableError(LakeError):
    """The service cannot take the request now (it is shutting down, or a service it needs does not answer);
    nothing was applied, retry (on another replica)."""
