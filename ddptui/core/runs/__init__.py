"""Provides run directories (every node's full log on disk) and the run history."""
