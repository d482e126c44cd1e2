"""The relay between a session's reader thread and the screen: nothing lost, nothing twice.

The reader thread (of the session's process) emits while the screen's loop drains; each line
is either handed to the screen or counted as skipped, once, and each node's lines keep their
order.
"""

from __future__ import annotations

import threading

from textual.message import Message

from ddptui.core.events import NodeLines, RankChanged, RankState
from ddptui.core.monitor.framing import Attributed
from ddptui.ui.messages import RankUpdates
from ddptui.ui.relay import SessionRelay

NODES = ("local0", "local1", "local2")


def test_lines_emitted_from_another_thread_are_each_shown_or_counted_skipped_once() -> None:
    relay = SessionRelay(lambda _: None, buffer_lines=500)
    batches, size = 400, 37

    def session() -> None:
        for b in range(batches):
            for node in NODES:
                lines = [Attributed(f"{node} {b * size + i}", 0, 0) for i in range(size)]
                relay.emit(NodeLines(node, lines, b * size + 1))

    thread = threading.Thread(target=session)
    thread.start()
    shown: dict[str, list[int]] = {node: [] for node in NODES}
    skipped = dict.fromkeys(NODES, 0)
    while thread.is_alive() or relay._buffer.held:
        entries, dropped = relay.drain()
        for entry in entries:
            shown[entry.node].append(int(entry.text.split()[1]))
            assert entry.seq == shown[entry.node][-1] + 1
        for node, count in dropped.items():
            skipped[node] += count
    thread.join()

    for node in NODES:
        assert len(shown[node]) + skipped[node] == batches * size
        assert shown[node] == sorted(set(shown[node]))  # in order, none twice
    assert relay.lines_seen == len(NODES) * batches * size
    assert sum(skipped.values()) > 0  # the buffer did overflow: the bound was exercised


def test_rank_changes_from_another_thread_reach_the_screen_once_each_in_order() -> None:
    posted: list[RankUpdates] = []
    lock = threading.Lock()

    def post(message: Message) -> None:
        assert isinstance(message, RankUpdates)
        with lock:
            posted.append(message)

    relay = SessionRelay(post)
    changes = [
        RankChanged(rank=i, node="local0", local_rank=i % 8, state=RankState.RUNNING)
        for i in range(20_000)
    ]

    first_taken = threading.Event()

    def session() -> None:
        for i, change in enumerate(changes):
            if i == len(changes) // 2:  # on a loaded machine the session could emit all
                first_taken.wait(30)  # before the screen takes any: it takes one meanwhile
            relay.emit(change)

    thread = threading.Thread(target=session)
    thread.start()
    seen: list[RankChanged] = []
    taken = 0
    while thread.is_alive() or taken < len(posted):
        with lock:
            pending = posted[taken:]
        for message in pending:  # as the screen handles each message, in order
            seen += message.take()
            taken += 1
            first_taken.set()
    thread.join()

    assert seen == changes
    assert len(posted) > 1  # the screen took batches while the session added to them
