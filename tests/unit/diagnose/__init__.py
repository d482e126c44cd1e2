"""Tests of core/diagnose: why a run is stuck, slow or wrong."""
