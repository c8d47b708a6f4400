"""Paimon's REST catalog protocol: a JSON-over-HTTP server with tokens and TLS, and the protocol's JSON objects."""
