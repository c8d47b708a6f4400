"""The file changes of one (partition, bucket) that a writer, a compaction or an assigner hands to a commit."""

from __future__ import annotations

from dataclasses import dataclass, field

from lsmlake.format.data_file_meta import DataFileMeta
from lsmlake.format.index_manifest import IndexEntry


@dataclass
class CommitMessage:
    """The file changes of one (partition, bucket), handed from a writer to a committer."""

    partition: bytes
    bucket: int
    total_buckets: int
    new_files: list[DataFileMeta] = field(default_factory=list)
    deleted_files: list[DataFileMeta] = field(default_factory=list)
    changelog_files: list[DataFileMeta] = field(default_factory=list)
    new_index_files: list[IndexEntry] = field(default_factory=list)
    deleted_index_files: list[IndexEntry] = field(default_factory=list)

    def __repr__(self) -> str:
        # a message can carry thousands of files, each with its statistics: name the counts, not the files
        counts: dict[str, list[DataFileMeta] | list[IndexEntry]] = {
            "new_files": self.new_files, "deleted_files": self.deleted_files, "changelog_files": self.changelog_files,
            "new_index_files": self.new_index_files, "deleted_index_files": self.deleted_index_files}
        parts = ", ".join(f"{k}={len(v)}" for k, v in counts.items() if v)
        return f"CommitMessage(partition={self.partition.hex()}, bucket={self.bucket}{', ' + parts if parts else ''})"
