"""Provides the sources of the programs that run on the nodes, sent there on stdin.

Everything in this package runs on a node under the node's own `python3` and uses the
standard library only: the job helper (`job_helper.py`: start, tail, reap, probe, port)
and the preflight probe (`probe.py`). The console never imports them; it reads their text.
"""

from __future__ import annotations

from importlib import resources


def job_helper_source() -> bytes:
    """The job helper's source: `python3 - VERB ...` with this on stdin."""
    return resources.files(__name__).joinpath("job_helper.py").read_bytes()


def probe_source() -> bytes:
    """The preflight probe's source, run the same way as the job helper."""
    return resources.files(__name__).joinpath("probe.py").read_bytes()
