"""Provides the job: its spec, profiles, host lists and the per-node launch plan."""
