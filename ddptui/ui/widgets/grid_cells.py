"""Provides RankGridCell and NodeRow: what the rank grid draws, kept from the events it is fed."""

from __future__ import annotations

import time
from collections.abc import Iterable

from ddptui.core.events import Diagnosis, GpuFlag, GpuStat, NodeState, RankChanged, RankState
from ddptui.core.monitor.patterns import LOSS_SPIKE, NAN_OR_INF, signal_name
from ddptui.core.story.incident import Incident, IncidentKind

GLYPH = {
    RankState.PENDING: "·",
    RankState.ASSIGNED: "○",
    RankState.RUNNING: "▶",
    RankState.DONE: "✓",
    RankState.FAILED: "✗",
    RankState.HUNG: "!",
    RankState.STOPPED: "■",  # the operator's teardown ended it: no failure
    RankState.RESTARTING: "↻",  # its agent restarts the group: the next round will come
}
STRAGGLER_GLYPH = "»"
SUSPECT_GLYPH = "‼"  # a stalled rank whose stacks single it out
WRONG_GLYPH = "≠"  # a running rank whose loss went NaN or Inf, or jumped
WRONG_WORD = {NAN_OR_INF: "nan", LOSS_SPIKE: "spike"}
BLAMED_GLYPH = "◆"  # the rank the story's lead blames
BLAME_WORD = {  # the lead's kind, in a cell's few columns
    IncidentKind.CRASH: "crash",
    IncidentKind.OUT_OF_MEMORY: "oom",
    IncidentKind.HANG: "hang",
    IncidentKind.COLLECTIVE_MISMATCH: "mismatch",
    IncidentKind.STRAGGLER: "slow",
    IncidentKind.NON_FINITE: "nan",
    IncidentKind.NODE_LOST: "lost",
    IncidentKind.AGENT_LOST: "lost",
    IncidentKind.RESTARTED: "restarted",
    IncidentKind.SETTINGS_DIFFER: "settings",
    IncidentKind.KNOWN_BAD_NCCL: "nccl",
}
BARS = " ▁▂▃▄▅▆▇█"
MEM_FLAG = "mem_high"


class RankGridCell:
    """How the grid draws one (node, local rank), from the rank events the screen feeds it
    (the monitor's own record of a rank is `core.monitor.rank_cell.RankCell`); labelled
    `L<local>` until the rendezvous gives its global rank.

    A failed rank shows its exit code, or the signal that killed it (`SIGKILL` for -9/137);
    a hung one is amber, a straggler orange; one the operator's teardown stopped is grey, with
    no exit code (its end is the teardown's doing, not a failure of the job).
    """

    def __init__(self, node: str, local_rank: int) -> None:
        self.node = node
        self.local_rank = local_rank
        self.state = RankState.PENDING
        self.rank: int | None = None
        self.exit_code: int | None = None
        self.detail = ""
        self.diagnoses: tuple[Diagnosis, ...] = ()
        self.restarts = 0
        self.straggler = False
        self.slow: float | None = None  # its relative score while the speed watch names it
        self.slow_detail = ""
        self.suspect = False
        self.blamed: Incident | None = None  # the story's lead, when it blames this rank
        self.selected = False
        self.gpu: GpuStat | None = None  # its GPU's latest sample, when telemetry comes
        self.gpu_flag: GpuFlag | None = None
        self.history: list[tuple[float, RankState]] = [(time.time(), RankState.PENDING)]

    @property
    def label(self) -> str:
        return f"r{self.rank}" if self.rank is not None else f"L{self.local_rank}"

    @property
    def wrong_number(self) -> str:
        """`nan` or `spike` when the rank's metrics went wrong (the monitor's diagnosis)."""
        return next((WRONG_WORD[d.kind] for d in self.diagnoses if d.kind in WRONG_WORD), "")

    @property
    def glyph(self) -> str:
        """The cell in one character, for the compact grid."""
        if self.blame_word and not self.state.final:
            return BLAMED_GLYPH
        if self.suspect:
            return SUSPECT_GLYPH
        if self.state == RankState.RUNNING and self.wrong_number:
            return WRONG_GLYPH
        return STRAGGLER_GLYPH if self.slow_running else GLYPH[self.state]

    @property
    def blame_word(self) -> str:
        """The lead's kind in a word while it blames this rank, else "": while it holds, or
        for good once the rank has ended (a stall is over with the run, its rank still the one
        it blamed; a straggler that recovered is not marked)."""
        lead = self.blamed
        if lead is None or (lead.over and not self.state.final):
            return ""
        return BLAME_WORD.get(lead.kind, "")

    @property
    def slow_running(self) -> bool:
        """A running rank that is slow: by its step rate, or named by the speed watch (the
        others wait for it in their collectives)."""
        named = self.slow is not None and self.state == RankState.RUNNING
        return self.straggler or named

    @property
    def look(self) -> str:
        """The name of the cell's colours: its state, or `straggler` for a slow running rank."""
        return "straggler" if self.slow_running else self.state.value

    def show(self, event: RankChanged) -> None:
        if event.rank is not None:
            self.rank = event.rank
        self.exit_code = event.exit_code
        self.detail = event.detail
        self.diagnoses = event.diagnoses
        self.restarts = event.restarts
        self.straggler = event.straggler and event.state == RankState.RUNNING
        self.suspect = event.suspect
        if self.history[-1][1] != event.state:
            self.history.append((event.ts, event.state))
        self.state = event.state

    def render(self) -> str:
        glyph = GLYPH[self.state]
        mark = BLAMED_GLYPH if self.blame_word else ""
        if self.state == RankState.FAILED and self.exit_code is not None:
            return f"{self.label} {glyph}{signal_name(self.exit_code) or self.exit_code}{mark}"
        if mark and self.state.final:
            return f"{self.label} {glyph}{mark}"
        if mark and self.slow is None:
            return f"{self.label} {mark}{self.blame_word}"
        if self.slow is not None and self.state == RankState.RUNNING:
            return f"{self.label} {STRAGGLER_GLYPH}{self.slow:.2f}"
        if self.straggler:
            return f"{self.label} {glyph}slow"
        if self.suspect:
            return f"{self.label} {SUSPECT_GLYPH}suspect"
        if self.state == RankState.RUNNING and self.wrong_number:
            return f"{self.label} {glyph}{self.wrong_number}"
        return f"{self.label} {glyph}"

    def show_slow(self, score: float | None, detail: str = "") -> None:
        """The speed watch's word on this rank: its score while named slow, else None."""
        self.slow = score
        self.slow_detail = detail if score is not None else ""

    def show_gpu(self, gpu: GpuStat | None, flag: GpuFlag | None) -> None:
        self.gpu = gpu
        self.gpu_flag = flag

    @property
    def gpu_text(self) -> str:
        """` 97% 41/80G`: the GPU's utilisation and memory used/total in GiB ("" without)."""
        gpu = self.gpu
        if gpu is None:
            return ""
        util = "--" if gpu.util is None else str(gpu.util)
        used = "?" if gpu.mem_used_mib is None else f"{gpu.mem_used_mib / 1024:.0f}"
        total = "?" if gpu.mem_total_mib is None else f"{gpu.mem_total_mib / 1024:.0f}"
        return f"{util:>3}% {used}/{total}G"

    @property
    def gpu_short(self) -> str:
        """`97%▆`: utilisation, and memory as a bar's height, for the narrow grid."""
        gpu = self.gpu
        if gpu is None:
            return ""
        ratio = gpu.mem_ratio or 0.0
        util = "--" if gpu.util is None else str(gpu.util)
        return f"{util}%{BARS[min(len(BARS) - 1, round(ratio * (len(BARS) - 1)))]}"

    @property
    def gpu_look(self) -> str:
        """`gpu-high` (memory near full), `gpu-flag` (busy without progress, idle), `gpu`."""
        if self.gpu_flag is None:
            return "gpu"
        return "gpu-high" if self.gpu_flag.kind == MEM_FLAG else "gpu-flag"

    @property
    def tooltip(self) -> str:
        where = f"{self.node} local rank {self.local_rank}"
        head = f"rank {self.rank} — {where}" if self.rank is not None else where
        steps = " → ".join(state.value for _, state in self.history)
        lines = [head, steps]
        if self.exit_code is not None:
            killed = signal_name(self.exit_code)
            lines.append(f"exit code {self.exit_code}" + (f" ({killed})" if killed else ""))
        if self.restarts:
            lines.append(f"restarted {self.restarts} time(s)")
        if self.blamed is not None:
            lines.append(f"the run's story: {self.blamed.headline()}")
        if self.suspect:
            lines.append("the stall's suspect: its stacks differ from the others'")
        if self.slow_detail:
            lines.append(f"» {self.slow_detail}")
        if self.detail:
            lines.append(self.detail)
        lines += [f"• {d.summary}" for d in self.diagnoses]
        if self.gpu is not None:
            gpu = self.gpu
            lines.append(
                f"GPU {gpu.index}: {gpu.util}% · {gpu.mem_used_mib}/{gpu.mem_total_mib} MiB · "
                f"{gpu.power_w} W · {gpu.temp_c}°C"
            )
        if self.gpu_flag is not None:
            lines.append(f"⚠ {self.gpu_flag.detail}")
        return "\n".join(lines)


class NodeRow:
    """A node's name, its agent's state, how often torchrun restarted it, and its ranks."""

    def __init__(self, node: str, nproc_per_node: int) -> None:
        self.node = node
        self.cells = [RankGridCell(node, lr) for lr in range(nproc_per_node)]
        self.state: NodeState | None = None
        self.state_text = "—"
        self.restarts = 0

    @property
    def look(self) -> str | None:
        """The one look every rank of the node has, or None if they differ (in colour or in
        glyph: a stall's suspect looks hung, with a glyph of its own)."""
        if not self.cells:
            return None
        look, glyph = self.cells[0].look, self.cells[0].glyph
        alike = all(cell.look == look and cell.glyph == glyph for cell in self.cells)
        return look if alike else None


def find_cell(rows: Iterable[NodeRow], target: str) -> RankGridCell | None:
    """The cell `target` names: a node (`local1`, its local rank 0), `local1/2` (a node's
    local rank), or a global rank (`r5` or `5`)."""
    target = target.strip()
    by_node = {row.node: row for row in rows}
    node, slash, local = target.rpartition("/")
    if slash and node in by_node and local.isdigit():
        cells = by_node[node].cells
        return cells[int(local)] if int(local) < len(cells) else None
    if target in by_node:
        return by_node[target].cells[0] if by_node[target].cells else None
    number = target.removeprefix("r")
    if number.isdigit():
        rank = int(number)
        for row in by_node.values():
            for cell in row.cells:
                if cell.rank == rank:
                    return cell
    return None
