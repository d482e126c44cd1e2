"""Provides the reading of node output: framing, rank attribution, rank state, diagnosis."""
