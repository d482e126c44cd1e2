"""Provides headless mode: the same Session as the console, its events as JSON lines."""

from __future__ import annotations

import asyncio
import signal
import sys
from typing import TextIO

from ddptui.cli.gc_policy import end_startup
from ddptui.core.diagnose.speed import SpeedRound
from ddptui.core.events import Event, NodeLines, Notice
from ddptui.core.job.spec import JobSpec
from ddptui.core.runs.run_dir import RunDir
from ddptui.core.session.drill import DrillAsked
from ddptui.core.session.loop_end import run_to_end
from ddptui.core.session.membership import NodeAction, parse_action
from ddptui.core.session.session import Session

CONTROL_FILE = "control"


def act_on_control_file(session: Session) -> None:
    """The operator's actions on nodes, for scripts and tests: each line of the run
    directory's `control` file (`kill NODE`, `drain NODE`, `kill_group NODE`, `kill_rank
    NODE LOCAL_RANK`, `drill`: a preemption drill of the whole job) is done, then the file
    is removed; SIGUSR2 asks for it."""
    path = session.run.path / CONTROL_FILE
    try:
        text = path.read_text()
        path.unlink()
    except OSError as exc:
        session.emit(Notice("warning", f"SIGUSR2: no control file to act on ({exc})"))
        return
    for line in text.splitlines():
        match parse_action(line):
            case NodeAction() as action:
                session.request_node_action(action)
            case DrillAsked():
                session.request_drill()
            case None if line.strip():
                session.emit(Notice("warning", f"control file: not an action: {line!r}"))


def run_headless(
    spec: JobSpec,
    *,
    lines: bool = False,
    out: TextIO = sys.stdout,
    attach: RunDir | None = None,
    detach: bool = False,
    run_id: str | None = None,
    again_of: str | None = None,
    watching: bool = False,
) -> int:
    """Run the job to the end; exit 0 only if every rank exited 0 and every node is clean.

    With `detach`, return once every node is launched and leave the job running (exit 0 if
    it launched); SIGUSR1 detaches at any time. `ddptui attach RUN_ID` follows it later.
    SIGUSR2 acts on the run directory's `control` file (`act_on_control_file`).
    `run_id`: the new run's id, when it was chosen before (an early allocation names it).
    `again_of`: the run this one relaunches (history lists it as another attempt of it).
    `watching`: this is the background watcher of a detached run (session/watcher.py).
    """

    def emit(event: Event) -> None:
        if isinstance(event, SpeedRound):
            return  # the speed view's, every round: the straggler events say what changed
        if not isinstance(event, NodeLines):
            out.write(event.to_json() + "\n")
        elif lines:  # one JSON line per output line, as `line` events
            out.write("".join(line.to_json() + "\n" for line in event.each()))
        else:
            return
        out.flush()

    async def main() -> int:
        run = attach or (RunDir.create(run_id) if run_id else None)
        session = Session(
            spec,
            emit,
            run=run,
            detach_after_launch=detach,
            attaching=attach is not None,
            watching=watching,
        )
        if again_of:
            session.run.mark_attempt_of(again_of)
        end_startup()  # the backend and its engine are imported by now
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            loop.add_signal_handler(sig, session.request_teardown)
        loop.add_signal_handler(signal.SIGUSR1, session.request_detach)
        loop.add_signal_handler(signal.SIGUSR2, lambda: act_on_control_file(session))
        summary = await session.run_job()
        if session.refused:  # bad input, as the operator's other mistakes: one line, exit 2
            print(f"ddptui: error: {session.refused}", file=sys.stderr)
            return 2
        if summary.detached:
            return 0 if summary.detail.startswith("detached") else 1
        return 0 if summary.ok else 1

    return run_to_end(main())  # a task left behind cannot keep the run's process alive
