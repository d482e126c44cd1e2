"""A node's clock offset by Cristian's algorithm: the shortest round trip decides."""

from __future__ import annotations

from ddptui.core.monitor.clock import ClockExchange, ClockOffset, estimate_offset


def test_the_midpoint_of_the_shortest_round_trip_gives_the_offset_and_half_of_it_the_error() -> (
    None
):
    exchanges = [
        ClockExchange(sent_ns=1_000, node_ns=5_000_900, received_ns=3_000),  # rtt 2000
        ClockExchange(sent_ns=10_000, node_ns=5_010_300, received_ns=10_400),  # rtt 400
        ClockExchange(sent_ns=20_000, node_ns=5_020_100, received_ns=29_000),  # rtt 9000
    ]
    offset = estimate_offset(exchanges)
    assert offset == ClockOffset(offset_ns=5_000_100, error_ns=200, exchanges=3)
    assert offset.to_console_ns(5_010_300) == 10_200


def test_a_node_behind_the_console_has_a_negative_offset() -> None:
    offset = estimate_offset([ClockExchange(1_000_000, 400_000, 1_000_200)])
    assert offset is not None and offset.offset_ns == -600_100
    assert offset.to_console_ns(400_000) == 1_000_100


def test_a_slow_answer_does_not_bias_it() -> None:
    """A node that answered late (queued behind other work) has a long round trip: it is
    outvoted by any short one, whichever side the delay was on."""
    true_offset = 7_000_000
    fast = ClockExchange(0, 50 + true_offset, 100)
    slow = ClockExchange(200, 90_000 + true_offset, 100_000)
    offset = estimate_offset([slow, fast])
    assert offset is not None and abs(offset.offset_ns - true_offset) <= offset.error_ns == 50


def test_nothing_valid_gives_none() -> None:
    assert estimate_offset([]) is None
    assert estimate_offset([ClockExchange(10, 5, 9)]) is None  # answered before asked
