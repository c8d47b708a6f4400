"""Compaction of one bucket's LSM tree: the strategies that pick runs and the tasks that rewrite them."""
