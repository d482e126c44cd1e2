"""Benchmarks of ddptui against the alternatives an operator has; see bench/README.md."""
