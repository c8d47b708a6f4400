"""gRPC: proto conversion both ways, event encoding, the error mapping, security, limits and the server setup."""
