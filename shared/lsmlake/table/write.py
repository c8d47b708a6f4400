"""The batch write path: rows -> (partition, bucket) groups -> sorted, deduplicated level-0 files.

Everything here works on whole Arrow columns: partitions are grouped by dictionary codes, buckets
come from the vectorised BinaryRow hash, sequence numbers from numpy ranks.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from lsmlake.errors import InvalidInputError
from lsmlake.format import options as opts
from lsmlake.format.binary_row import deserialize_row, serialize_row
from lsmlake.format.bucket import POSTPONE_BUCKET, bucket_ids
from lsmlake.format.data_file_meta import DataFileMeta
from lsmlake.format.data_file_writer import DataFileWriter, bucket_dir
from lsmlake.format.partition import partition_path
from lsmlake.format.row_kind import DELETE, is_retract
from lsmlake.format.schema import SEQUENCE_NUMBER, VALUE_KIND, TableSchema
from lsmlake.fs.file_io import FileIO
from lsmlake.mergetree.dedupe import group_ends, sort_and_group
from lsmlake.mergetree.merge.deduplicate import Deduplicate
from lsmlake.mergetree.merge.factory import merge_function_for, ordering_of
from lsmlake.mergetree.merge.first_row import FirstRow
from lsmlake.mergetree.merge.merge_function import MergeFunction
from lsmlake.table.commit_message import CommitMessage
from lsmlake.table.dynamic_bucket import BucketAssigner, Elsewhere, is_cross_partition, is_dynamic, key_hashes
from lsmlake.table.input_rows import conform
from lsmlake.table.sequence_numbers import SequenceAllocator

__all__ = ["BucketTarget", "CommitMessage", "Routing", "TableWrite", "fold_rows", "group_ids"]

_GROUP = "__lsmlake_group"  # carried through the merge to regroup rows by (partition, bucket)


@dataclass(frozen=True)
class BucketTarget:
    """One (partition, bucket) that rows are written to, with the partition's directory path."""

    partition: bytes
    partition_path: str
    bucket: int


@dataclass
class Routing:
    """Where the rows of one batch go: a run of row indices per (partition, bucket), input order kept in a run."""

    group: np.ndarray  # per row: partition id * span + bucket
    order: np.ndarray  # row indices sorted by group, stable
    starts: np.ndarray  # start of each group's run in `order`
    targets: list[BucketTarget]  # the target of each run
    span: int
    partitions: dict[int, tuple[bytes, str]]  # partition id -> (BinaryRow bytes, directory path)

    def runs(self) -> Iterator[tuple[BucketTarget, np.ndarray]]:
        """(target, row indices in input order) of every (partition, bucket) the batch touches."""
        ends = np.r_[self.starts[1:], len(self.order)]
        for target, a, b in zip(self.targets, self.starts.tolist(), ends.tolist(), strict=True):
            yield target, self.order[a:b]


def group_ids(columns: list[pa.ChunkedArray | pa.Array], n: int) -> tuple[np.ndarray, np.ndarray]:
    """Dense group id of every row by the values of `columns`, and the first row index of each group."""
    combined = np.zeros(n, dtype=np.int64)
    for col in columns:
        enc = pc.dictionary_encode(col)
        if isinstance(enc, pa.ChunkedArray):
            enc = enc.combine_chunks() if enc.num_chunks != 1 else enc.chunk(0)
        size = len(enc.dictionary) + 1
        idx = pc.fill_null(enc.indices, size - 1).to_numpy().astype(np.int64)
        combined = combined * size + idx
        _, combined = np.unique(combined, return_inverse=True)  # keep the codes dense: no overflow
    uniq, first, inverse = np.unique(combined, return_index=True, return_inverse=True)
    return inverse.astype(np.int64), first


class TableWrite:
    """Buffers nothing: each `write` call turns its rows into files and returns the commit messages."""

    def __init__(self, fio: FileIO, table_path: str, schema: TableSchema, sequences: SequenceAllocator,
                 file_prefix: str = "data-", assigner: BucketAssigner | None = None) -> None:
        """`file_prefix` starts every data file's name (a compaction run's own prefix, for its rollback);
        `assigner` puts the keys of a dynamic-bucket table in buckets (required for one)."""
        if is_dynamic(schema) and assigner is None:
            raise InvalidInputError("a writer of a dynamic-bucket table needs a bucket assigner")
        self.assigner = assigner
        self.file_prefix = file_prefix
        self.io = fio
        self.table_path = table_path
        self.schema = schema
        self.sequences = sequences
        self.file_writer = DataFileWriter(fio, schema)
        self.partition_types = schema.types_of(schema.partition_keys)
        self.default_partition = schema.table_options.get(opts.PARTITION_DEFAULT_NAME)
        self.merge_function = merge_function_for(schema) if schema.is_primary_key_table else None
        # the batch fold merges rows of one key within one (partition, bucket): a cross-partition table's key can
        # be in two partitions of a batch (a row and the delete that moves it), so its partition joins the key
        self.fold_keys = list(schema.primary_keys)
        if is_cross_partition(schema):
            self.fold_keys += [k for k in schema.partition_keys if k not in self.fold_keys]
            self.merge_function = Deduplicate(self.fold_keys, ordering_of(schema))
        self.changelog_input = schema.table_options.get(opts.CHANGELOG_PRODUCER) == "input"
        self.messages: dict[tuple[bytes, int], CommitMessage] = {}
        self._written: list[str] = []  # every file written, for abort

    def write(self, data: pa.Table | pa.RecordBatch) -> None:
        """Validate the rows and write them as level-0 files (nothing is written if they are invalid)."""
        rows, kinds_arr = conform(self.schema, data)
        if rows.num_rows == 0:
            return
        kinds = kinds_arr.to_numpy(zero_copy_only=False).astype(np.int8)
        schema = self.schema
        rows, kinds, routing = self.route_rows(rows, kinds)
        n = rows.num_rows
        g, order, starts, span, partitions = routing.group, routing.order, routing.starts, routing.span, \
            routing.partitions
        # Rank of each row inside its group, in input order: the sequence number offset.
        run_len = np.diff(np.r_[starts, n])
        rank_sorted = np.arange(n) - np.repeat(starts, run_len)
        keys = [(t.partition, t.bucket) for t in routing.targets]
        first = self.sequences.allocate(dict(zip(keys, run_len.tolist(), strict=True)))
        base = np.array([first[k] for k in keys], np.int64)
        seq = np.empty(n, np.int64)
        seq[order] = np.repeat(base, run_len) + rank_sorted
        changelog: list[tuple[BucketTarget, pa.Table, np.ndarray, np.ndarray]] = []
        if schema.is_primary_key_table and self.changelog_input:
            # the written rows themselves, unmerged, in key order: Paimon's `input` changelog
            if getattr(self.merge_function, "ignore_delete", False):
                keep_rows = ~is_retract(kinds)
            else:
                keep_rows = np.ones(n, dtype=bool)
            idx, _ = sort_and_group([rows.column(k) for k in schema.trimmed_primary_keys], [(seq, "ascending")], g)
            idx = idx[keep_rows[idx]]
            cg = g[idx]
            cut = np.flatnonzero(np.r_[True, cg[1:] != cg[:-1], True])
            for a, b in zip(cut[:-1].tolist(), cut[1:].tolist(), strict=True):
                pid, bucket = divmod(int(cg[a]), span)
                sel = pa.array(idx[a:b], pa.int64())
                changelog.append((self.target(partitions[pid], bucket), rows.take(sel), seq[idx[a:b]],
                                  kinds[idx[a:b]]))
        if schema.is_primary_key_table:
            rows, g, seq, kinds, layer = self._fold(rows, g, seq, kinds)
        else:
            rows = rows.take(pa.array(order))
            g, seq, kinds = g[order], seq[order], kinds[order]
            layer = np.zeros(len(g), np.int64)
        if len(g) == 0:
            return  # everything folded away (for example only ignored deletes)
        split_at = (g[1:] != g[:-1]) | (layer[1:] != layer[:-1])
        bounds = np.flatnonzero(np.r_[True, split_at, True])
        jobs = []
        for a, b in zip(bounds[:-1].tolist(), bounds[1:].tolist(), strict=True):
            pid, bucket = divmod(int(g[a]), span)
            jobs.append((self.target(partitions[pid], bucket), a, b))

        def run(job: tuple[BucketTarget, int, int]) -> tuple[BucketTarget, list[DataFileMeta]]:
            target, a, b = job
            return target, self.write_files(target, rows.slice(a, b - a), seq[a:b], kinds[a:b])

        with ThreadPoolExecutor(max_workers=2) as pool:
            results = list(pool.map(run, jobs))
        for target, files in results:
            self.message(target).new_files.extend(files)
        for target, cl_rows, cl_seq, cl_kinds in changelog:
            self.message(target).changelog_files.extend(
                self.write_files(target, cl_rows, cl_seq, cl_kinds, prefix="changelog-"))

    def route(self, rows: pa.Table) -> Routing:
        """The (partition, bucket) of every row of a conformed batch, computed on whole columns."""
        return self.route_rows(rows, np.zeros(rows.num_rows, np.int8))[2]

    def route_rows(self, rows: pa.Table, kinds: np.ndarray) -> tuple[pa.Table, np.ndarray, Routing]:
        """`route`, and the rows and kinds to write: for a cross-partition table the batch plus the deletes that take
        each key out of the partitions it leaves (see `dynamic_bucket`)."""
        schema = self.schema
        n = rows.num_rows
        num_buckets = schema.num_buckets
        pgroup, partitions = self._partitions(rows)
        if num_buckets > 0:
            bkeys = schema.bucket_keys
            buckets = bucket_ids([rows.column(k) for k in bkeys], schema.types_of(bkeys), num_buckets)
            buckets = np.asarray(buckets, dtype=np.int64)
        elif self.assigner is not None and is_dynamic(schema):
            buckets, elsewhere = self._assign(rows, pgroup, partitions)
            deletes = self._moves(rows, pgroup, partitions, buckets, elsewhere) if is_cross_partition(schema) else None
            if deletes is not None:
                rows = pa.concat_tables([rows, deletes[0]])
                kinds = np.r_[kinds, np.full(deletes[0].num_rows, DELETE, np.int8)]
                buckets = np.r_[buckets, deletes[1]]
                pgroup, partitions = self._partitions(rows)
                n = rows.num_rows
        else:  # unaware append tables have bucket 0; postpone tables put every row in bucket -2 (`target`)
            buckets = np.zeros(n, np.int64)
        span = max(num_buckets, int(buckets.max()) + 1 if n else 1, 1)
        g = pgroup * span + buckets
        order = np.argsort(g, kind="stable")
        g_sorted = g[order]
        starts = np.flatnonzero(np.r_[True, g_sorted[1:] != g_sorted[:-1]]) if n else np.zeros(0, np.int64)
        targets = [self.target(partitions[pid], bucket)
                   for pid, bucket in (divmod(gid, span) for gid in g_sorted[starts].tolist())]
        return rows, kinds, Routing(g, order, starts, targets, span, partitions)

    def _partitions(self, rows: pa.Table) -> tuple[np.ndarray, dict[int, tuple[bytes, str]]]:
        """The partition id of every row, and each id's (BinaryRow bytes, directory path)."""
        schema = self.schema
        n = rows.num_rows
        pgroup, pfirst = group_ids([rows.column(k) for k in schema.partition_keys], n) \
            if schema.partition_keys else (np.zeros(n, np.int64), np.zeros(1, np.int64))
        partitions: dict[int, tuple[bytes, str]] = {}
        for pid, first_row in enumerate(pfirst.tolist()):
            values = [rows.column(k)[first_row].as_py() for k in schema.partition_keys]
            partitions[pid] = (serialize_row(values, self.partition_types),
                               partition_path(values, list(schema.partition_keys), self.partition_types,
                                              self.default_partition))
        return pgroup, partitions

    def _assign(self, rows: pa.Table, pgroup: np.ndarray, partitions: dict[int, tuple[bytes, str]]
                ) -> tuple[np.ndarray, list[tuple[np.ndarray, Elsewhere]]]:
        """The dynamic bucket of every row (the assigner's answer for its key in its partition), and per partition
        of the batch its rows and where else the table holds their keys."""
        assert self.assigner is not None
        hashes = key_hashes(self.schema, rows)
        buckets = np.empty(rows.num_rows, np.int64)
        elsewhere = []
        order = np.argsort(pgroup, kind="stable")
        cuts = np.cumsum(np.bincount(pgroup, minlength=len(partitions)))[:-1]
        rows_of = dict(zip(partitions, np.split(order, cuts), strict=True))  # partition ids are 0..P-1
        answers = self.assigner.assign([(partitions[pid][0], hashes[mine]) for pid, mine in rows_of.items()])
        for mine, answer in zip(rows_of.values(), answers, strict=True):
            buckets[mine] = answer.buckets
            if len(answer.elsewhere):
                elsewhere.append((mine, answer.elsewhere))
        return buckets, elsewhere

    def _moves(self, rows: pa.Table, pgroup: np.ndarray, partitions: dict[int, tuple[bytes, str]], buckets: np.ndarray,
               elsewhere: list[tuple[np.ndarray, Elsewhere]]) -> tuple[pa.Table, np.ndarray] | None:
        """The deletes of a cross-partition batch and their buckets: each key's last row decides its partition; the
        key is deleted from every other partition the batch wrote it to or the table's indexes hold its hash in."""
        schema = self.schema
        n = rows.num_rows
        kg, _ = group_ids([rows.column(k) for k in schema.primary_keys], n)
        last = np.zeros(int(kg.max()) + 1, np.int64)
        np.maximum.at(last, kg, np.arange(n))
        final = last[kg]  # per row: its key's last row in the batch
        # the batch's own earlier rows in other partitions (one delete per key and partition)
        left = np.flatnonzero(pgroup != pgroup[final])
        _, first = np.unique(kg[left] * len(partitions) + pgroup[left], return_index=True)
        left = left[first]
        sources = [final[left]]
        targets = [[partitions[p][0] for p in pgroup[left].tolist()]]
        del_buckets = [buckets[left]]
        for mine, where in elsewhere:  # the table's other partitions, for each key's last row only
            rows_at = mine[where.positions]
            keep = final[rows_at] == rows_at
            sources.append(rows_at[keep])
            targets.append([where.partitions[i] for i in where.partition_ids[keep].tolist()])
            del_buckets.append(where.buckets[keep].astype(np.int64))
        src = np.concatenate(sources)
        if not len(src):
            return None
        # one Python step per moved key (moves are few), to decode the partitions they leave
        decoded: dict[bytes, list[object]] = {}
        values = [decoded.setdefault(p, deserialize_row(p, self.partition_types)) for t in targets for p in t]
        deletes = rows.take(pa.array(src, pa.int64()))
        for j, k in enumerate(schema.partition_keys):
            col = deletes.schema.get_field_index(k)
            deletes = deletes.set_column(col, deletes.schema.field(col),
                                         pa.array([v[j] for v in values], deletes.schema.field(col).type))
        return deletes, np.concatenate(del_buckets)

    def target(self, partition: tuple[bytes, str], bucket: int) -> BucketTarget:
        """The bucket a routing group writes to: a postpone table writes every group to bucket -2."""
        return BucketTarget(*partition, POSTPONE_BUCKET if self.schema.num_buckets == POSTPONE_BUCKET else bucket)

    def check_kinds(self, kinds: np.ndarray) -> None:
        """Refuse row kinds the table's merge engine gives no meaning to, before anything is buffered or written."""
        if self.merge_function is None:
            return
        self.merge_function.check_retractions(kinds)
        mf = self.merge_function
        if isinstance(mf, FirstRow) and not mf.ignore_delete and is_retract(kinds).any():
            # FirstRow.merge refuses these too, but only when the rows are folded: refuse them on arrival
            raise InvalidInputError("the first-row merge engine cannot accept -U/-D rows; "
                                    "set 'ignore-delete' = 'true' to drop them")

    def write_files(self, target: BucketTarget, rows: pa.Table, seq: np.ndarray, kinds: np.ndarray,
                    prefix: str | None = None) -> list[DataFileMeta]:
        """Write rows of one bucket (sorted by key, keys unique, for primary-key tables) as level-0 files.

        The files are remembered for `abort`; the caller puts them into a commit message.
        """
        directory = bucket_dir(self.table_path, target.partition_path, target.bucket)
        files = self.file_writer.write(directory, rows, seq, kinds if self.schema.is_primary_key_table else None,
                                       prefix=prefix or self.file_prefix)
        self._written.extend(f"{directory}/{f.file_name}" for f in files)
        return files

    def message(self, target: BucketTarget) -> CommitMessage:
        """The pending commit message of a bucket (created empty)."""
        key = (target.partition, target.bucket)
        return self.messages.setdefault(key, CommitMessage(target.partition, target.bucket, self.schema.num_buckets))

    def _fold(self, rows: pa.Table, g: np.ndarray, seq: np.ndarray,
              kinds: np.ndarray) -> tuple[pa.Table, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        assert self.merge_function is not None
        return fold_rows(self.merge_function, self.fold_keys, rows, g, seq, kinds)

    def __repr__(self) -> str:
        return f"TableWrite({self.table_path}, files_written={len(self._written)})"

    def prepare_commit(self) -> list[CommitMessage]:
        """The commit messages of everything written so far (and forget them)."""
        out = list(self.messages.values())
        self.messages = {}
        if self.assigner is not None:
            out.extend(self.assigner.index_messages())
        return out

    def abort(self) -> None:
        """Delete every file this writer wrote (call only when they are definitely not committed)."""
        self.messages = {}
        for path in self._written:
            self.io.delete_quietly(path)
        for directory in sorted({p.rsplit("/", 1)[0] for p in self._written}, reverse=True):
            self.io.delete_dir_if_empty(directory)
            parent = directory.rsplit("/", 1)[0]
            while parent != self.table_path and parent.startswith(self.table_path):
                self.io.delete_dir_if_empty(parent)
                parent = parent.rsplit("/", 1)[0]
        self._written = []


def fold_rows(merge_function: MergeFunction, primary_keys: Sequence[str], rows: pa.Table, g: np.ndarray,
              seq: np.ndarray, kinds: np.ndarray) -> tuple[pa.Table, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Merge rows of the same (group, key) with the table's merge engine: the writer's local fold.

    Returns rows, group, sequence, kind and layer, ordered by (group, layer, key). Each (group, layer)
    becomes its own file, so keys stay unique per file. Where the engine's retractions are not
    associative (partial-update, aggregation), keys holding a retraction are not folded: their rows go
    to successive layers and are merged later, with the whole history at hand.
    """
    merge_function.check_retractions(kinds)
    extra = pa.table({SEQUENCE_NUMBER: pa.array(seq, pa.int64()), VALUE_KIND: pa.array(kinds, pa.int8()),
                      _GROUP: pa.array(g, pa.int64())})
    full = pa.Table.from_arrays(rows.columns + extra.columns, names=rows.column_names + extra.column_names)
    keys = list(primary_keys)
    retract = is_retract(kinds)
    if getattr(merge_function, "retractions_need_history", False) and retract.any():
        idx, starts = sort_and_group([full.column(k) for k in keys], [(seq, "ascending")])
        ends = group_ends(starts, len(idx))
        key_has_retract = np.maximum.reduceat(retract[idx].astype(np.int8), starts).astype(bool)
        row_key_retract = np.repeat(key_has_retract, ends - starts)
        rank = np.arange(len(idx)) - np.repeat(starts, ends - starts)
        foldable = full.take(pa.array(idx[~row_key_retract], pa.int64()))
        held = full.take(pa.array(idx[row_key_retract], pa.int64()))
        merged = merge_function.merge(foldable) if foldable.num_rows else foldable
        layer = np.r_[np.zeros(merged.num_rows, np.int64), rank[row_key_retract]]
        merged = pa.concat_tables([merged, held])
        needs_sort = True  # the held rows are not in key order with the folded ones
    else:
        merged = merge_function.merge(full) if full.num_rows else full
        layer = np.zeros(merged.num_rows, np.int64)
        needs_sort = False
    mg = merged.column(_GROUP).to_numpy()
    if needs_sort:
        order = pc.sort_indices(pa.table([pa.array(mg), pa.array(layer)] + [merged.column(k) for k in keys],
                                         names=["g", "l"] + [f"k{i}" for i in range(len(keys))]),
                                sort_keys=[("g", "ascending"), ("l", "ascending")]
                                + [(f"k{i}", "ascending") for i in range(len(keys))]).to_numpy()
    else:
        order = np.argsort(mg, kind="stable")  # merged rows are in key order; keep it inside each group
    merged = merged.take(pa.array(order))
    return (merged.select(rows.column_names), mg[order], merged.column(SEQUENCE_NUMBER).to_numpy(),
            merged.column(VALUE_KIND).to_numpy().astype(np.int8), layer[order])

