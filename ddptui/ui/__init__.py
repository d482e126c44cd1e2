"""The Textual console: one consumer of the core's events."""
