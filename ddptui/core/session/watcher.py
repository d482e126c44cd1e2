"""Provides the watch kept on a detached run that notifies: a headless follower in the
background, which gives way to any console that attaches.

A run left detached has no session, so nothing could tell of its end. When the job has a
`--notify` command, the session that detaches starts `ddptui attach RUN --headless --watch` in
a session of its own (it outlives the console and its terminal), its events kept in
`RUN/watcher.jsonl`. The watcher follows the job to its end and notifies as any console would
(once per incident: `RUN/notified`), writes the outcome and the history row, and stops nothing.
A console that attaches later asks it to detach (SIGUSR1, as headless detaches) and waits for
it to go before it follows the run itself; when that console detaches, a watcher starts again.
`RUN/watcher` holds the watcher's PID and its start time (a PID reused later is not it).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass

from ddptui.core.runs.history import proc_start
from ddptui.core.runs.run_dir import RunDir, open_private

WATCHER_FILE = "watcher"
WATCHER_LOG = "watcher.jsonl"
GIVE_WAY_S = 120.0  # a watcher's detach: its node tails closed, its summary written


@dataclass(frozen=True)
class Watcher:
    """The background follower of a run: its PID and start time (`proc_start`)."""

    pid: int
    start: str

    def alive(self) -> bool:
        return proc_start(self.pid) == self.start


def start_watcher(run: RunDir) -> Watcher | None:
    """Start the watcher of `run` (None when it could not start); it writes `RUN/watcher`
    itself once it follows the run (`keep_watch`)."""
    command = [sys.executable, "-m", "ddptui.cli", "attach", str(run.path), "--headless", "--watch"]
    try:
        with open_private(run.path / WATCHER_LOG, "ab") as out:
            proc = subprocess.Popen(
                command,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=out,
                cwd=run.path,
                start_new_session=True,  # not the console's: its terminal's end does not end it
            )
    except OSError:
        return None
    start = proc_start(proc.pid)  # the Popen, once dropped, is reaped by subprocess itself
    return Watcher(proc.pid, start) if start is not None else None


def running_watcher(run: RunDir) -> Watcher | None:
    """The watcher that follows `run` now, if one does."""
    try:
        pid, start = (run.path / WATCHER_FILE).read_text().split()
        watcher = Watcher(int(pid), start)
    except (OSError, ValueError):
        return None
    return watcher if watcher.alive() else None


def give_way(run: RunDir, timeout: float = GIVE_WAY_S) -> Watcher | None:
    """Ask the run's watcher (another process) to detach and wait for it to be gone; the
    watcher that gave way, or None when there was none. TimeoutError if it does not go."""
    watcher = running_watcher(run)
    if watcher is None or watcher.pid == os.getpid():
        return None
    os.kill(watcher.pid, signal.SIGUSR1)
    deadline = time.monotonic() + timeout
    while watcher.alive():
        if time.monotonic() > deadline:
            raise TimeoutError(f"the run's watcher (PID {watcher.pid}) did not detach")
        time.sleep(0.2)
    return watcher


def keep_watch(run: RunDir) -> None:
    """This process is the run's watcher from now on."""
    start = proc_start(os.getpid())
    run.write_private(WATCHER_FILE, f"{os.getpid()} {start}\n")


def end_watch(run: RunDir) -> None:
    """This process no longer watches the run."""
    watcher = running_watcher(run)
    if watcher is not None and watcher.pid == os.getpid():
        (run.path / WATCHER_FILE).unlink(missing_ok=True)
