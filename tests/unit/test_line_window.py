"""LineWindow: the newest lines up to a bound, and a take of at most so many at once (the
screen's tick), the rest kept in order for the next take."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from ddptui.core.events import NodeLines
from ddptui.core.session.line_window import LineWindow


def batch(node: str, first: int, n: int) -> NodeLines:
    return NodeLines(node, [(f"{node} {i}", 0, 0) for i in range(first, first + n)], first)


def texts(batches: list[NodeLines]) -> list[tuple[str, int]]:
    """Each line's text and its seq, in order."""
    return [(line[0], b.first_seq + i) for b in batches for i, line in enumerate(b.lines)]


def test_a_take_of_at_most_n_gives_the_oldest_n_and_keeps_the_rest_for_the_next() -> None:
    window = LineWindow()
    for first in (0, 5, 10):
        window.append(batch("a", first, 5), keep=100)
    window.append(batch("b", 0, 3), keep=100)
    taken, dropped = window.take(100, most=7)
    assert texts(taken) == [(f"a {i}", i) for i in range(7)]  # the second batch cut at 2
    assert dropped == {}
    assert window.count == 11
    rest, _ = window.take(100, most=None)
    assert texts(rest) == [(f"a {i}", i) for i in range(7, 15)] + [(f"b {i}", i) for i in range(3)]
    assert window.count == 0


def test_lines_beyond_the_bound_are_counted_once_and_the_take_is_the_newest() -> None:
    window = LineWindow()
    window.append(batch("a", 0, 10), keep=100)
    window.append(batch("b", 0, 10), keep=100)
    taken, dropped = window.take(12, most=5)  # keep the newest 12: 8 of a's go
    assert dropped == {"a": 8}
    assert texts(taken) == [("a 8", 8), ("a 9", 9), ("b 0", 0), ("b 1", 1), ("b 2", 2)]
    taken, dropped = window.take(12, most=5)
    assert dropped == {}  # said once
    assert texts(taken) == [(f"b {i}", i) for i in range(3, 8)]


@given(
    st.lists(st.integers(1, 30), min_size=1, max_size=12),
    st.integers(1, 60),
    st.one_of(st.none(), st.integers(1, 40)),
)
def test_every_line_is_taken_once_in_order_or_counted_dropped(
    sizes: list[int], keep: int, most: int | None
) -> None:
    window = LineWindow()
    sent = []
    taken: list[tuple[str, int]] = []
    dropped = 0
    for n, size in enumerate(sizes):
        node = f"n{n % 3}"
        b = batch(node, n * 100, size)
        sent += texts([b])
        window.append(b, keep)
        got, gone = window.take(keep, most)
        taken += texts(got)
        dropped += sum(gone.values())
        assert most is None or len(texts(got)) <= most
    while window.count:
        got, gone = window.take(keep, most)
        taken += texts(got)
        dropped += sum(gone.values())
    assert len(taken) + dropped == len(sent)
    positions = [sent.index(line) for line in taken]
    assert positions == sorted(positions)  # in arrival order, none twice
