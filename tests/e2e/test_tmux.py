"""The real `ddptui` in a terminal (tmux): launch, a rank crashes, jump to its error, tear down.

A private tmux server (`tmux -L <name>`) runs the console; the test types with `send-keys`
and reads the screen with `capture-pane`, polling (never sleeping a fixed time) with
generous limits, since this machine's two cores are shared with other tests. It kills only
its own tmux server.
"""

from __future__ import annotations

import contextlib
import os
import shlex
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.cases import ROOT

WAIT_S = 240.0


class Terminal:
    """One tmux session on a server of our own."""

    def __init__(self, socket: str) -> None:
        self.socket = socket

    def tmux(self, *args: str) -> str:
        result = subprocess.run(
            ["tmux", "-L", self.socket, *args], capture_output=True, text=True, timeout=30
        )
        if result.returncode != 0:
            raise RuntimeError(f"tmux {' '.join(args)}: {result.stderr.strip()}")
        return result.stdout

    def start(self, command: str, width: int = 180, height: int = 50) -> None:
        # the pane stays after the console exits, so a crash's traceback can be read
        shell = f"{command}; code=$?; echo; echo CONSOLE-EXITED-$code; sleep 3600"
        self.tmux("-f", "/dev/null", "new-session", "-d", "-s", "e2e",
                  "-x", str(width), "-y", str(height), shell)  # fmt: skip

    def keys(self, *keys: str) -> None:
        for key in keys:
            self.tmux("send-keys", "-t", "e2e", key)

    def screen(self) -> str:
        return self.tmux("capture-pane", "-p", "-t", "e2e")

    def wait_for(self, predicate: Callable[[str], bool], what: str, timeout: float = WAIT_S) -> str:
        deadline = time.monotonic() + timeout
        while True:
            text = self.screen()
            if predicate(text):
                return text
            if "CONSOLE-EXITED" in text or time.monotonic() > deadline:
                raise AssertionError(f"waiting for {what}; the screen shows:\n{text}")
            time.sleep(0.3)

    def kill(self) -> None:
        subprocess.run(["tmux", "-L", self.socket, "kill-server"], capture_output=True, timeout=30)


@pytest.fixture
def terminal() -> Iterator[Terminal]:
    term = Terminal(f"ddptui-e2e-{os.getpid()}-{time.monotonic_ns()}")
    try:
        yield term
    finally:
        term.kill()


def tagged_pids(run_id: str) -> list[int]:
    needle = f"DDPTUI_TAG={run_id}.".encode()
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                if needle in Path(f"/proc/{entry}/environ").read_bytes():
                    found.append(int(entry))
            except OSError:
                continue
    return found


def test_launch_crash_jump_to_error_and_teardown(terminal: Terminal, tmp_path: Path) -> None:
    state = tmp_path / "state"
    env = {
        "DDPTUI_STATE_DIR": str(state),
        "DDPTUI_CONFIG_DIR": str(tmp_path / "config"),
        "TERM": "xterm-256color",
        "COLORTERM": "truecolor",
    }
    # torchrun restarts the failed workers, so the job stays up until the operator stops it
    console = [
        sys.executable, "-m", "ddptui.cli", "run", "--max-restarts", "50",
        "trainer/envcheck.py", "--fail-rank", "1", "--sleep", "30",
    ]  # fmt: skip
    command = " ".join(f"{k}={shlex.quote(v)}" for k, v in env.items())
    # COLUMNS/LINES (pytest may set them) would override the pane's size for Textual
    terminal.start(
        f"cd {shlex.quote(str(ROOT))} && env -u COLUMNS -u LINES {command} {shlex.join(console)}"
    )
    terminal.wait_for(lambda s: "not launched" in s and "Launch" in s, "the console")

    terminal.keys("l")
    terminal.wait_for(lambda s: "▶" in s or "✗" in s, "ranks to start")
    runs = list((state / "runs").iterdir())
    assert len(runs) == 1
    run_id = runs[0].name

    try:
        # rank 1 raises (on whichever node the rendezvous put it); torchrun restarts the workers.
        # Its error leads the diagnoses, where the panel's width may wrap it after "rank 1".
        terminal.wait_for(lambda s: "(--fail-rank)" in s, "rank 1 to crash")
        terminal.keys("E")
        terminal.wait_for(
            lambda s: "[r1] Traceback (most recent call last):" in s and "(--fail-rank)" in s,
            "the jump to rank 1's first error line",
        )

        terminal.keys("t")
        terminal.wait_for(lambda s: f"Tear down run {run_id}?" in s, "the teardown question")
        terminal.keys("y")
        # the side panel may hold one node's proof above the fold; the farewell holds both
        terminal.wait_for(lambda s: "✓ clean" in s and "torn down" in s, "proof of the teardown")
        deadline = time.monotonic() + 20
        while tagged_pids(run_id) and time.monotonic() < deadline:
            time.sleep(0.3)
        assert tagged_pids(run_id) == []
    finally:  # a failed test must not leave the job running: stop what is left
        for pid in tagged_pids(run_id):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)

    terminal.keys("q")
    screen = terminal.wait_for(lambda s: "CONSOLE-EXITED-1" in s, "the console to exit", 60)
    # what the terminal keeps once the screen clears: the run's outcome and each node's proof
    assert "local0 ✓ clean" in screen and "local1 ✓ clean" in screen, screen
