"""The compactor service: owns buckets through Kafka, plans compactions on the catalog timeline, runs them on Spark."""
