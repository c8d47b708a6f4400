"""Kafka plumbing: an embedded broker for tests and local clusters, and thin kafka-python helpers."""
