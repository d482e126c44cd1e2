"""Provides the garbage collector's policy for a ddptui process: quiet start-up, quick exit.

Why: start-up imports build some 200k long-lived objects (pydantic, asyncssh, cryptography,
Textual) and free almost none, so collections during imports are wasted work; and at exit the
interpreter's final collections walk that whole heap again (0.1-0.3 s on a loaded machine).
`gc.freeze()` moves what start-up built out of the collector's sight: later collections skip
it (cheaper for the whole run) and the final ones at exit too. Cyclic garbage made after
start-up is still collected as usual.
"""

from __future__ import annotations

import atexit
import gc

_started = False


def begin_startup() -> None:
    """No collections until `end_startup`; freeze the heap at exit so exit is quick."""
    global _started
    if not _started:
        _started = True
        atexit.register(gc.freeze)
    gc.disable()


def end_startup() -> None:
    """What start-up built is permanent: freeze it, and collect normally from here on."""
    gc.freeze()
    gc.enable()
