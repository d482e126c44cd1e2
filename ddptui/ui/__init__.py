"""Provides the Textual console: the one UI consumer of the core's session events."""
