"""The gang test for real on this machine's CPU: torchrun, gloo, two pseudo-nodes. One node is
made slow (trainer/gang_check.py's --delay-node rehearsal) and the judgement names it."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from ddptui.core.job.spec import make_spec
from ddptui.core.preflight.gang import gang_spec, judge
from ddptui.core.preflight.gang_runner import run_gang


def test_the_slow_node_is_named(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DDPTUI_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.chdir(tmp_path)
    spec = make_spec(script="x.py", nodes=2, nproc_per_node=2)
    run = asyncio.run(run_gang(gang_spec(spec, delay=(1, 2.0))))
    assert not run.error, run
    assert sorted(run.nodes) == ["local0", "local1"]
    assert {g.backend for g in run.nodes.values()} == {"gloo"}
    found = judge(run.nodes, ["local0", "local1"])
    slow = [f for f in found if f.status == "fail"]
    assert len(slow) == 1, found
    assert run.nodes[slow[0].node].group_rank == 1  # the node that was told to be slow
    assert slow[0].detail.startswith("slow node: ")
    fine = next(f for f in found if f.status == "ok")
    assert fine.detail.startswith("its 2 ranks ")
