"""The gRPC client of an lsmlake cluster."""
