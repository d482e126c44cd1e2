"""Provides `ddptui` and its subcommands: flags, headless output and text reports."""
