"""Provides RunController: the run a job screen shows — its session's process, relay and end."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from functools import partial
from pathlib import Path

from textual.message import Message
from textual.worker import Worker

from ddptui.core.job.plan import LaunchPlan
from ddptui.core.job.spec import JobSpec
from ddptui.core.runs.follow import RunFollower
from ddptui.core.runs.run_dir import RunDir, node_log_name
from ddptui.core.runs.summary import RunSummary
from ddptui.core.session.handle import ConsoleSession
from ddptui.core.session.membership import NodeAction
from ddptui.core.session.process import SessionProcess, call_on_loop
from ddptui.ui.relay import SessionRelay
from ddptui.ui.widgets.run_outcome import StopRequest


class RunController:
    """Starts a run's session in its own process, asks it (teardown, detach, stacks, a
    rank's step rate) and keeps what the screen needs of it; the screen renders the events
    the relay posts to it, and holds this object rather than sharing its state.

    `run_worker` is the screen's (Textual runs workers on a node of the DOM); `post` the
    screen's `post_message`, called on the screen's loop. With `follow`, a run is followed
    from its directory alone (`RunFollower`: read-only, no session of its own), and every
    request to the run is refused.
    """

    def __init__(
        self,
        spec: JobSpec,
        run_worker: Callable[..., Worker[RunSummary | None]],
        post: Callable[[Message], object],
        follow: bool = False,
    ) -> None:
        self.spec = spec
        self.follow = follow
        self._run_worker = run_worker
        self._post = post
        self.relay = SessionRelay(self._post_from_session)
        self.session: ConsoleSession | None = None
        self.summary: RunSummary | None = None
        self.stop_request: StopRequest = None
        self.worker: Worker[RunSummary | None] | None = None  # a follower's may end with none
        self._loop: asyncio.AbstractEventLoop | None = None
        self._plan_shown = False

    def on_loop(self) -> None:
        """Called once the screen's loop runs: the relay's messages are posted on it."""
        self._loop = asyncio.get_running_loop()

    @property
    def active(self) -> bool:
        """A session is running (launching, following, or tearing down)."""
        return self.worker is not None and not self.worker.is_finished

    def new_session(self, run: RunDir | None = None) -> ConsoleSession:
        """A session for a new run (its directory made now: OSError if it cannot be), or for
        `run` to attach to (followed from its directory when this controller follows)."""
        if self.follow:
            if run is None:
                raise OSError("a console that follows a run launches none")
            return RunFollower(self.spec, self.relay.emit, run)
        return SessionProcess(self.spec, self.relay.emit, self.relay.take_block, run=run)

    @property
    def process(self) -> ConsoleSession | None:
        """The session this console may ask to change the run (a follower is read-only)."""
        return self.session if self.session is not None and not self.session.read_only else None

    def start(self, session: ConsoleSession) -> None:
        self.session = session
        self.relay.metrics.reset()
        self.summary = None
        self.stop_request = None
        self._plan_shown = False
        self.worker = self._run_worker(
            session.serve(), group="session", exclusive=True, exit_on_error=False
        )

    def teardown(self) -> bool:
        """Ask the session to stop the job on every node; False when there is none running."""
        if self.process is None or not self.active:
            return False
        self.process.request_teardown()
        self.stop_request = self.stop_request or "teardown"
        return True

    def detach(self) -> bool:
        if self.process is None or not self.active:
            return False
        self.stop_request = "detach"
        self.process.request_detach()
        return True

    def take_stacks(self) -> bool:
        if self.process is None or not self.active:
            return False
        self.process.request_stacks()
        return True

    def set_speed(self, paused: bool | None = None, threshold: float | None = None) -> bool:
        """Pause or resume the straggler watch, or move its threshold (False: no running job)."""
        if self.process is None or not self.active:
            return False
        self.process.set_speed(paused, threshold)
        return True

    def act_on_node(self, action: NodeAction) -> bool:
        """Kill or drain a node, or kill one rank (confirmed already; False: no running job)."""
        if self.process is None or not self.active:
            return False
        self.process.request_node_action(action)
        return True

    def drill(self) -> bool:
        """A preemption drill of the run (confirmed already; False: no running job)."""
        if self.process is None or not self.active:
            return False
        self.process.request_drill()
        self.stop_request = self.stop_request or "teardown"  # the drill ends the run
        return True

    def step_rate(self, node: str, local_rank: int) -> float | None:
        return self.session.step_rate(node, local_rank) if self.session is not None else None

    def new_plan(self) -> LaunchPlan | None:
        """The backend's plan, the first time it is known (the commands that really run)."""
        if self._plan_shown or self.session is None or self.session.plan is None:
            return None
        self._plan_shown = True
        return self.session.plan

    def save_dir(self) -> Path | None:
        return self.session.run.path / "saved" if self.session is not None else None

    def node_log_path(self, node: str) -> str:
        if self.session is None or self.session.plan is None:
            return "in the run directory"
        index = list(self.session.plan.node_names).index(node)
        return str(self.session.run.nodes_dir / node_log_name(index, node))

    def _post_from_session(self, message: Message) -> None:
        """The relay's way to the screen, from the session process's reader thread."""
        call_on_loop(self._loop, partial(self._post, message))
