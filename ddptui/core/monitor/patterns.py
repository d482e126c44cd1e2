"""Provides failure recognition: what a log line says went wrong, exit codes as signals, step rates.

The patterns come from real output (tests/unit/data/torchrun/ holds what this machine's torch
printed; the NCCL ones from a GPU host): a line is matched on its own, without the rank prefix,
so the same recogniser serves worker lines and the torchrun agent's own lines.
"""

from __future__ import annotations

import re
import signal
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from ddptui.core.events import Diagnosis

# Kinds, most specific first; `peer_lost` is usually a consequence of another rank's death.
COLLECTIVE_TIMEOUT = "collective_timeout"
CUDA_OOM = "cuda_oom"
DUPLICATE_GPU = "duplicate_gpu"  # NCCL: two ranks of one communicator on one GPU
RENDEZVOUS_CONNECT = "rendezvous_connect"
RENDEZVOUS_TIMEOUT = "rendezvous_timeout"
PORT_IN_USE = "port_in_use"
PEER_LOST = "peer_lost"
TRACEBACK = "traceback"
HUNG = "hung"
STRAGGLER = "straggler"
EXITED = "exit"  # the agent saw the worker end (the only trace a SIGKILL leaves)
NAN_OR_INF = "nan_or_inf"  # a loss printed as NaN or Inf (core/metrics/wrong_numbers.py)
LOSS_SPIKE = "loss_spike"  # a loss that jumped by orders of magnitude
KINDS = (
    COLLECTIVE_TIMEOUT,
    CUDA_OOM,
    DUPLICATE_GPU,
    RENDEZVOUS_CONNECT,
    RENDEZVOUS_TIMEOUT,
    PORT_IN_USE,
    PEER_LOST,
    TRACEBACK,
    HUNG,
    STRAGGLER,
    EXITED,
    NAN_OR_INF,
    LOSS_SPIKE,
)
# Only these are about the rendezvous itself: an agent line of this kind concerns the node's
# ranks only while they have not been assigned yet (later, it is a teardown's echo).
RENDEZVOUS_KINDS = frozenset({RENDEZVOUS_CONNECT, RENDEZVOUS_TIMEOUT, PORT_IN_USE})

RATE_WINDOW_S = 60.0
MIN_PROGRESS_SAMPLES = 3

_WATCHDOG = re.compile(
    r"Watchdog caught collective operation timeout: Work\w*\(SeqNum=(\d+), OpType=(\w+)"
    r".*?Timeout\(ms\)=(\d+)\)(?: ran for (\d+) milliseconds)?"
)
_GLOO_TIMEOUT = re.compile(r"Timed out waiting (\d+)ms for (\w+) operation to complete")
_OOM = re.compile(r"CUDA out of memory\.(?: Tried to allocate ([\d.]+ [KMGTP]?i?B))?")
_DUPLICATE_GPU = re.compile(
    r"Duplicate GPU detected\s*:\s*rank (\d+) and rank (\d+) both on CUDA device (\w+)"
)
_CONNECT_TIMEOUT = re.compile(
    r"client socket has timed out after (\d+)ms while trying to connect to \(([^,]+), (\d+)\)"
)
_REFUSED = re.compile(r"Connection refused")
_RDZV_CONNECT = re.compile(r"RendezvousConnectionError")
_RDZV_TIMEOUT = re.compile(r"RendezvousTimeoutError|rendezvous.*timed out", re.IGNORECASE)
_PORT_IN_USE = re.compile(r"EADDRINUSE|[Aa]ddress already in use")
_PORT_NUMBER = re.compile(r"port:? (\d+)")
_VALIDATE = re.compile(r"TCP client failed to connect/validate to host (\S+?):(\d+)\b.*?: ([^:]+)$")
_PEER_LOST = re.compile(
    r"Connection (?:closed|reset) by peer(?: \[([^\]]+)\]:(\d+))?"
    r"|Failed to recv, got 0 bytes"
)


def _watchdog(m: re.Match[str]) -> str:
    ran = f", ran {int(m.group(4)) / 1000:.1f} s" if m.group(4) else ""
    return (
        f"collective timed out: {m.group(2)} (SeqNum {m.group(1)}) "
        f"past its {int(m.group(3)) / 1000:g} s timeout{ran} — a peer is stuck or gone"
    )


def _gloo_timeout(m: re.Match[str]) -> str:
    return f"collective timed out: {m.group(2)} waited {int(m.group(1)) / 1000:g} s for a peer"


def _oom(m: re.Match[str]) -> str:
    tried = f" (tried to allocate {m.group(1)})" if m.group(1) else ""
    return f"CUDA out of memory{tried}"


def pci_of_nccl_bus_id(bus_id: str) -> str:
    """NCCL prints a GPU's bus id as the hex digits of `DDDD:BB:DD.F` run together (`70` is
    0000:00:07.0): back to the form nvidia-smi shows."""
    value = int(bus_id, 16)
    return f"{value >> 20:04x}:{(value >> 12) & 0xFF:02x}:{(value >> 4) & 0xFF:02x}.{value & 0xF:x}"


def _duplicate_gpu(m: re.Match[str]) -> str:
    try:
        where = f"the GPU at PCI {pci_of_nccl_bus_id(m.group(3))}"
    except ValueError:
        where = "one GPU"
    return (
        f"two ranks on one GPU: ranks {m.group(1)} and {m.group(2)} both on {where} "
        f"(NCCL `invalid usage`): give each rank its own GPU — at most as many processes per "
        f"node as it has GPUs (--nproc-per-node), and a disjoint CUDA_VISIBLE_DEVICES for "
        f"jobs that share a machine"
    )


def _connect_timeout(m: re.Match[str]) -> str:
    return (
        f"cannot reach the rendezvous store at {m.group(2)}:{m.group(3)} "
        f"(no answer in {int(m.group(1)) / 1000:g} s): is the head node up, the port open?"
    )


def _validate(m: re.Match[str]) -> str:
    return (
        f"connecting to the rendezvous store at {m.group(1)}:{m.group(2)} failed: "
        f"{m.group(3).strip()} (another service on that port?)"
    )


def _port_in_use(m: re.Match[str]) -> str:
    port = _PORT_NUMBER.search(m.string)
    where = f"port {port.group(1)}" if port else "the rendezvous port"
    return f"{where} is already in use on this node: choose another (--rdzv-port)"


def _peer_lost(m: re.Match[str]) -> str:
    peer = f" ({m.group(1)}:{m.group(2)})" if m.group(1) else ""
    return f"a peer closed the connection{peer}: another rank probably died first"


_RULES: tuple[tuple[str, re.Pattern[str], Callable[[re.Match[str]], str]], ...] = (
    (COLLECTIVE_TIMEOUT, _WATCHDOG, _watchdog),
    (COLLECTIVE_TIMEOUT, _GLOO_TIMEOUT, _gloo_timeout),
    (CUDA_OOM, _OOM, _oom),
    (DUPLICATE_GPU, _DUPLICATE_GPU, _duplicate_gpu),
    (PORT_IN_USE, _PORT_IN_USE, _port_in_use),
    (RENDEZVOUS_CONNECT, _CONNECT_TIMEOUT, _connect_timeout),
    (RENDEZVOUS_CONNECT, _VALIDATE, _validate),
    (
        RENDEZVOUS_CONNECT,
        _REFUSED,
        lambda m: "connection refused: nothing listens where it connects (head node down? port?)",
    ),
    (
        RENDEZVOUS_CONNECT,
        _RDZV_CONNECT,
        lambda m: "the connection to the c10d rendezvous store failed",
    ),
    (
        RENDEZVOUS_TIMEOUT,
        _RDZV_TIMEOUT,
        lambda m: "rendezvous timed out: not every node joined in time",
    ),
    (PEER_LOST, _PEER_LOST, _peer_lost),
)


# Text every rule's match contains (lower case), so a block of lines with none of them needs
# no rule tried line by line; tests/unit/test_diagnosis.py checks each rule against them.
_CLUES = (
    "watchdog caught",
    "timed out",
    "out of memory",
    "duplicate gpu",
    "eaddrinuse",
    "already in use",
    "tcp client failed",
    "connection refused",
    "rendezvous",
    "by peer",
    "failed to recv",
)


def may_report_failure(text: str) -> bool:
    """False when no line of `text` can be a failure `recognise` knows: a cheap first look."""
    lowered = text.lower()
    return any(clue in lowered for clue in _CLUES)


def recognise(text: str, seq: int | None = None) -> Diagnosis | None:
    """The failure a single line reports, or None for an ordinary line."""
    if len(text) > 4096:  # a megabyte-long progress bar is not an error report
        text = text[:4096]
    for kind, pattern, describe in _RULES:
        match = pattern.search(text)
        if match:
            return Diagnosis(kind, describe(match), text.strip()[:500], seq)
    return None


# Kinds whose line explains an exception that says little by itself (NCCL's `invalid usage`
# is followed by its "Last error:" line), read from torchrun's error file too.
EXPLAINING = frozenset({DUPLICATE_GPU})


def explaining_lines(lines: Sequence[str]) -> list[Diagnosis]:
    """What the explaining lines among `lines` (an error file's traceback) say."""
    found = []
    for line in lines:
        if may_report_failure(line):
            diagnosis = recognise(line)
            if diagnosis is not None and diagnosis.kind in EXPLAINING:
                found.append(diagnosis)
    return found


def signal_name(exit_code: int | None) -> str | None:
    """SIGKILL for -9 (a Popen return code) and for 137 (a shell's 128 + 9)."""
    if exit_code is None:
        return None
    if exit_code < 0:
        number = -exit_code
    elif 128 < exit_code < 128 + 65:
        number = exit_code - 128
    else:
        return None
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def describe_exit(exit_code: int | None) -> str:
    """How the grid writes an exit: `SIGKILL`, `exit 1`, or `?` when unknown."""
    if exit_code is None:
        return "?"
    return signal_name(exit_code) or f"exit {exit_code}"


def compile_progress(pattern: str | None) -> re.Pattern[str] | None:
    return re.compile(pattern) if pattern else None


def progress_value(pattern: re.Pattern[str], text: str) -> float | None:
    """The step a progress line reports (its first captured number), or None if no match.

    A pattern with no group, or a group that captured nothing, counts the line itself: NaN.
    """
    match = pattern.search(text)
    if match is None:
        return None
    for group in match.groups():
        if group is not None:
            try:
                return float(group)
            except ValueError:
                break
    return float("nan")


@dataclass
class StepRate:
    """A rank's recent progress lines; its rate in steps (or progress lines) per second."""

    window_s: float = RATE_WINDOW_S

    def __post_init__(self) -> None:
        self._samples: deque[tuple[float, float]] = deque(maxlen=256)
        self.count = 0

    def observe(self, now: float, value: float) -> None:
        self.count += 1
        self._samples.append((now, value))
        while len(self._samples) > 2 and now - self._samples[0][0] > self.window_s:
            self._samples.popleft()

    @property
    def last_at(self) -> float:
        """When the last progress line came (0: none yet)."""
        return self._samples[-1][0] if self._samples else 0.0

    @property
    def interval(self) -> float:
        """The mean time between the window's progress lines (0: fewer than two)."""
        if len(self._samples) < 2:
            return 0.0
        return (self._samples[-1][0] - self._samples[0][0]) / (len(self._samples) - 1)

    def rate(self, now: float) -> float | None:
        """Progress per second from the window's first sample until `now`.

        Uses the reported step numbers when they go up, else the number of progress lines,
        so `Epoch 3` lines and `Steps: 8` lines (always 8) both give a rate. Until `now` and not
        until the last sample, so a rank that stops progressing falls behind.
        """
        if len(self._samples) < MIN_PROGRESS_SAMPLES:
            return None
        (t0, v0), (_, v1) = self._samples[0], self._samples[-1]
        span = now - t0
        if span <= 0:
            return None
        progressed = v1 - v0 if v1 == v1 and v0 == v0 and v1 > v0 else len(self._samples) - 1
        return progressed / span
