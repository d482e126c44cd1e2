"""A teardown's proofs go out host by host, as each comes, not all at the end: at 512 hosts
the slowest host would otherwise hold back what every other host already proved."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from ddptui.core.backends.local import LocalBackend
from ddptui.core.events import Event, NodeLines, TeardownReport
from ddptui.core.job.plan import NodeCommand
from ddptui.core.session.session import Session
from tests.cases import flood_spec
from tests.procs import pids_with_tag

SLOW_S = 3.0


@pytest.fixture(autouse=True)
def _state_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DDPTUI_STATE_DIR", str(tmp_path / "state"))


class SlowToProve(LocalBackend):
    """The local backend, its last node's reap (the real one) started SLOW_S late."""

    async def reap(self, command: NodeCommand) -> TeardownReport:
        if command.node == "local1":
            await asyncio.sleep(SLOW_S)
        return await super().reap(command)


async def test_each_hosts_proof_goes_out_when_it_comes(tmp_path: Path) -> None:
    seen: list[tuple[float, Event]] = []
    first_line = asyncio.Event()

    def emit(event: Event) -> None:
        seen.append((time.monotonic(), event))
        if isinstance(event, NodeLines):
            first_line.set()

    spec = flood_spec(tmp_path, 2, 1_000_000, rate=100)
    session = Session(spec, emit)
    session.backend = SlowToProve(spec, session.run, session.emit)
    runner = asyncio.ensure_future(session.run_job())
    await asyncio.wait_for(first_line.wait(), 120)
    session.request_teardown()
    summary = await runner

    proofs = {e.node: t for t, e in seen if isinstance(e, TeardownReport)}
    assert sorted(proofs) == ["local0", "local1"]
    assert proofs["local1"] - proofs["local0"] > SLOW_S * 0.8  # local0's did not wait for it
    assert all(r.clean for r in session.teardown_reports.values()), summary.detail
    assert pids_with_tag(f"{session.run_id}.") == []
