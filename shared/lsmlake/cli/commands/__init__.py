"""The commands of `lake`, by concept: each takes the parsed arguments and returns the exit code."""
