"""The LSM compaction engine of a bucket: levels, strategies that pick what to compact, and the merge task."""
