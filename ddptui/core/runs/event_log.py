"""Provides the run's events read back from its `events.jsonl`, as the typed events again."""

from __future__ import annotations

import dataclasses
import enum
import json
import types
import typing
from collections.abc import Iterator
from functools import cache
from pathlib import Path
from typing import Any

import ddptui.core.diagnose.settings
import ddptui.core.diagnose.stall_events
import ddptui.core.runs.summary  # noqa: F401 - declares its kinds, the stall's and settings'
from ddptui.core.events import EVENT_KINDS, Event
from ddptui.core.story.incident import Incident, IncidentReport


def followed_kind(kind: str) -> type[Event] | None:
    """The class of a kind a follower of the run directory takes from the file: one that says
    `followed`. Lines, rank states and the failure records are not among them: it reads
    those from the nodes' logs through its own Monitor, as the session does. Asked of
    EVENT_KINDS as it stands, so the kinds declared above this layer (the session's drill)
    count once their module is imported, as it is wherever a console follows a run."""
    cls = EVENT_KINDS.get(kind)
    return cls if cls is not None and cls.followed else None


class EventDecodeError(ValueError):
    """A line of events.jsonl is not an event of the kind it names."""


@cache
def _hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def _value(hint: Any, value: Any) -> Any:
    """`value` (as `plain` wrote it) as the field's type `hint` wants it."""
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        if value is None:
            return None
        options = [a for a in typing.get_args(hint) if a is not type(None)]
        return _value(options[0], value) if len(options) == 1 else value
    if origin is tuple or (isinstance(origin, type) and issubclass(origin, typing.Sequence)):
        args = typing.get_args(hint)
        if len(args) == 2 and args[1] is Ellipsis:
            return tuple(_value(args[0], v) for v in value)
        if args and origin is tuple:
            return tuple(_value(a, v) for a, v in zip(args, value, strict=False))
        return tuple(value)
    if isinstance(hint, type) and issubclass(hint, enum.Enum):
        return hint(value)
    if isinstance(hint, type) and dataclasses.is_dataclass(hint) and isinstance(value, dict):
        return decode_record(hint, value)
    return value


def decode_record(cls: type, data: dict[str, Any]) -> Any:
    """A frozen dataclass of `cls` from its dict; fields the file lacks keep their defaults."""
    hints = _hints(cls)
    kwargs = {
        f.name: _value(hints[f.name], data[f.name])
        for f in dataclasses.fields(cls)
        if f.name in data and f.init
    }
    try:
        return cls(**kwargs)
    except (TypeError, ValueError) as exc:
        raise EventDecodeError(f"{cls.__name__}: {exc}") from None


def decode_event(line: str) -> Event | None:
    """The event of one line of events.jsonl; None for kinds a follower does not take."""
    try:
        data = json.loads(line)
    except ValueError as exc:
        raise EventDecodeError(str(exc)) from None
    cls = followed_kind(str(data.get("event", ""))) if isinstance(data, dict) else None
    if cls is None:
        return None
    if cls is IncidentReport:  # its line holds the incident's fields at the top
        incident = decode_record(Incident, data)
        return IncidentReport(incident, int(data.get("lead", 0)), ts=float(data.get("ts", 0.0)))
    event: Event = decode_record(cls, data)
    return event


class EventLogTail:
    """Follows a run's events.jsonl as its session appends to it: each call to `new()` gives
    the events of the whole lines written since the last (a line half written waits)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.offset = 0
        self.bad_lines = 0

    def new(self) -> Iterator[Event]:
        try:
            with open(self.path, "rb") as f:
                f.seek(self.offset)
                data = f.read()
        except OSError:
            return
        end = data.rfind(b"\n") + 1
        self.offset += end
        for raw in data[:end].splitlines():
            try:
                event = decode_event(raw.decode("utf-8", "replace"))
            except EventDecodeError:
                self.bad_lines += 1
                continue
            if event is not None:
                yield event
