"""Provides SrunDemux: one `srun --label` stream split into per-node streams.

srun direct runs every rank as a task of one step; `--label` puts the task id (= global
rank) before each line (`  3: text`). With `--ntasks-per-node=G --distribution=block`, task R
runs on node R // G as local rank R % G. Each node's lines are rewritten in the prefix format
torchrun writes for us (`[ddptui:R:L]:text`), so the Monitor reads them as it reads torchrun.
srun's own line about tasks (`srun: error: node2: tasks 2-3: Terminated`) becomes one
monitor's `worker_ended_line` per task, attributed to that rank, so the Monitor learns each
rank's exit code from it without knowing srun; srun's other lines go to the first node.

LostWatch reads a node's own log (a step of torchrun agents) for srun's word that Slurm lost
that node.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence

import hostlist

from ddptui.core.backends.errors import NodeLost
from ddptui.core.monitor.framing import worker_ended_line

LABEL = re.compile(rb"^\s*(\d+): ?")
SRUN_TASKS_LINE = re.compile(r"^srun: error: (\S+): tasks? ([\d,\-]+): (.+)$")
# srun refusing to run a step at all: an option it lacks (no pyxis), too few CPUs, ...
_COMPLAINT = re.compile(r"^srun: (?:fatal: |unrecognized option|error: (?!\S+: tasks? ))")
_EXITED = re.compile(r"Exited with exit code (\d+)")
_NODE_FAILURE = re.compile(r"^srun: error: Node failure on (\S+)$")
_NODE_FAILURE_WORDS = b"Node failure on "
_LINE_MAX = 4096  # of a line not yet ended, what LostWatch keeps (srun's own is short)
_SIGNALS = {
    "Terminated": -15,
    "Killed": -9,
    "Aborted": -6,
    "Segmentation fault": -11,
    "Bus error": -7,
    "Interrupt": -2,
    "Hangup": -1,
    "Quit": -3,
    "User defined signal 1": -10,  # the stop signals an operator may choose (--stop-signal)
    "User defined signal 2": -12,
}


def expand_tasks(text: str) -> list[int]:
    """`0-1,3` -> [0, 1, 3] (srun's task ranges)."""
    tasks: list[int] = []
    for part in text.split(","):
        lo, _, hi = part.partition("-")
        if lo.isdigit():
            tasks.extend(range(int(lo), int(hi or lo) + 1))
    return tasks


def task_exit(text: str) -> tuple[int, bool] | None:
    """A rank's own `srun: error: NODE: task R: ...` line -> (exit code, did it end itself).

    A task that exited by itself with a code (or crashed) ended itself; one srun terminated
    or killed (because another task failed, or at teardown) did not.
    """
    match = SRUN_TASKS_LINE.match(text)
    if not match:
        return None
    what = match.group(3).strip()
    exited = _EXITED.search(what)
    if exited:
        return int(exited.group(1)), True
    code = _SIGNALS.get(what.split(" (")[0])
    return (code, code not in (-15, -9)) if code is not None else (1, True)


class LostWatch:
    """A node's log on its way to the console, watched for srun's word that Slurm lost a
    node of the step (`srun: error: Node failure on node[3-4]`, in every node's log): the
    lost node's processes are out of reach and will say nothing more; with `--no-kill` the
    step goes on without them. Whichever node's log says it first tells it; the lost node's
    own log ends its following."""

    def __init__(self, node: str, on_chunk: Callable[[bytes], None], told: set[str]) -> None:
        self.node = node
        self.on_chunk = on_chunk
        self.told = told  # the nodes told lost already (by any node's log)
        self._rest = b""

    def feed(self, chunk: bytes) -> None:
        """Hand `chunk` on; then raise NodeLost if a line of it says Slurm lost this node,
        or another not told yet."""
        self.on_chunk(chunk)
        data = self._rest + chunk
        cut = data.rfind(b"\n") + 1
        whole, self._rest = data[:cut], data[cut:][-_LINE_MAX:]  # srun's line is short
        if _NODE_FAILURE_WORDS not in whole:  # every chunk of every log: one look, mostly
            return
        for line in whole.splitlines():
            said = line.decode(errors="replace").strip()
            for node in lost_nodes(said):
                if node == self.node or node not in self.told:
                    self.told.add(node)
                    raise NodeLost(node, f"Slurm lost the node ({said})", said)


def lost_nodes(line: str) -> list[str]:
    """The nodes srun's `Node failure on NODES` line names (none for any other line)."""
    found = _NODE_FAILURE.match(line)
    if not found:
        return []
    try:
        return list(hostlist.expand_hostlist(found.group(1)))
    except hostlist.BadHostlist:
        return [found.group(1)]


def slurm_complaint(lines: Sequence[str]) -> str | None:
    """The first line in which srun says why it did not run the step, if any."""
    return next((line for line in lines if _COMPLAINT.match(line)), None)


class SrunDemux:
    """Feed raw bytes of the step's output; get each node's bytes back by node index."""

    def __init__(self, nodes: Sequence[str], nproc_per_node: int) -> None:
        self.nodes = list(nodes)
        self.g = nproc_per_node
        self._rest = b""

    def _place(self, rank: int) -> tuple[int, bytes]:
        index = min(rank // self.g, len(self.nodes) - 1)
        return index, b"[ddptui:%d:%d]:" % (rank, rank - index * self.g)

    def _route(self, line: bytes) -> list[tuple[int, bytes]]:
        label = LABEL.match(line)
        if label:
            index, prefix = self._place(int(label.group(1)))
            return [(index, prefix + line[label.end() :])]
        about = SRUN_TASKS_LINE.match(line.decode("utf-8", "replace"))
        if about:
            node, what = about.group(1), about.group(3)
            routed = []
            for rank in expand_tasks(about.group(2)):
                index, prefix = self._place(rank)
                text = f"srun: error: {node}: task {rank}: {what}"
                ended = task_exit(text)
                if ended is not None:
                    text = worker_ended_line(ended[0], not ended[1], text)
                routed.append((index, prefix + text.encode()))
            return routed
        return [(0, line)]

    def feed(self, chunk: bytes) -> dict[int, bytes]:
        data = self._rest + chunk
        *lines, self._rest = data.split(b"\n")
        return self._collect(lines, b"\n")

    def flush(self) -> dict[int, bytes]:
        rest, self._rest = self._rest, b""
        return self._collect([rest], b"") if rest else {}

    def _collect(self, lines: list[bytes], end: bytes) -> dict[int, bytes]:
        out: dict[int, list[bytes]] = {}
        for line in lines:
            for index, text in self._route(line):
                out.setdefault(index, []).append(text + end)
        return {index: b"".join(parts) for index, parts in out.items()}
