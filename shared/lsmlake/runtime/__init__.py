"""Process facilities every service shares: logging, metrics endpoint, rate-limited logs, background loops."""
