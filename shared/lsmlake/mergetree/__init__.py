"""The LSM tree of one bucket: levels and sorted runs, merge functions, compaction strategies and rewrites."""
