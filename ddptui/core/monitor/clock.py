"""Provides a node's clock offset from the console's, by Cristian's algorithm (RTT/2 bound)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass


@dataclass(frozen=True)
class ClockExchange:
    """One question to a node: the console's clock when it asked and when the answer came,
    and the node's clock in the answer (all ns)."""

    sent_ns: int
    node_ns: int
    received_ns: int

    @property
    def rtt_ns(self) -> int:
        return self.received_ns - self.sent_ns


@dataclass(frozen=True)
class ClockOffset:
    """The node's clock minus the console's: a node time `t` is `t - offset_ns` on the
    console's clock, to within `error_ns` (half the round trip that measured it)."""

    offset_ns: int
    error_ns: int
    exchanges: int

    def to_console_ns(self, node_ns: int) -> int:
        return node_ns - self.offset_ns

    @property
    def told(self) -> bool:
        """Whether the offset is told apart from zero: larger than its own error bound. A
        reading over SSH starts a command on the node, so the node reads its clock late in the
        round trip and the midpoint is off by up to half of it: an offset within that bound
        may be nothing but the bias, and subtracting it from one node's ranks would make
        them all look late (or early) together."""
        return abs(self.offset_ns) > self.error_ns


ZERO = ClockOffset(0, 0, 0)


def estimate_offset(exchanges: Iterable[ClockExchange]) -> ClockOffset | None:
    """The offset from the exchange with the shortest round trip (Cristian: the node read
    its clock somewhere inside it, so the midpoint is off by at most half of it; the shortest
    one bounds the error best, and a slow answer cannot bias it). None without a valid
    exchange (one whose answer came before it was asked is dropped)."""
    valid = [e for e in exchanges if e.rtt_ns >= 0]
    if not valid:
        return None
    best = min(valid, key=lambda e: e.rtt_ns)
    midpoint = best.sent_ns + best.rtt_ns // 2
    return ClockOffset(best.node_ns - midpoint, (best.rtt_ns + 1) // 2, len(valid))
