"""Start and follow on one command: the helper's `launch`, through the real local transport.

What must hold: output written before the session follows a node is delivered first, in
order, with nothing lost and the start report kept out of the log; a job that cannot start
is a NodeStartError with the node's reason; following from an offset still works (tail).
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import pytest

from ddptui.core.backends.base import NodeStartError
from ddptui.core.backends.launch_stream import LaunchStream
from ddptui.core.backends.local import LocalBackend
from ddptui.core.backends.transport import CommandResult, LocalTransport, TransportError
from ddptui.core.job.plan import NodeCommand, NodeTarget
from ddptui.core.job.spec import make_spec
from ddptui.core.runs.run_dir import RunDir

LINES = 20_000
WRITER = f"import os, sys\nfor i in range({LINES}): os.write(1, b'line %d\\n' % i)\n"


def _backend(tmp_path: Path, launcher: str) -> tuple[LocalBackend, NodeCommand]:
    script = tmp_path / "job.py"
    script.write_text(WRITER)
    spec = make_spec(script=str(script), launcher=launcher, nodes=1, workdir=str(tmp_path))
    run = RunDir.create("launch-stream", root=tmp_path / "runs")
    backend = LocalBackend(spec, run, lambda _: None)
    plan = backend.plan([NodeTarget("local0", "127.0.0.1")], 29999)
    return backend, plan.commands[0]


def _numbers(data: bytes) -> list[int]:
    return [int(line.split()[-1]) for line in data.decode().splitlines()]


def test_output_before_following_comes_first_in_order_and_whole(tmp_path: Path) -> None:
    # The "launcher" runs the script itself; torchrun's flags are what it ignores.
    launcher = f"{sys.executable} -c 'import runpy, sys; runpy.run_path(sys.argv[-1])'"
    backend, command = _backend(tmp_path, launcher)
    got = bytearray()

    async def go() -> int | None:
        await backend.start(command)
        await asyncio.sleep(1.0)  # the job writes (and may finish) before anyone follows
        return await backend.follow(command, 0, got.extend)

    code = asyncio.run(go())
    assert code == 0
    assert _numbers(bytes(got)) == list(range(LINES))
    on_node = Path(backend.node_log_path(command)).read_bytes()
    assert bytes(got) == on_node  # the start report is not part of the log


def test_following_from_an_offset_tails_the_log(tmp_path: Path) -> None:
    launcher = f"{sys.executable} -c 'import runpy, sys; runpy.run_path(sys.argv[-1])'"
    backend, command = _backend(tmp_path, launcher)
    first, rest = bytearray(), bytearray()

    async def go() -> None:
        await backend.start(command)
        assert await backend.follow(command, 0, first.extend) == 0
        assert await backend.follow(command, 100, rest.extend) == 0

    asyncio.run(go())
    assert bytes(rest) == bytes(first)[100:]


def test_a_job_that_cannot_start_is_a_node_start_error(tmp_path: Path) -> None:
    backend, command = _backend(tmp_path, "/nonexistent/torchrun")
    with pytest.raises(NodeStartError, match="local0: cannot start /nonexistent/torchrun"):
        asyncio.run(backend.start(command))


def test_a_command_that_dies_before_its_report_gives_its_reason() -> None:
    async def go() -> str:
        transport = LocalTransport()
        argv = [sys.executable, "-c", "import sys; sys.stderr.write('no python here'); sys.exit(3)"]
        launch = LaunchStream(lambda sink: transport.stream(argv, sink))
        return await launch.started()

    assert asyncio.run(go()) == "no python here"


def test_a_transport_failure_before_the_report_is_raised() -> None:
    async def broken(_: object) -> CommandResult:
        raise TransportError("node9: connection lost")

    async def go() -> str:
        return await LaunchStream(broken).started()

    with pytest.raises(TransportError, match="connection lost"):
        asyncio.run(go())
