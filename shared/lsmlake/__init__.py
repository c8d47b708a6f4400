"""lsmlake: Paimon-format table storage, compaction and ingestion."""
