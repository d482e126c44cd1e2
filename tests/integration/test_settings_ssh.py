"""Settings checked across ranks on real hosts: one host's login sets an NCCL_ variable."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from testbed.netns import Testbed
from tests.integration.sshrun import TRAINER, HeadlessRun, ddptui_argv, run_headless, state_env

ODD_HOST = "node2"


@pytest.fixture
def odd_login(testbed: Testbed) -> Iterator[Testbed]:
    """node2's sshd gives its sessions NCCL_IB_DISABLE=1 (as its login environment would);
    node1's does not. Put back after the test."""
    assert testbed.ssh is not None
    testbed.ssh.set_env(ODD_HOST, {"NCCL_IB_DISABLE": "1"})
    try:
        yield testbed
    finally:
        testbed.ssh.set_env(ODD_HOST, {})


def _run(tb: Testbed, tmp_path: Path) -> HeadlessRun:
    return run_headless(
        tb,
        tmp_path / "state",
        "--hosts",
        "node[1-2]",
        str(TRAINER / "cpu_ddp.py"),
        "3",
        "2",
        "--checkpoint_path",
        str(tmp_path / "snap.pt"),
    )


def _first(run: HeadlessRun, wanted: Callable[[dict], bool]) -> int:
    """The index of the first event `wanted(event)` holds for (one past the end if none)."""
    return next((i for i, e in enumerate(run.events) if wanted(e)), len(run.events))


def _stepped(event: dict) -> bool:
    """A rank made progress: its first metric (a step), or it moved past running."""
    return event["event"] == "metric" or (
        event["event"] == "rank" and event["state"] in ("done", "failed")
    )


def test_a_host_whose_login_sets_an_nccl_variable_is_named_before_the_first_step(
    odd_login: Testbed, tmp_path: Path
) -> None:
    run = _run(odd_login, tmp_path)
    assert run.code == 0, (run.summary, run.stderr[-2000:])
    told = _first(run, lambda e: e["event"] == "incident" and e["kind"] == "settings_differ")
    assert told < len(run.events), [e for e in run.events if e["event"] == "settings"]
    incident = run.events[told]
    assert told < _first(run, _stepped), run.events[told : told + 5]
    assert incident["nodes"] == [ODD_HOST] and sorted(incident["blamed"]) == [2, 3]
    assert "NCCL_IB_DISABLE=1" in incident["headline"], incident["headline"]
    assert ODD_HOST in incident["headline"] and "unset elsewhere" in incident["headline"]
    first = run.of("settings")[0]
    assert first["complete"] and first["ranks"] == 4
    (difference,) = first["differences"]
    assert difference["name"] == "NCCL_IB_DISABLE"
    assert difference["odd"] == [{"value": "1", "ranks": [2, 3], "nodes": [ODD_HOST]}]
    assert difference["reference"]["nodes"] == ["node1"]
    # the run ends well: a setting warns, it is no failure; the summary tells it
    assert run.summary["ok"] is True
    assert "settings differ" in run.summary["headline"]


def test_hosts_that_agree_raise_no_settings_incident(testbed: Testbed, tmp_path: Path) -> None:
    run = _run(testbed, tmp_path)
    assert run.code == 0, (run.summary, run.stderr[-2000:])
    kinds = {e["kind"] for e in run.of("incident")}
    assert not kinds & {"settings_differ", "known_bad_nccl"}, run.of("incident")
    settings = run.of("settings")
    assert settings and all(s["differences"] == [] for s in settings), settings
    assert settings[0]["complete"] and settings[0]["ranks"] == 4
    assert _first(run, lambda e: e["event"] == "settings") < _first(run, _stepped)
    last = settings[-1]["common"]  # every group up: its backend and timeout, the same on all
    assert last["backend"] == "gloo" and last["process group timeout"].endswith(" s"), last
    assert "GLOO_SOCKET_IFNAME" in last, last


def test_preflight_warns_on_the_host_whose_login_sets_an_nccl_variable(
    odd_login: Testbed, tmp_path: Path
) -> None:
    argv = ddptui_argv(
        odd_login, "preflight", "--headless", "--no-gang", "--hosts", "node[1-2]",
        str(TRAINER / "envcheck.py"),
    )  # fmt: skip
    proc = subprocess.run(
        argv, capture_output=True, text=True, timeout=300, cwd=tmp_path,
        env=state_env(tmp_path / "state"),
    )  # fmt: skip
    events = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    checks = {(e["node"], e["check"]): e for e in events if e["event"] == "check"}
    odd, fine = checks[(ODD_HOST, "settings")], checks[("node1", "settings")]
    assert odd["status"] == "warn", odd
    assert odd["detail"] == "NCCL_IB_DISABLE=1 here; unset on node1", odd
    assert fine["status"] == "ok", fine
    assert proc.returncode == 0, (proc.stdout[-2000:], proc.stderr[-2000:])  # a warning only
