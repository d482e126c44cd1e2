"""Provides RunFollower: a run followed read-only from its directory, as a console shows it.

Why: a run watched by several people (`ddptui serve`: one console per browser tab) must
have one session only, the one that launched or attached to it; a second session would
follow the nodes again and could stop the job or fight the first over it. A follower asks
the nodes nothing: it reads what that session (or, for a local run, each node's job
helper) writes into the run directory as the run goes, the nodes' logs through a Monitor
of its own (lines, rank states and the failure story, as the session read them) and the
rest from `events.jsonl` (node states, the phase, GPUs, stalls, teardown proof, the
summary). Its cost is a few `stat`s a tick and the Monitor's work on the lines that came.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from ddptui.core.diagnose.job_watch import JobWatch
from ddptui.core.events import Event, NodeChanged, NodeState, RankChanged
from ddptui.core.job.plan import LaunchPlan
from ddptui.core.job.spec import JobSpec
from ddptui.core.runs.event_log import EventLogTail
from ddptui.core.runs.run_dir import RunDir
from ddptui.core.runs.summary import RunSummary

POLL_S = 0.05  # how often the files are looked at: the page shows a change within this
CHUNK = 1 << 20
ENDED = (NodeState.EXITED, NodeState.FAILED, NodeState.STOPPED)


@dataclass
class _NodeLog:
    """Where the follower is in one node's log; `skip` bytes are already read (the log
    was written again from its start: an attach after a detach)."""

    node: str
    path: Path
    offset: int = 0
    skip: int = 0
    ended: bool = False


class RunFollower:
    """Follows `run` and hands every event to `emit` (in its own thread: `emit` must be
    thread-safe), as a session would; `serve()` returns the run's summary once it is
    written, and runs until cancelled while the run goes on.

    It has a session's face where the console asks one (`run`, `run_id`, `plan`,
    `step_rate`) and refuses what only a session can do: it never stops, detaches or
    asks the nodes anything.
    """

    attaching = True
    read_only = True  # a session's requests, refused: it follows, it changes nothing

    def __init__(self, spec: JobSpec, emit: Callable[[Event], None], run: RunDir) -> None:
        self.spec = spec
        self.run = run
        self._emit = emit
        plan, _state = run.read_plan()
        self.plan: LaunchPlan | None = plan
        self.monitor = JobWatch(
            plan.node_names,
            plan.nproc_per_node,
            spec.progress_pattern,
            replica_groups=bool(spec.ft_replicas),
        )
        self._logs = [_NodeLog(c.node, run.node_log(c.index, c.node)) for c in plan.commands]
        self._events = EventLogTail(run.path / "events.jsonl")
        self._stop = threading.Event()
        self._lock = threading.Lock()  # the Monitor: this thread feeds it, the screen asks

    @property
    def run_id(self) -> str:
        return self.run.run_id

    async def serve(self) -> RunSummary | None:
        """Follow the run until its summary is written (returned) or this is cancelled. A
        detached run's summary is not its end: the follower goes on with whoever attaches."""
        try:
            return await asyncio.shield(asyncio.to_thread(self.follow))
        except asyncio.CancelledError:
            self._stop.set()
            raise

    def stop(self) -> None:
        self._stop.set()

    # What only a session does: a follower is asked the same way and does nothing.
    def request_teardown(self) -> None:
        """Refused: the run is not this console's (read-only)."""

    def request_detach(self) -> None:
        """Refused: a follower holds nothing to let go of."""

    def request_stacks(self) -> None:
        """Refused: it asks the nodes nothing."""

    def set_speed(self, paused: bool | None = None, threshold: float | None = None) -> None:
        """Refused: the run's own session judges stragglers."""

    def request_node_action(self, action: object) -> None:
        """Refused: it acts on no node (any action: the session's kind of it too)."""

    def request_drill(self) -> None:
        """Refused: it signals no rank."""

    def step_rate(self, node: str, local_rank: int) -> float | None:
        with self._lock:
            return self.monitor.step_rate(node, local_rank)

    def follow(self) -> RunSummary | None:
        """The follower's loop (in a thread of its own)."""
        with self._lock:
            self._emit_all(self.monitor.initial_events())
        while not self._stop.is_set():
            summary = self.step(time.time())
            if summary is not None:
                return summary
            self._stop.wait(POLL_S)
        return None

    def step(self, now: float) -> RunSummary | None:
        """One look at the files: what the logs and the events file say since the last."""
        with self._lock:
            for log in self._logs:
                self._read_log(log, now)
            for event in self._events.new():
                if isinstance(event, RunSummary) and event.detached:
                    continue  # its session left, the job runs on: whoever attaches writes on
                if isinstance(event, RunSummary):
                    for log in self._logs:
                        self._end_node(log, None, now)
                    self._emit(event)
                    return event
                if isinstance(event, NodeChanged) and event.state in ENDED:
                    ended = next((n for n in self._logs if n.node == event.node), None)
                    if ended is not None:
                        self._end_node(ended, event.exit_code, now)
                self._emit(event)
            for log in self._logs:
                self._exit_file(log, now)
            ticked = self.monitor.tick(now, self.spec.hang_timeout)
            # The session's own stall judgement is in the events file: only the ranks here.
            self._emit_all([e for e in ticked if isinstance(e, RankChanged)])
        return None

    def _read_log(self, log: _NodeLog, now: float) -> None:
        try:
            size = log.path.stat().st_size
        except OSError:
            return
        if size < log.offset:  # written again from its start
            log.skip, log.offset = log.offset, 0
        if size == log.offset or log.ended:
            return
        with open(log.path, "rb") as f:
            f.seek(log.offset)
            while chunk := f.read(CHUNK):
                log.offset += len(chunk)
                if log.skip:
                    cut = min(log.skip, len(chunk))
                    chunk, log.skip = chunk[cut:], log.skip - cut
                if chunk:
                    self._emit_all(self.monitor.feed(log.node, chunk, now))

    def _end_node(self, log: _NodeLog, exit_code: int | None, now: float) -> None:
        if log.ended:
            return
        self._read_log(log, now)
        log.ended = True
        self._emit_all(self.monitor.end_of_output(log.node))
        if exit_code is not None:
            self._emit_all(self.monitor.node_exited(log.node, exit_code))

    def _exit_file(self, log: _NodeLog, now: float) -> None:
        """A local run's node ended while no session followed it: its helper's exit file."""
        if log.ended:
            return
        exit_file = Path(f"{log.path}.exit")
        try:
            code = int(exit_file.read_text().strip() or "1")
        except (OSError, ValueError):
            return
        self._end_node(log, code, now)

    def _emit_all(self, events: list[Event]) -> None:
        for event in events:
            self._emit(event)
