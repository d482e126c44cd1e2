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


def test_lines_an_earlier_hop_skipped_come_after_the_ones_held_so_those_go_with_them() -> None:
    """The session's process skipped a node's tail while the relay still held older lines of
    it: shown as held-then-note, the note would stand before lines it came after."""
    window = LineWindow()
    window.append(batch("a", 0, 5), keep=100)
    window.append(batch("b", 0, 5), keep=100)
    window.skipped({"a": 3, "b": 0})  # a's lines 5-7, after every line a has here
    window.append(batch("a", 8, 2), keep=100)
    taken, dropped = window.take(100)
    assert {n: c for n, c in dropped.items() if c} == {"a": 8}  # 5 held + 3: before a 8
    assert texts(taken) == [(f"b {i}", i) for i in range(5)] + [("a 8", 8), ("a 9", 9)]


ops = st.lists(
    st.one_of(
        st.tuples(st.just("lines"), st.integers(0, 2), st.integers(1, 20)),
        st.tuples(st.just("skipped"), st.integers(0, 2), st.integers(1, 20)),
        st.tuples(st.just("take"), st.integers(1, 40), st.one_of(st.none(), st.integers(1, 30))),
    ),
    max_size=30,
)


@given(ops, st.integers(1, 60))
def test_a_screen_that_shows_each_count_before_the_lines_has_every_node_in_order(
    steps: list[tuple[str, int, int | None]], keep: int
) -> None:
    """Replayed as the screen does (a take's counts first, then its lines), each node's lines
    and counts add up to its seq numbers in order: every count stands where its lines were."""
    window = LineWindow()
    sent = {f"n{i}": 0 for i in range(3)}  # the next seq of each node
    seen = dict.fromkeys(sent, 0)  # each node's seq as the screen has it

    def show(taken: list[NodeLines], dropped: dict[str, int]) -> None:
        for node, count in dropped.items():
            seen[node] += count
        for b in taken:
            for i in range(len(b.lines)):
                assert b.first_seq + i == seen[b.node], (b.node, b.first_seq + i, seen)
                seen[b.node] += 1

    for kind, a, b in steps:
        if kind == "take":
            show(*window.take(a, b))
            continue
        node = f"n{a}"
        assert b is not None
        if kind == "lines":
            window.append(batch(node, sent[node], b), keep)
        else:
            window.skipped({node: b})
        sent[node] += b
    while window.count or window.dropped:
        show(*window.take(keep))
    assert seen == sent
