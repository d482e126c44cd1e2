"""Provides the console one browser tab of `ddptui serve` runs: the run followed, read-only.

`python -m ddptui.cli.view RUN_DIR [--control]`, started by the server (never by a shell)
with Textual's web driver. Read-only, it follows the run from its directory (RunFollower)
and offers nothing that would change it. With `--control` (`serve --allow-control`) the
first tab to ask gets the run as `ddptui attach` gives it (teardown, detach, stacks), held
by a lock on the run directory while its console runs: one session at a time, and the
other tabs follow read-only beside it.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import os
from pathlib import Path
from typing import IO, Any

CONTROL_LOCK = "control.lock"


def take_control(run_path: Path) -> IO[Any] | None:
    """The run's control lock, held while the returned file stays open; None when another
    console of the server has it."""
    fd = os.open(run_path / CONTROL_LOCK, os.O_RDWR | os.O_CREAT, 0o600)
    f = os.fdopen(fd, "r+")
    try:
        fcntl.flock(f.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        f.close()
        return None
    return f


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="ddptui-view", description=__doc__)
    parser.add_argument("run_dir")
    parser.add_argument("--control", action="store_true")
    args = parser.parse_args(argv)

    from ddptui.core.runs.run_dir import RunDir
    from ddptui.ui.app import DdpApp

    run = RunDir.open(args.run_dir)
    spec = run.read_spec()
    with contextlib.ExitStack() as stack:
        lock = take_control(run.path) if args.control else None
        if lock is not None:
            stack.callback(lock.close)
        app = DdpApp(spec, attach=run, follow=lock is None)
        if args.control and lock is None:
            app.greeting = "another browser tab controls this run: this one follows it, read-only"
        return app.run() or 0


if __name__ == "__main__":
    raise SystemExit(main())
