"""The writer service: rows in over gRPC and Kafka, level-0 files out, committed through the catalog."""
