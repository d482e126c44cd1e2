"""`ddptui history --refresh`: runs left detached on remote nodes are asked, and say why not."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import pytest

import ddptui.cli.catch_up as catch_up
from ddptui.cli.reports import print_history
from ddptui.core.backends.base import BackendError
from ddptui.core.job.plan import NodeCommand, NodeTarget, build_plan
from ddptui.core.job.spec import make_spec
from ddptui.core.runs.history import RunHistory
from ddptui.core.runs.run_dir import RunDir
from ddptui.core.runs.summary import RunSummary

RUN_ID = "20261126-050000-0a0b0c"


@pytest.fixture(autouse=True)
def state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("DDPTUI_STATE_DIR", str(tmp_path / "state"))
    return tmp_path / "state"


def _detached_ssh_run() -> RunDir:
    spec = make_spec(
        script="train.py", backend="ssh", hosts=("hx-n1", "hx-n2"), nodes=2, nproc_per_node=2
    )
    run = RunDir.create(RUN_ID)
    run.write_spec(spec)
    nodes = [NodeTarget("hx-n1", "10.0.0.1"), NodeTarget("hx-n2", "10.0.0.2")]
    run.write_plan(build_plan(spec, nodes, RUN_ID, 29400), {"backend": "ssh"})
    history = RunHistory()
    history.started(run, spec)
    history.finished(RunSummary(False, 4, (), str(run.path), RUN_ID, "detached", detached=True))
    return run


class Unreachable:
    async def restore(self, state: dict[str, Any]) -> None:
        raise BackendError("hx-n2: connection refused")

    async def detach(self) -> None:
        pass


class OneStillRuns(Unreachable):
    async def restore(self, state: dict[str, Any]) -> None:
        pass

    async def ended(self, command: NodeCommand) -> int | None:
        return 0 if command.node == "hx-n1" else None


def _listed(refresh: bool) -> list[str]:
    out = io.StringIO()
    assert print_history(None, False, out, refresh=refresh) == 0
    return out.getvalue().splitlines()


def test_without_refresh_remote_runs_are_not_asked_but_the_way_is_said(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _detached_ssh_run()
    monkeypatch.setattr(catch_up, "make_backend", lambda *a: pytest.fail("asked"))
    lines = _listed(refresh=False)
    assert " detached " in lines[1]
    assert "1 run(s) left detached on remote nodes: `ddptui history --refresh` asks them" in lines


def test_a_run_whose_nodes_cannot_be_asked_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    _detached_ssh_run()
    monkeypatch.setattr(catch_up, "make_backend", lambda *a: Unreachable())
    lines = _listed(refresh=True)
    assert " detached " in lines[1]
    note = next(line for line in lines if line.startswith(f"{RUN_ID}: still detached"))
    assert "its nodes cannot be asked at" in note and "hx-n2: connection refused" in note
    record = RunHistory().get(RUN_ID)
    assert record is not None and record.status == "detached"
    assert record.detail.startswith("still detached: its nodes cannot be asked")


def test_a_run_still_running_on_a_node_stays_detached(monkeypatch: pytest.MonkeyPatch) -> None:
    _detached_ssh_run()
    monkeypatch.setattr(catch_up, "make_backend", lambda *a: OneStillRuns())
    lines = _listed(refresh=True)
    note = next(line for line in lines if line.startswith(f"{RUN_ID}: still detached"))
    assert "still running at" in note and note.endswith("on 1 of 2 node(s)")
    record = RunHistory().get(RUN_ID)
    assert record is not None and record.status == "detached"
    assert "on 1 of 2 node(s)" in record.detail
