"""Provides the Slurm backend: queries, CLI, allocator, command lines, log following."""
