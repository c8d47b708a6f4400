"""The `lake` command, the local cluster it starts and the demo."""
