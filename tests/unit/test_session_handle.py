"""Both ways to hold a session keep SessionHandle's promise (mypy checks it in handle.py;
this checks the requests' parameters at run time, where a rename would slip past callers)."""

from __future__ import annotations

import inspect

import pytest

from ddptui.core.runs.follow import RunFollower
from ddptui.core.session.handle import ConsoleSession, SessionHandle
from ddptui.core.session.process import SessionProcess
from ddptui.core.session.session import Session

REQUESTS = ("request_teardown", "request_detach", "request_stacks", "set_speed")


@pytest.mark.parametrize("kind", [Session, SessionProcess, RunFollower])
def test_every_request_is_asked_the_same_way(kind: type) -> None:
    for name in REQUESTS:
        promised = inspect.signature(getattr(SessionHandle, name))
        kept = inspect.signature(getattr(kind, name))
        assert list(kept.parameters) == list(promised.parameters), (kind.__name__, name)
    assert isinstance(inspect.getattr_static(kind, "run_id"), property)


@pytest.mark.parametrize("kind", [SessionProcess, RunFollower])
def test_the_console_holds_one_kind_of_session(kind: type) -> None:
    """A session's process or a followed run: the console asks both the same way, and a
    follower says it is read-only rather than being told apart by its class."""
    for name in ("serve", "step_rate"):
        promised = inspect.signature(getattr(ConsoleSession, name))
        assert list(inspect.signature(getattr(kind, name)).parameters) == list(
            promised.parameters
        ), (kind.__name__, name)
    assert RunFollower.read_only is True
