"""Committing file changes as a new snapshot: conflict checks, manifests, publication, retries.

The protocol, for one commit:
1. read the latest snapshot; if a snapshot already carries this commit's (user, identifier, kind),
   it landed before (a retry after a lost reply): stop;
2. check the commit against the latest snapshot (else: conflict, nothing applied): the caller's `validate`, every
   file it deletes is still live, and its index changes and the deletion vectors of the buckets whose files it
   deletes are what it planned on and lose nothing (`index_changes`);
3. write the delta manifest (once), the index manifest if the index changes, and a base manifest list holding
   the previous snapshot's manifests;
   on a local disk each is synced as written, and the `manifest/` directory once before step 4;
4. publish `snapshot-<latest+1>` with a write-if-absent (its content synced before the link, the
   `snapshot/` directory after); losing the race goes back to 1.
The data files a commit names were synced by their writer (`DataFileWriter`) before it sent them, so
after an acknowledged commit nothing it refers to can be lost to a power cut.
Files written for a lost attempt are deleted; on an unknown outcome nothing is deleted. A storage failure
(disk full) before or while publishing fails the commit with StorageError after deleting the metadata
it wrote: nothing was applied and the caller may retry the same messages once there is space.
"""

from __future__ import annotations

import concurrent.futures
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from lsmlake.errors import (
    CommitConflictError,
    CommitRetryExhaustedError,
    CommitStateUnknownError,
    NotFoundError,
    PublicationUnsupportedError,
    StorageError,
)
from lsmlake.format import options as opts
from lsmlake.format.index_manifest import DELETION_VECTORS, IndexEntry, IndexManifestStore
from lsmlake.format.manifest import ADD, DELETE, ManifestEntry, ManifestFileMeta, ManifestStore, merge_entries
from lsmlake.format.manifest_prune import BucketFilter
from lsmlake.format.snapshot import APPEND, BATCH_COMMIT_IDENTIFIER, COMPACT, OVERWRITE, Snapshot, SnapshotManager
from lsmlake.runtime.thread_pools import SharedPool
from lsmlake.table.index_changes import IndexChange, apply_index_change
from lsmlake.table.manifest_merge import MergeRules, merge_manifests
from lsmlake.table.write import CommitMessage

#: the metadata uploads a commit sends side by side on an object store
_UPLOADS = SharedPool("lsmlake-commit-upload", 4)
#: a delta manifest uploaded beside its list (a pool of its own: `_write_delta` runs on `_UPLOADS`, whose threads
#: must not wait on work queued behind them)
_DELTA_UPLOADS = SharedPool("lsmlake-commit-delta", 4)


#: how long a look at the latest snapshot may be trusted by the first attempt of a commit (see `reusable_look_s`)
LOOK_REUSE_S = 2.0
#: retention shorter than this may expire a snapshot made during a look's reuse (clocks of other machines differ)
_SHORTEST_SAFE_RETENTION_MS = 10 * 60 * 1000

_KEEP: set[bytes] = set()  # marker: an OVERWRITE commit that replaces no partition
#: a check of the latest snapshot before a commit is published on it (see `FileStoreCommit.commit`)
Validation = Callable[[Snapshot | None], None]


def reusable_look_s(options: opts.TableOptions) -> float:
    """How long a commit's first attempt may trust the writer's look at the latest snapshot (0: it looks again).

    A stale look makes the publication's create of `snapshot-<seen+1>` fail, as that id is taken, and the attempt
    is redone on a fresh look; unless the snapshot that took the id was expired meanwhile, which would let the
    create succeed below the latest snapshot. Retention expires a snapshot only when it is older than
    `snapshot.time-retained`, or beyond `snapshot.num-retained.max`: a look younger than LOOK_REUSE_S is safe
    when the first is long and the second unbounded (Paimon's defaults: 1 h, unbounded).
    """
    if options.require(opts.SNAPSHOT_NUM_RETAINED_MAX) < opts.SNAPSHOT_NUM_RETAINED_MAX.default:
        return 0.0
    if options.require(opts.SNAPSHOT_TIME_RETAINED) < _SHORTEST_SAFE_RETENTION_MS:
        return 0.0
    return LOOK_REUSE_S


@dataclass(frozen=True)
class CommitResult:
    """The snapshot a commit produced (or found already produced by an earlier attempt)."""

    snapshot_id: int
    already_committed: bool = False
    #: when the snapshot was made, as it records it (None for one found already made): known to the committer, so
    #: nobody needs to read the snapshot back for it
    time_millis: int | None = None


class FileStoreCommit:
    """Commits file changes of one table."""

    def __init__(self, snapshots: SnapshotManager, manifests: ManifestStore, schema_id: int,
                 commit_user: str, max_retries: int = 10, merge_min_count: int = 30,
                 indexes: IndexManifestStore | None = None, merge_rules: MergeRules | None = None,
                 look_reuse_s: float = 0.0) -> None:
        self.indexes = indexes
        #: how recent a look at the latest snapshot the first attempt takes without a request (`reusable_look_s`)
        self.look_reuse_s = look_reuse_s
        # the base manifest list built ahead (`build_base_ahead`): the snapshot it is on, the names it wrote, and
        # the upload, whose result is the list's (name, size)
        self._ahead: tuple[Snapshot, list[str], concurrent.futures.Future[tuple[str, int]]] | None = None
        self.merge_rules = merge_rules or MergeRules(min_count=merge_min_count)
        self.snapshots = snapshots
        self.manifests = manifests
        self.schema_id = schema_id
        self.commit_user = commit_user
        self.max_retries = max_retries
        self.merge_min_count = self.merge_rules.min_count

    # -- entry points --------------------------------------------------------------------------

    def commit(self, messages: Sequence[CommitMessage], kind: str | None = None,
               identifier: int = BATCH_COMMIT_IDENTIFIER, properties: dict[str, str] | None = None,
               validate: Validation | None = None) -> CommitResult:
        """Commit appends (and, for COMPACT, the replaced files). Kind defaults to APPEND or COMPACT.

        `validate` is called with the latest snapshot before each attempt to publish on it, and raises
        CommitConflictError when what the commit read has changed in a way the checks here cannot see (a delete by
        predicate: rows that may match it were added since it read the table).
        """
        deletes = [ManifestEntry(DELETE, m.partition, m.bucket, m.total_buckets, f)
                   for m in messages for f in m.deleted_files]
        adds = [ManifestEntry(ADD, m.partition, m.bucket, m.total_buckets, f)
                for m in messages for f in m.new_files]
        if kind is None:
            kind = COMPACT if deletes else APPEND
        changelog = [ManifestEntry(ADD, m.partition, m.bucket, m.total_buckets, f)
                     for m in messages for f in m.changelog_files]
        index_changes = ([e for m in messages for e in m.new_index_files],
                         [e for m in messages for e in m.deleted_index_files])
        return self._commit(deletes + adds, kind, identifier, properties, overwrite_partitions=_KEEP,
                            changelog=changelog, index_changes=index_changes, validate=validate)

    def overwrite(self, messages: Sequence[CommitMessage], partitions: Sequence[bytes] | None,
                  identifier: int = BATCH_COMMIT_IDENTIFIER,
                  properties: dict[str, str] | None = None) -> CommitResult:
        """Replace every live file of `partitions` (all partitions when None) by the new files."""
        adds = [ManifestEntry(ADD, m.partition, m.bucket, m.total_buckets, f)
                for m in messages for f in m.new_files]
        changelog = [ManifestEntry(ADD, m.partition, m.bucket, m.total_buckets, f)
                     for m in messages for f in m.changelog_files]
        index_changes = ([e for m in messages for e in m.new_index_files],
                         [e for m in messages for e in m.deleted_index_files])
        return self._commit(adds, OVERWRITE, identifier, properties,
                            overwrite_partitions=None if partitions is None else set(partitions),
                            changelog=changelog, index_changes=index_changes)

    def build_base_ahead(self) -> None:
        """On an object store, start building and uploading the base manifest list on the latest snapshot just
        looked at (a look this commit may trust: `look_reuse_s`), while the caller writes its data files: a round
        trip off the commit's path. The commit takes it when it lands on that snapshot; otherwise, or when the
        commit is never made, it is deleted (`discard_base_ahead`)."""
        if self.manifests.io.local or self.look_reuse_s <= 0 or self._ahead is not None:
            return
        latest = self.snapshots.latest(self.look_reuse_s)
        if latest is None:
            return
        names: list[str] = []
        self._ahead = (latest, names, _UPLOADS.get().submit(self._write_base, latest, names))

    def discard_base_ahead(self) -> None:
        """Delete the base list built ahead if no commit took it (a commit that failed, or was never made)."""
        ahead, self._ahead = self._ahead, None
        if ahead is not None:
            concurrent.futures.wait([ahead[2]])
            self._delete(ahead[1])

    def _write_base(self, latest: Snapshot, names: list[str]) -> tuple[str, int]:
        """Write the base manifest list on `latest` (and the manifests it merges); every name goes to `names`
        before its upload starts."""
        metas = self._base_manifests(latest, names)
        name, data = self.manifests.encode_list(metas)
        names.append(name)
        self.manifests.upload(name, data)
        return name, len(data)

    def _base_built_ahead(self, latest: Snapshot | None, written: list[str]) -> tuple[str, int] | None:
        """The base list built ahead, when it is on `latest` and was uploaded (its names then go to `written`);
        None otherwise (a failed upload is deleted, and the list written anew)."""
        ahead = self._ahead
        if ahead is None or latest is None or ahead[0] != latest:
            return None
        self._ahead = None
        concurrent.futures.wait([ahead[2]])
        if ahead[2].exception() is not None:
            self._delete(ahead[1])
            return None
        written.extend(ahead[1])
        return ahead[2].result()

    # -- the protocol --------------------------------------------------------------------------

    def _commit(self, changes: list[ManifestEntry], kind: str, identifier: int,
                properties: dict[str, str] | None, overwrite_partitions: set[bytes] | None,
                changelog: list[ManifestEntry] | None = None,
                index_changes: tuple[list[IndexEntry], list[IndexEntry]] = ([], []),
                validate: Validation | None = None) -> CommitResult:
        written: list[str] = []  # metadata this commit wrote; deleted when it definitely failed
        try:
            return self._attempts(changes, kind, identifier, properties, overwrite_partitions, changelog,
                                  index_changes, written, validate)
        except CommitStateUnknownError:
            raise  # the snapshot may name what was written: nothing is removed
        except StorageError as e:  # raised only where nothing was published (see `_publish`)
            self._delete(written)
            # the same class (a store that cannot publish stays one), naming the commit
            raise type(e)(f"commit of {len(changes)} file change(s) to {self.snapshots.dir.rsplit('/', 1)[0]} "
                          f"was not applied: {e}") from e
        except BaseException:
            # a conflict, or a failure before publication (the look at the latest snapshot, a check): every
            # outcome of publication other than success is raised as one of the two above, so nothing names
            # what this commit wrote
            self._delete(written)
            raise
        finally:
            self.discard_base_ahead()  # built on a snapshot the commit did not land on

    def _delete(self, names: list[str]) -> None:
        for name in names:
            self.manifests.io.delete_quietly(self.manifests.path(name))

    def _attempts(self, changes: list[ManifestEntry], kind: str, identifier: int,
                  properties: dict[str, str] | None, overwrite_partitions: set[bytes] | None,
                  changelog: list[ManifestEntry] | None, index_changes: tuple[list[IndexEntry], list[IndexEntry]],
                  written: list[str], validate: Validation | None) -> CommitResult:
        # replacing partitions is what `overwrite()` asks for; a deletion-vector delete is OVERWRITE too
        overwrite = kind == OVERWRITE and overwrite_partitions is not _KEEP
        delta_meta: ManifestFileMeta | None = None
        changelog_list: tuple[str, int] | None = None
        changelog_rows = sum(e.file.row_count for e in changelog or [])
        if changelog:
            # the changelog does not depend on the previous snapshot: written once for all attempts
            cl_meta = self.manifests.write_manifest(changelog, self.schema_id)
            written.append(cl_meta.file_name)
            changelog_list = self.manifests.write_list([cl_meta])
            written.append(changelog_list[0])
        delta_list: tuple[str, int] | None = None
        early: concurrent.futures.Future[tuple[ManifestFileMeta, tuple[str, int]]] | None = None
        early_names: list[str] = []
        if not overwrite and not self.manifests.io.local:
            # the delta manifest and delta list of a commit that replaces nothing name only its own changes,
            # whatever snapshot it lands on: on an object store they are uploaded while the latest snapshot is
            # looked up, two round trips fewer per commit
            early = _UPLOADS.get().submit(self._write_delta, changes, early_names)
        for attempt in range(self.max_retries + 1):
            try:
                # the first attempt may publish on the writer's look (a stale one makes the create fail); a retry
                # follows a lost race, so it looks again
                latest = self.snapshots.latest(self.look_reuse_s if attempt == 0 else 0.0)
                done = self._find_committed(latest, identifier, kind)
            except BaseException:
                if early is not None:
                    concurrent.futures.wait([early])
                    written.extend(early_names)  # the caller removes them when the commit definitely failed
                raise
            if early is not None:
                concurrent.futures.wait([early])
                written.extend(early_names)
                delta_meta, delta_list = early.result()  # an upload's StorageError: nothing was published
                early = None
            if done is not None:
                if early_names:  # written for a commit that had been made before: never referenced
                    self._delete(early_names)
                    del written[-len(early_names):]
                return CommitResult(done, already_committed=True)
            if validate is not None:
                validate(latest)
            # Plain appends never conflict, so they skip reading the live file set; other commits read only the
            # live files of the buckets they change (an overwrite: of every partition it may replace)
            needs_live = (overwrite or any(e.kind == DELETE for e in changes)
                          or bool(index_changes[0] or index_changes[1]))
            live = self.live_entries(latest, None if overwrite else _touched(changes, index_changes)) \
                if needs_live else {}
            if overwrite:
                entries = [e.as_delete() for e in live.values()
                           if overwrite_partitions is None or e.partition in overwrite_partitions] + changes
            else:
                entries = changes
                self._check_deletes(changes, live)
            if delta_meta is None or overwrite:
                if delta_meta is not None:
                    self.manifests.io.delete_quietly(self.manifests.path(delta_meta.file_name))
                    written.remove(delta_meta.file_name)
                delta_meta = self.manifests.write_manifest(entries, self.schema_id)
                written.append(delta_meta.file_name)
            kept = len(written)  # what this attempt writes from here on is dropped if it loses the race
            index_manifest = self._index_after(latest, index_changes, changes, entries, live,
                                               (overwrite_partitions if overwrite else frozenset()), written)
            (base_name, base_size), (delta_name, delta_size) = self._write_lists(latest, delta_meta, written,
                                                                                 delta_list)
            delta_rows = sum(e.file.row_count if e.kind == ADD else -e.file.row_count for e in entries)
            snap = Snapshot(
                id=(latest.id + 1) if latest else 1, schema_id=self.schema_id,
                base_manifest_list=base_name, delta_manifest_list=delta_name,
                base_manifest_list_size=base_size, delta_manifest_list_size=delta_size,
                commit_user=self.commit_user, commit_identifier=identifier, commit_kind=kind,
                time_millis=int(time.time() * 1000),
                total_record_count=(latest.total_record_count if latest else 0) + delta_rows,
                delta_record_count=delta_rows,
                changelog_manifest_list=changelog_list[0] if changelog_list else None,
                changelog_manifest_list_size=changelog_list[1] if changelog_list else None,
                changelog_record_count=changelog_rows if changelog_list else None,
                index_manifest=index_manifest,
                watermark=latest.watermark if latest else None,
                next_row_id=latest.next_row_id if latest else None,
                properties=dict(properties) if properties else None, uuid=str(uuid.uuid4()))
            self.manifests.sync_dir()  # every manifest the snapshot names is durable before it is published
            published = self._publish(snap)
            if published:
                return CommitResult(snap.id, time_millis=snap.time_millis)
            self._delete(written[kept:])  # lost the race: these were never referenced
            del written[kept:]
        raise CommitRetryExhaustedError(
            f"commit of {len(changes)} file change(s) lost the snapshot race {self.max_retries + 1} times")

    def _write_delta(self, entries: list[ManifestEntry], names: list[str]) -> tuple[ManifestFileMeta,
                                                                                      tuple[str, int]]:
        """Write the delta manifest of `entries` and the delta list naming it, side by side (the list needs only the
        manifest's description, known once it is encoded); both names are in `names` before either upload starts,
        so that a failure leaves nothing unnamed."""
        meta, manifest = self.manifests.encode_manifest(entries, self.schema_id)
        list_name, listed = self.manifests.encode_list([meta])
        names.extend([meta.file_name, list_name])
        beside = _DELTA_UPLOADS.get().submit(self.manifests.upload, meta.file_name, manifest)
        try:
            self.manifests.upload(list_name, listed)
        finally:
            concurrent.futures.wait([beside])
        beside.result()
        return meta, (list_name, len(listed))

    def _write_lists(self, latest: Snapshot | None, delta_meta: ManifestFileMeta, written: list[str],
                     delta: tuple[str, int] | None = None) -> tuple[tuple[str, int], tuple[str, int]]:
        """Write the base manifest list (and the manifests it merges) and the delta list; the (name, size) of each.

        `delta`: the delta list, when it was written already (`_write_delta`); then only the base list is.

        The two lists do not depend on each other: on an object store the delta list is uploaded while the base
        is built and uploaded, one round trip fewer per commit. `written` gets the base list's name, then the
        delta list's (whatever fails, every name written is in it, for the caller's cleanup).
        """
        if delta is not None:
            base = self._base_built_ahead(latest, written)
            if base is None:
                base = self.manifests.write_list(self._base_manifests(latest, written))
                written.append(base[0])
            return base, delta
        if self.manifests.io.local:
            base = self.manifests.write_list(self._base_manifests(latest, written))
            written.append(base[0])
            delta = self.manifests.write_list([delta_meta])
            written.append(delta[0])
            return base, delta
        delta_job = _UPLOADS.get().submit(self.manifests.write_list, [delta_meta])
        try:
            base = self.manifests.write_list(self._base_manifests(latest, written))
            written.append(base[0])
        except BaseException:
            try:
                written.append(delta_job.result()[0])
            except Exception:  # noqa: S110 - the base list's failure is the one reported
                pass
            raise
        delta = delta_job.result()
        written.append(delta[0])
        return base, delta

    def _index_after(self, latest: Snapshot | None, index_changes: tuple[list[IndexEntry], list[IndexEntry]],
                     changes: list[ManifestEntry], entries: list[ManifestEntry],
                     live: dict[tuple[object, ...], ManifestEntry], replaced: set[bytes] | frozenset[bytes] | None,
                     written: list[str]) -> str | None:
        """The index manifest of the new snapshot: the latest one with this commit's index changes, checked by
        `index_changes` against what the commit was planned on (a new manifest only when the entries change).

        `replaced`: the partitions an overwrite replaces (None: all), whose index files go with their data files.
        """
        current_name = latest.index_manifest if latest else None
        added, removed = index_changes
        re_added = {(e.partition, e.bucket, e.file.file_name) for e in changes if e.kind == ADD}
        data_deleted = frozenset((e.partition, e.bucket) for e in changes
                                 if e.kind == DELETE and (e.partition, e.bucket, e.file.file_name) not in re_added)
        overwriting = replaced is None or bool(replaced)
        if self.indexes is None or not (added or removed or (current_name and (data_deleted or overwriting))):
            return current_name
        current = self.indexes.read(current_name)
        if overwriting:
            # index files of replaced partitions describe files that are gone
            removed = removed + [e for e in current if (replaced is None or e.partition in replaced)
                                 and e not in removed]
        change = IndexChange(tuple(added), tuple(removed), data_deleted,
                             None if replaced is None else frozenset(replaced))
        needs_live = any(e.dv_ranges for e in added) or any(e.index_type == DELETION_VECTORS for e in removed)
        live_after = ({(e.partition, e.bucket, e.file.file_name) for e in merge_entries(list(live.values()) + entries)
                       .values()} if needs_live else set())
        after = apply_index_change(current, change, live_after, self.indexes)
        if after == current:
            return current_name
        name = self.indexes.write(after)
        written.append(name)
        return name

    def _publish(self, snap: Snapshot) -> bool:
        """Publish the snapshot; False when another commit took its id.

        A failed publication is settled by reading the target back: our snapshot there is a success on
        an object store; on a local filesystem it is an unknown outcome, as the directory sync that makes
        the snapshot survive a power cut did not complete. Another snapshot there is a lost race; an
        absent target on a local filesystem (where publication is one hard link) means nothing was
        published, and the StorageError propagates as a definite failure. Anything else is an unknown outcome.
        """
        try:
            return self.snapshots.publish(snap)
        except PublicationUnsupportedError:
            raise  # refused before anything was sent: a definite failure
        except OSError as e:
            try:
                found: Snapshot | None = self.snapshots.snapshot(snap.id)
            except NotFoundError:
                found = None
            except Exception:
                raise CommitStateUnknownError(f"publishing snapshot {snap.id} failed ({e}) and the snapshot "
                                              "cannot be read back") from e
            if found is not None and found.uuid == snap.uuid and self.snapshots.io.local:
                raise CommitStateUnknownError(f"snapshot {snap.id} was published but may not survive a power "
                                              f"cut: {e}") from e
            if found is not None:
                return found.uuid == snap.uuid or False
            if isinstance(e, StorageError) and self.snapshots.io.local:
                raise
            raise CommitStateUnknownError(f"publishing snapshot {snap.id} failed: {e}") from e

    def _find_committed(self, latest: Snapshot | None, identifier: int, kind: str) -> int | None:
        """The snapshot this user already made with this identifier and kind, if any.

        Identifiers grow per commit user, so the backward walk stops at the user's first older commit.
        """
        if latest is None or identifier == BATCH_COMMIT_IDENTIFIER:
            return None
        # snapshot ids have no gaps: the walk ends at the first expired one, without looking up the earliest
        for sid in range(latest.id, 0, -1):
            try:
                s = latest if sid == latest.id else self.snapshots.snapshot(sid)
            except NotFoundError:  # expired (before or while we walked)
                break
            if s.commit_user != self.commit_user:
                continue
            if s.commit_identifier == identifier and s.commit_kind == kind:
                return s.id
            if s.commit_identifier < identifier:
                break
        return None

    @staticmethod
    def _check_deletes(changes: list[ManifestEntry], live: dict[tuple[object, ...], ManifestEntry]) -> None:
        added = {e.identifier for e in changes if e.kind == ADD}
        for e in changes:
            if e.kind != DELETE:
                continue
            if e.identifier in added:
                raise CommitConflictError(f"file {e.file.file_name} is both added and deleted by one commit")
            if e.identifier not in live:
                raise CommitConflictError(
                    f"file {e.file.file_name} (bucket {e.bucket}, level {e.file.level}) is no longer live: "
                    "another commit replaced it; this commit was not applied")

    def live_entries(self, snapshot: Snapshot | None,
                     buckets: set[tuple[bytes, int]] | None = None) -> dict[tuple[object, ...], ManifestEntry]:
        """The live files of a snapshot; of these (partition, bucket)s only, when given."""
        if snapshot is None:
            return {}
        wanted = None if buckets is None else BucketFilter(buckets, self.manifests.partition_types)
        return self.manifests.live(snapshot.base_manifest_list, snapshot.delta_manifest_list, wanted)

    def _base_manifests(self, latest: Snapshot | None, written: list[str]) -> list[ManifestFileMeta]:
        """The manifests of the previous snapshot, small ones merged by the merge rules (see `manifest_merge`; the
        manifests written go to `written`)."""
        if latest is None:
            return []
        metas = self.manifests.snapshot_manifests(latest.base_manifest_list, latest.delta_manifest_list)
        rules = self.merge_rules
        if rules.min_count != self.merge_min_count:
            rules = MergeRules(rules.target_size, self.merge_min_count, rules.full_threshold)
        return merge_manifests(self.manifests, metas, self.schema_id, rules, written)


def _touched(changes: Sequence[ManifestEntry],
             index_changes: tuple[list[IndexEntry], list[IndexEntry]]) -> set[tuple[bytes, int]]:
    """The (partition, bucket)s whose live files a commit's checks look at: those of its file and index changes."""
    return ({(e.partition, e.bucket) for e in changes}
            | {(e.partition, e.bucket) for e in index_changes[0]} | {(e.partition, e.bucket) for e in index_changes[1]})
