"""Provides the log views: rows, the scrolling view, the per-node deck and run logs."""
