"""The catalog: tables in a warehouse, the commit protocol and its checks, the compaction timeline, expiration."""
