"""Provides why a run is stuck, slow or wrong, and the one verdict on each failure."""
