"""Snapshots: the JSON files under `snapshot/`, the LATEST/EARLIEST hints, and their publication."""

from __future__ import annotations

import concurrent.futures
import json
import logging
import os
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from lsmlake.errors import CorruptMetadataError, NotFoundError
from lsmlake.fs.file_io import FileIO
from lsmlake.runtime.thread_pools import SharedPool

APPEND = "APPEND"
COMPACT = "COMPACT"
OVERWRITE = "OVERWRITE"
ANALYZE = "ANALYZE"
COMMIT_KINDS = (APPEND, COMPACT, OVERWRITE, ANALYZE)

BATCH_COMMIT_IDENTIFIER = 9223372036854775807  # Long.MAX_VALUE, what batch writers use
WRITER_VERSION = "lsmlake-0.1.0"

# JSON key -> attribute, in the order Paimon writes them.
_FIELDS = [
    ("version", "version"), ("id", "id"), ("schemaId", "schema_id"),
    ("baseManifestList", "base_manifest_list"), ("deltaManifestList", "delta_manifest_list"),
    ("changelogManifestList", "changelog_manifest_list"), ("indexManifest", "index_manifest"),
    ("commitUser", "commit_user"), ("commitIdentifier", "commit_identifier"), ("commitKind", "commit_kind"),
    ("timeMillis", "time_millis"), ("totalRecordCount", "total_record_count"),
    ("deltaRecordCount", "delta_record_count"), ("changelogRecordCount", "changelog_record_count"),
    ("watermark", "watermark"), ("statistics", "statistics"), ("properties", "properties"),
    ("nextRowId", "next_row_id"), ("baseManifestListSize", "base_manifest_list_size"),
    ("deltaManifestListSize", "delta_manifest_list_size"),
    ("changelogManifestListSize", "changelog_manifest_list_size"), ("uuid", "uuid"),
    ("writerVersion", "writer_version"),
]


@dataclass(frozen=True)
class Snapshot:
    """One committed version of a table."""

    id: int
    schema_id: int
    base_manifest_list: str
    delta_manifest_list: str
    commit_user: str
    commit_identifier: int
    commit_kind: str
    time_millis: int
    total_record_count: int
    delta_record_count: int
    version: int = 3
    changelog_manifest_list: str | None = None
    index_manifest: str | None = None
    changelog_record_count: int | None = None
    watermark: int | None = None
    statistics: str | None = None
    properties: dict[str, str] | None = None
    next_row_id: int | None = None
    base_manifest_list_size: int | None = None
    delta_manifest_list_size: int | None = None
    changelog_manifest_list_size: int | None = None
    uuid: str | None = None
    writer_version: str | None = WRITER_VERSION
    unknown: dict[str, Any] = field(default_factory=dict, compare=False)

    def to_json(self) -> str:
        d: dict[str, Any] = {}
        for key, attr in _FIELDS:
            v = getattr(self, attr)
            if v is not None:
                d[key] = v
        for k, v in self.unknown.items():
            d.setdefault(k, v)
        return json.dumps(d, indent=2)

    @staticmethod
    def from_json(text: str | bytes) -> Snapshot:
        try:
            d = json.loads(text)
            kwargs = {attr: d[key] for key, attr in _FIELDS if key in d}
            known = {key for key, _ in _FIELDS}
            kwargs["unknown"] = {k: v for k, v in d.items() if k not in known}
            return Snapshot(**kwargs)
        except (TypeError, ValueError) as e:
            raise CorruptMetadataError(f"cannot parse snapshot JSON: {e}") from None

    def to_dict(self) -> dict[str, Any]:
        """A flat description for the CLI and the services."""
        return {"id": self.id, "schema_id": self.schema_id, "commit_kind": self.commit_kind,
                "time_millis": self.time_millis, "total_record_count": self.total_record_count,
                "delta_record_count": self.delta_record_count, "commit_user": self.commit_user,
                "commit_identifier": self.commit_identifier, "properties": self.properties or {}}


_log = logging.getLogger(__name__)
#: the object-store requests `SnapshotManager.latest` sends side by side
_LOOKUPS = SharedPool("lsmlake-snapshot-lookup", 4)
#: the LATEST hints written after their commit returned, on an object store; one thread, so that the hints of a
#: table land in the order their snapshots were published
_HINTS = SharedPool("lsmlake-latest-hint", 1)
_pending_hints: dict[str, concurrent.futures.Future[None]] = {}  # snapshot folder -> its last hint queued
_pending_lock = threading.Lock()


def _forget_pending_in_child() -> None:
    # a forked child has not the thread that would write its parent's hints: waiting for them would never end
    global _pending_lock
    _pending_lock = threading.Lock()
    _pending_hints.clear()


os.register_at_fork(after_in_child=_forget_pending_in_child)


def settle_hints(prefix: str = "") -> None:
    """Wait until the LATEST hints queued by this process for the snapshot folders under `prefix` are written: a
    table being dropped must not get a hint back after its folder is deleted."""
    folder = prefix.rstrip("/")
    with _pending_lock:
        waiting = [f for d, f in _pending_hints.items() if not folder or d == folder or d.startswith(folder + "/")]
    concurrent.futures.wait(waiting)


class SnapshotManager:
    """Finds, reads and publishes the snapshots of one table."""

    def __init__(self, io: FileIO, table_path: str) -> None:
        self.io = io
        self.dir = f"{table_path}/snapshot"
        # on an object store: the newest snapshot this manager read or published, with its entity tag and when it
        # was last seen to be the latest (time.monotonic() before that look), so that the next `latest` checks it
        # (two HEADs at once) instead of reading the hint and the snapshot again, or trusts a look just made
        self._known: tuple[Snapshot, str, float] | None = None
        self._known_lock = threading.Lock()

    def path(self, snapshot_id: int) -> str:
        return f"{self.dir}/snapshot-{snapshot_id}"

    def ids(self) -> list[int]:
        out = []
        for info in self.io.list(self.dir):
            n = info.name
            if n.startswith("snapshot-") and n[9:].isdigit():
                out.append(int(n[9:]))
        return sorted(out)

    def _hint(self, name: str) -> int | None:
        try:
            text = self.io.read_bytes(f"{self.dir}/{name}").decode().strip()
            return int(text) if text.isdigit() else None
        except NotFoundError:
            return None

    def latest_id(self) -> int | None:
        """The newest snapshot id; LATEST is trusted when no newer snapshot file exists (as Paimon trusts it: the
        hint is written after its snapshot, and the latest snapshot is never expired). Two requests on an object
        store."""
        hint = self._hint("LATEST")
        if hint is not None and self._hint_holds(hint):
            return hint
        ids = self.ids()
        return ids[-1] if ids else None

    def _hint_holds(self, hint: int) -> bool:
        """Whether snapshot `hint` exists and no snapshot after it does (both looked at at once on an object store):
        a hint can name a snapshot that is gone (a drop that raced the hint's write, a crashed rollback)."""
        if self.io.local:
            return self.io.file_exists(self.path(hint)) and not self.io.file_exists(self.path(hint + 1))
        looking = _LOOKUPS.get().submit(self.io.file_exists, self.path(hint + 1))
        exists = self.io.file_exists(self.path(hint))
        return exists and not looking.result()

    def earliest_id(self) -> int | None:
        hint = self._hint("EARLIEST")
        if hint is not None and self.io.file_exists(self.path(hint)) and not self.io.file_exists(self.path(hint - 1)):
            return hint
        ids = self.ids()
        return ids[0] if ids else None

    def _remember(self, snap: Snapshot, tag: str | None, seen_latest_at: float = float("-inf")) -> None:
        """Keep `snap` (with its entity tag) as the newest known; `seen_latest_at`: when a look that began then
        found no snapshot after it."""
        if not tag:
            return
        with self._known_lock:
            known = self._known
            if known is None or known[0].id < snap.id or (
                    known[0].id == snap.id and (known[1] != tag or known[2] <= seen_latest_at)):
                self._known = (snap, tag, seen_latest_at)

    def _tagged_or_none(self, snapshot_id: int) -> tuple[Snapshot, str | None] | None:
        """The snapshot read from an object store, and its entity tag; None when it does not exist."""
        try:
            data, tag = self.io.read_tagged(self.path(snapshot_id))
        except NotFoundError:
            return None
        return Snapshot.from_json(data), tag

    def _snapshot_or_none(self, snapshot_id: int) -> Snapshot | None:
        try:
            return self.snapshot(snapshot_id)
        except NotFoundError:
            return None

    def snapshot(self, snapshot_id: int) -> Snapshot:
        try:
            return Snapshot.from_json(self.io.read_bytes(self.path(snapshot_id)))
        except NotFoundError:
            raise NotFoundError(f"snapshot {snapshot_id} does not exist") from None

    def latest(self, trust_look_within_s: float = 0.0) -> Snapshot | None:
        """The newest snapshot: the one LATEST names, read (which shows that it exists), once no snapshot after it
        exists (one existence check); else found by listing. Three requests on an object store, not seven.

        `trust_look_within_s`: on an object store, the snapshot this manager last saw to be the latest, if it saw
        so less than that many seconds ago, with no request at all. A commit's first attempt takes its writer's
        look this way: publication is a create that fails when the id is taken, so a stale look costs a retry,
        never a lost commit (`lsmlake.table.commit.reusable_look_s`: when the table's retention allows it).
        """
        started = time.monotonic()
        with self._known_lock:
            known = self._known
        if known is not None:
            snap, tag, seen_latest_at = known
            if started - seen_latest_at < trust_look_within_s:
                return snap
            # the snapshot known, unchanged (same entity tag: not expired, nor the table dropped and made again),
            # with none after it, is the latest: one round trip of two HEADs
            looking = _LOOKUPS.get().submit(self.io.file_exists, self.path(snap.id + 1))
            same = self.io.tag(self.path(snap.id)) == tag
            if not looking.result() and same:
                self._remember(snap, tag, started)
                return snap
        if not self.io.local:
            settle_hints(self.dir)  # a hint this process has still to write: read it, not the one before it
        hint = self._hint("LATEST")
        if hint is not None:
            if self.io.local:
                newer = self.io.file_exists(self.path(hint + 1))
                found = None if newer else self._snapshot_or_none(hint)
            else:  # two round trips at once: the look past the hint and the read of the hinted snapshot
                looking = _LOOKUPS.get().submit(self.io.file_exists, self.path(hint + 1))
                tagged = self._tagged_or_none(hint)
                newer = looking.result()
                found = None if tagged is None else tagged[0]
                if tagged is not None:  # remembered as the latest only when none came after it
                    self._remember(*tagged, float("-inf") if newer else started)
            if not newer and found is not None:
                return found
            # a newer snapshot than the hint, or the hinted one gone (never published, expired, or its table
            # dropped): list, whatever the hint says
        ids = self.ids()
        return self.snapshot(ids[-1]) if ids else None

    def snapshots(self) -> list[Snapshot]:
        out = []
        for sid in self.ids():
            try:
                out.append(self.snapshot(sid))
            except NotFoundError:  # expired while we listed
                continue
        return out

    def at_time(self, time_millis: int) -> Snapshot | None:
        """The newest snapshot committed at or before `time_millis` (epoch ms); None when every one is later."""
        found = None
        for s in self.snapshots():
            if s.time_millis <= time_millis:
                found = s
        return found

    def publish(self, snapshot: Snapshot) -> bool:
        """Write `snapshot-<id>` if no one else has; then move the LATEST hint. False if the id was taken.

        On a local disk the snapshot's content is synced before it is linked into place and the
        directory after (`FileIO.write_if_absent`): a snapshot that was published survives a power cut.
        On an object store the hint is written after this returns (`settle_hints` waits for it): it is a round
        trip the commit's caller need not wait for, as every reader (ours, Paimon's, pypaimon's) checks that no
        snapshot follows the one LATEST names and lists the folder when one does.
        """
        path, data = self.path(snapshot.id), snapshot.to_json().encode()
        started = time.monotonic()
        if not self.io.write_if_absent(path, data):
            return False
        # published: what follows only saves later requests, and must not turn the success into an error (the
        # committer would remove the manifests the snapshot names)
        try:
            tag = self.io.created_tag(path)
            if tag:  # remembered as a reader would read it back, and as the latest when it was created
                self._remember(Snapshot.from_json(data), tag, started)
        except Exception:  # noqa: BLE001 - the next `latest` reads the snapshot instead
            _log.warning("cannot remember snapshot %d of %s", snapshot.id, self.dir, exc_info=True)
        if self.io.local:
            self.write_hint("LATEST", snapshot.id)
        else:
            self._write_hint_later(snapshot.id)
        return True

    def _write_hint_later(self, snapshot_id: int) -> None:
        folder = self.dir

        def forget(done: concurrent.futures.Future[None]) -> None:
            with _pending_lock:
                if _pending_hints.get(folder) is done:
                    del _pending_hints[folder]

        try:
            with _pending_lock:
                queued = _pending_hints[folder] = _HINTS.get().submit(self.write_hint, "LATEST", snapshot_id)
        except RuntimeError:  # the interpreter is shutting down: no new threads
            self.write_hint("LATEST", snapshot_id)
            return
        queued.add_done_callback(forget)

    def write_hint(self, name: str, snapshot_id: int) -> None:
        try:
            self.io.overwrite_atomic(f"{self.dir}/{name}", str(snapshot_id).encode())
        except Exception:  # noqa: BLE001 - a hint is an optimisation; readers fall back to listing
            pass
