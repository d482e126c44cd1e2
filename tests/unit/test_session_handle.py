"""Both ways to hold a session keep SessionHandle's promise (mypy checks it in handle.py;
this checks the requests' parameters at run time, where a rename would slip past callers)."""

from __future__ import annotations

import inspect

import pytest

from ddptui.core.session.handle import SessionHandle
from ddptui.core.session.process import SessionProcess
from ddptui.core.session.session import Session

REQUESTS = ("request_teardown", "request_detach", "request_stacks", "set_speed")


@pytest.mark.parametrize("kind", [Session, SessionProcess])
def test_every_request_is_asked_the_same_way(kind: type) -> None:
    for name in REQUESTS:
        promised = inspect.signature(getattr(SessionHandle, name))
        kept = inspect.signature(getattr(kind, name))
        assert list(kept.parameters) == list(promised.parameters), (kind.__name__, name)
    assert isinstance(inspect.getattr_static(kind, "run_id"), property)
