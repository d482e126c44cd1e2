"""The session process's outbox: how many of the nodes' lines the console gets, and that every
line is either sent (in order, once) or counted as left out. Over a real pipe, read back as
the console reads it."""

from __future__ import annotations

import os
import threading
import time
from collections import Counter

from ddptui.core.events import Event, NodeLines, Notice
from ddptui.core.session.child import Outbox
from ddptui.core.session.wire import FrameReader, LineBlock, Out


class Console:
    def __init__(self, fd: int) -> None:
        self.blocks: list[LineBlock] = []
        self.items: list[object] = []
        self._thread = threading.Thread(target=self._read, args=(fd,))
        self._thread.start()

    def _read(self, fd: int) -> None:
        for frame in FrameReader(fd):
            assert isinstance(frame, Out)
            if frame.block is not None:
                self.blocks.append(frame.block)
            self.items += frame.items
        os.close(fd)

    def join(self) -> None:
        self._thread.join(10)

    def sent(self) -> dict[str, list[int]]:
        """Each node's line numbers as they came."""
        got: dict[str, list[int]] = {}
        for block in self.blocks:
            for batch in block.batches:
                got.setdefault(batch.node, []).extend(int(t) for t, _, _ in batch.lines)
        return got

    def dropped(self) -> Counter[str]:
        total: Counter[str] = Counter()
        for block in self.blocks:
            total.update(block.dropped)
        return total


def batch(node: str, first: int, n: int) -> NodeLines:
    return NodeLines(node, [(str(i), 0, 0) for i in range(first, first + n)], first + 1)


def outbox(rate: float, burst: int) -> tuple[Outbox, Console]:
    read, write = os.pipe()
    console = Console(read)
    return Outbox(write, rate, burst, lambda: None), console


def close(box: Outbox, console: Console) -> None:
    box.close()
    os.close(box.fd)
    console.join()


def test_a_burst_after_a_quiet_spell_comes_whole() -> None:
    box, console = outbox(rate=1_000, burst=6_000)
    for b in range(10):  # 5,000 lines at once, as 1,024 ranks printing an epoch line
        box.emit(batch(f"n{b % 2}", (b // 2) * 500, 500))
    close(box, console)

    assert console.dropped() == Counter()
    assert console.sent() == {"n0": list(range(2500)), "n1": list(range(2500))}
    assert console.blocks[-1].seen == 5000


def test_a_sustained_flood_gets_the_rate_and_every_line_is_accounted_for() -> None:
    box, console = outbox(rate=20_000, burst=2_000)
    events: list[Event] = []
    start = time.monotonic()
    for b in range(400):  # 200,000 lines in well under the 10 s the rate would need
        box.emit(batch("n0", b * 500, 500))
        if b % 100 == 0:
            notice = Notice("info", f"event {b}")
            events.append(notice)
            box.emit(notice)
    close(box, console)
    took = time.monotonic() - start

    sent = console.sent()["n0"]
    assert sent == sorted(set(sent))  # in order, once each
    assert len(sent) + console.dropped()["n0"] == 200_000
    assert console.blocks[-1].seen == 200_000
    assert len(sent) <= 2_000 + 20_000 * took  # the budget, not the flood
    assert 199_999 in sent  # the newest lines are the ones kept
    assert console.items == events  # events are never left out, and keep their order
