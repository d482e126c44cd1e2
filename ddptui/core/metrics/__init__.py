"""Provides the numbers read from the ranks' lines (loss, throughput, ...), kept per run."""
