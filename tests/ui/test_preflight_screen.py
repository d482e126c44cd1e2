"""The preflight screen: a grid of every node's checks, with each failure's fix."""

from __future__ import annotations

import time
from typing import Any

from textual.widgets import Static

from ddptui.core.backends.transport import CommandResult, LocalTransport, Transport
from ddptui.core.events import Event
from ddptui.core.job.plan import NodeTarget
from ddptui.core.job.spec import JobSpec, make_spec
from ddptui.core.preflight.access import LineSink, NodeAccess
from ddptui.core.preflight.preflight import CHECKS, CheckResult, PreflightSummary
from ddptui.ui.app import DdpApp
from ddptui.ui.screens.preflight import PreflightScreen

from .conftest import SIZE, local_spec, wait_for
from .screen_host import ScreenHost


def node_facts(i: int, *, torch: bool = True, loopback: bool = False) -> dict[str, Any]:
    addr = f"10.9.0.{10 + i}"
    probe: dict[str, Any] = {"python": "3.11.7", "executable": "/usr/bin/python3"}
    probe["launcher"] = "/usr/bin/torchrun"
    if torch:
        probe.update(torch="2.13.0+cpu", cuda_available=False)
    else:
        probe["torch_error"] = "ModuleNotFoundError: No module named 'torch'"
    return {
        "hostname": f"node{i}",
        "self": {"addrs": ["127.0.1.1" if loopback else addr], "error": ""},
        "ifaces": {"127.0.0.1": "lo", addr: "eth0"},
        "python": probe,
        "gpu": {"present": False},
        "disk": {"existing": "/root", "free": 40 << 30, "writable": True},
        "script": {"path": "/w/train.py", "exists": True},
        "t_start": time.time(),
        "elapsed": 0.0,
    }


class FakeAccess(NodeAccess):
    """Three nodes that answer from memory: node2 lacks torch, node3's name is on loopback."""

    @property
    def rundir(self) -> str:
        return "~/.local/state/ddptui/runs"

    async def open(self) -> list[NodeTarget]:
        self.nodes = [NodeTarget(f"node{i}", f"10.9.0.{10 + i}") for i in (1, 2, 3)]
        return self.nodes

    def transport(self, node: str) -> Transport:
        return LocalTransport()

    def argv(self, node: str, verb: str, *args: str) -> list[str]:
        return [verb, *args]

    async def run(
        self, node: str, verb: str, *args: str, timeout: float = 60, job: Any = None
    ) -> dict[str, Any]:
        i = int(node[-1])
        if verb == "facts":
            return node_facts(i, torch=i != 2, loopback=i == 3)
        if verb == "resolve":
            return {n: {"addrs": [f"10.9.0.{10 + int(n[-1])}"], "error": ""} for n in args}
        return {"ok": True, "ms": 0.5, "banner": args[-1]}

    async def stream(self, node: str, verb: str, *args: str, on_line: LineSink) -> CommandResult:
        on_line('{"listening": true, "error": ""}')
        return CommandResult(0, "", "")


def fake(spec: JobSpec, emit: Any) -> NodeAccess:
    return FakeAccess(spec, emit)


async def test_console_preflight_of_the_local_job_fills_the_grid() -> None:
    app = DdpApp(local_spec())
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("p")
        await wait_for(pilot, lambda: isinstance(app.screen, PreflightScreen), "preflight")
        screen = app.screen
        assert isinstance(screen, PreflightScreen)
        await wait_for(pilot, lambda: screen.summary is not None, "the checks", 180)
        assert screen.summary is not None and screen.summary.ok, screen.results
        grid = screen.grid
        assert grid.nodes == ["local0", "local1"]
        assert {grid.status(n, c) for n in grid.nodes for c in CHECKS} == {"ok"}
        assert "ready" in str(screen.status.render())
        await pilot.press("r")
        await pilot.pause()
        assert screen.running or screen.summary is not None
        await wait_for(pilot, lambda: screen.summary is not None, "the second run", 180)
        await pilot.press("escape")
        await wait_for(pilot, lambda: not isinstance(app.screen, PreflightScreen), "back")


async def test_failures_are_marked_with_their_fixes() -> None:
    spec = make_spec(script="train.py", backend="ssh", hosts=("node1", "node2", "node3"), nodes=3)
    app = ScreenHost(lambda: PreflightScreen(spec, access=fake))
    async with app.run_test(size=SIZE) as pilot:
        screen = app.screen
        assert isinstance(screen, PreflightScreen)
        await wait_for(pilot, lambda: screen.summary is not None, "the checks")
        assert screen.summary is not None and not screen.summary.ok
        assert set(screen.summary.failed) == {"node2: torch", "node3: hostname"}
        grid = screen.grid
        assert grid.status("node2", "torch") == "fail"
        assert grid.status("node3", "hostname") == "fail"
        assert grid.status("node1", "torch") == "ok"
        problems = str(screen.problems.render())
        assert "✗ node2 · torch: /usr/bin/python3 cannot import torch" in problems
        assert "fix: pip install torch==2.13.0" in problems
        assert "127.0.1.1 (loopback)" in problems and "--socket-ifname eth0" in problems
        grid.focus()
        grid.move_cursor(row=1, column=1 + CHECKS.index("torch"))
        await pilot.pause()
        cell = str(screen.query_one("#preflight-cell", Static).render())
        assert cell.startswith("node2 · torch: /usr/bin/python3 cannot import torch")
        assert "NOT ready" in str(screen.status.render())


FIXED: list[Event] = [
    *(
        CheckResult(node, check, "ok", "fine")
        for node in ("node1", "node2", "node3")
        for check in CHECKS
        if (node, check) not in {("node2", "torch"), ("node3", "hostname"), ("node3", "clock")}
    ),
    CheckResult(
        "node2",
        "torch",
        "fail",
        "torch 1.13.1 (/opt/venv/lib/python3.11/site-packages/torch/__init__.py); "
        "2.13.0+cpu on node1 and 1 other(s)",
        "install torch==2.13.0 there: every node must run the same torch",
    ),
    CheckResult(
        "node3",
        "hostname",
        "fail",
        "its hostname 'node3' resolves to 127.0.1.1 (loopback): Gloo/NCCL pick that address "
        "and the other nodes cannot connect (Gloo connectFullMesh failed)",
        "on node3, map node3 to 10.9.0.13 in /etc/hosts instead of 127.0.1.1 (Debian's "
        "127.0.1.1 line), or pass --socket-ifname eth0",
    ),
    CheckResult("node3", "clock", "warn", "0.90 s ahead of node1 (±0.05 s)", "run chrony"),
    PreflightSummary(
        False,
        ("node1", "node2", "node3"),
        ("node2: torch", "node3: hostname"),
        ("node3: clock",),
        "2 check(s) failed",
    ),
]


def fixed_results() -> ScreenHost:
    spec = make_spec(script="train.py", backend="ssh", hosts=("node1", "node2", "node3"), nodes=3)
    return ScreenHost(lambda: PreflightScreen(spec, autostart=False))


def test_snapshot_preflight_grid(snap_compare: Any) -> None:
    async def feed(pilot: Any) -> None:
        screen = pilot.app.screen
        for event in FIXED:
            screen.show(event)
        await pilot.pause()

    assert snap_compare(fixed_results(), run_before=feed, terminal_size=SIZE)
