"""Provides SessionHandle: what a run's consumer may ask of its session, wherever it runs.

Headless mode holds the `Session` itself; the console holds a `SessionProcess`, the same
session in a process of its own. Both keep this promise, so whoever drives a run asks it the
same way (tests/unit/test_session_handle.py checks both against it).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from ddptui.core.job.plan import LaunchPlan
    from ddptui.core.runs.follow import RunFollower
    from ddptui.core.runs.run_dir import RunDir
    from ddptui.core.runs.summary import RunSummary
    from ddptui.core.session.membership import NodeAction
    from ddptui.core.session.process import SessionProcess
    from ddptui.core.session.session import Session


class SessionHandle(Protocol):
    """One run's session, asked from above: stop it, leave it, take stacks, tune the
    straggler watch, act on a node, drill a preemption; its run directory, id and plan (None
    until the backend made it)."""

    run: RunDir
    plan: LaunchPlan | None

    @property
    def run_id(self) -> str: ...

    def request_teardown(self) -> None: ...

    def request_detach(self) -> None: ...

    def request_stacks(self) -> None: ...

    def set_speed(self, paused: bool | None = None, threshold: float | None = None) -> None: ...

    def request_node_action(self, action: NodeAction) -> None: ...

    def request_drill(self) -> None: ...


class ConsoleSession(SessionHandle, Protocol):
    """What the console holds for its run: a session in its own process, or a run followed
    read-only from its directory (`RunFollower`, whose requests change nothing). One type, so
    the console asks `read_only` instead of which kind it holds."""

    attaching: bool
    read_only: bool

    async def serve(self) -> RunSummary | None: ...

    def step_rate(self, node: str, local_rank: int) -> float | None: ...


def _both_are_handles(
    session: Session, process: SessionProcess, follower: RunFollower
) -> tuple[SessionHandle | ConsoleSession, ...]:
    """Never called: mypy checks here that the classes keep the promises."""
    consoles: tuple[ConsoleSession, ...] = (process, follower)
    return (session, *consoles)
