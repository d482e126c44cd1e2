"""Provides tools to read profiles of the benchmarks' hot paths (`pyspy_summary`)."""
