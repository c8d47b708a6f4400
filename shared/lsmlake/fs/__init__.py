"""Files: the FileIO every layer reads and writes through, and its fault-injecting test double."""
