"""The catalog service: lsmlake's catalog, commits, snapshots and scan planning over gRPC."""
