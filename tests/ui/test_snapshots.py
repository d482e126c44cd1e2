"""Snapshot tests of the console's key screens, made deterministic with a fixed job."""

from __future__ import annotations

from typing import Any

from ddptui.core.spec import make_spec
from ddptui.ui.app import DdpApp

from .conftest import SIZE


def fixed_app() -> DdpApp:
    """No path, port, run id or clock in the picture depends on this machine or this run."""
    spec = make_spec(
        script="/opt/ddptui/trainer/envcheck.py",
        script_args=("--sleep", "30"),
        workdir="/srv/ddp",
        launcher="python3 -m torch.distributed.run",
    )
    return DdpApp(spec)


def test_main_screen_before_launch(snap_compare: Any) -> None:
    assert snap_compare(fixed_app(), terminal_size=SIZE)


def test_help_screen(snap_compare: Any) -> None:
    assert snap_compare(fixed_app(), press=["question_mark"], terminal_size=SIZE)
