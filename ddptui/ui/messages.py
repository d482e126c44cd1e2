"""Provides the Textual messages that carry a session's low-volume events to the screen."""

from __future__ import annotations

from textual.message import Message

from ddptui.core.events import (
    AllocationChanged,
    Event,
    FailureReport,
    NodeChanged,
    Notice,
    RankChanged,
    RunSummary,
    TeardownReport,
)


class SessionMessage(Message):
    """Base of the messages built from core events (never from NodeLine: those are batched)."""

    def __init__(self, event: Event) -> None:
        super().__init__()
        self.event = event


class RankUpdate(SessionMessage):
    """A rank changed state; only the newest state of a rank matters, so it supersedes."""

    event: RankChanged

    def can_replace(self, message: Message) -> bool:
        return (
            isinstance(message, RankUpdate)
            and message.event.node == self.event.node
            and message.event.local_rank == self.event.local_rank
        )


class NodeUpdate(SessionMessage):
    """A node's agent changed state; the newest state of a node supersedes older ones."""

    event: NodeChanged

    def can_replace(self, message: Message) -> bool:
        return isinstance(message, NodeUpdate) and message.event.node == self.event.node


class AllocationUpdate(SessionMessage):
    event: AllocationChanged


class TeardownUpdate(SessionMessage):
    event: TeardownReport


class NoticeUpdate(SessionMessage):
    event: Notice


class SummaryUpdate(SessionMessage):
    event: RunSummary


class FailureUpdate(SessionMessage):
    """torchrun's failure summary named a failed worker."""

    event: FailureReport


_MESSAGE_FOR: dict[type[Event], type[SessionMessage]] = {
    RankChanged: RankUpdate,
    NodeChanged: NodeUpdate,
    AllocationChanged: AllocationUpdate,
    TeardownReport: TeardownUpdate,
    Notice: NoticeUpdate,
    RunSummary: SummaryUpdate,
    FailureReport: FailureUpdate,
}


def message_for(event: Event) -> SessionMessage | None:
    """The message for an event, or None for kinds the console does not show."""
    kind = _MESSAGE_FOR.get(type(event))
    return kind(event) if kind else None
