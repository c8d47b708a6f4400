"""Merge engines of primary-key tables: folding all rows of one key into the row a reader sees."""
