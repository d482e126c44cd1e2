"""Provides one run end to end: the session, its own process, the typed wire between them."""
