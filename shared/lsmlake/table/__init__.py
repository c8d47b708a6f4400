"""Tables: scans, reads, writes, commits, schema changes and table-level compaction over the merge tree."""
