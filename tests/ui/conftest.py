"""Shared helpers for the console's Pilot tests: a private state dir, polling, process scans."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import pytest
from textual.pilot import Pilot

from ddptui.core.job.profiles import bundled_trainer
from ddptui.core.job.spec import JobSpec, make_spec
from ddptui.ui.app import DdpApp
from ddptui.ui.screens.job import JobScreen
from tests.procs import pids_with_tag

SIZE = (160, 45)


@pytest.fixture(autouse=True)
def state_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Runs go to a temporary state dir, never ~/.local/state."""
    path = tmp_path / "state"
    monkeypatch.setenv("DDPTUI_STATE_DIR", str(path))
    # never the operator's own ~/.config/ddptui/keymap.toml
    monkeypatch.setenv("DDPTUI_CONFIG_DIR", str(tmp_path / "config"))
    return path


def local_spec(*script_args: str, **fields: object) -> JobSpec:
    return make_spec(script=bundled_trainer(), script_args=tuple(script_args), **fields)


def job_screen(app: DdpApp) -> JobScreen:
    return app.job_screen


async def wait_for(
    pilot: Pilot[object], predicate: Callable[[], bool], what: str, timeout: float = 120.0
) -> None:
    """Poll the app's state (never a fixed sleep) until `predicate` holds."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")
        await pilot.pause(0.1)


def tagged_pids(run_id: str) -> list[int]:
    """Processes whose environment carries this run's DDPTUI_TAG (every process of the job)."""
    return pids_with_tag(f"{run_id}.")


def wait_no_tagged_pids(run_id: str, timeout: float = 10.0) -> list[int]:
    """Zombies being reaped can linger an instant after teardown; allow a short grace."""
    deadline = time.monotonic() + timeout
    while (pids := tagged_pids(run_id)) and time.monotonic() < deadline:
        time.sleep(0.2)
    return pids
