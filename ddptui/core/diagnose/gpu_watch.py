"""Provides GpuWatch: every node's GPU samples over the run, and what they say of the ranks.

A rank's output says whether it progresses; its GPU says whether it computes. Together they
tell what neither does alone: a GPU busy while its rank makes no progress (an NCCL kernel
spinning in a collective that a peer never joined), a rank that runs while its GPU sits
idle, a GPU whose memory is nearly full before the out-of-memory error comes.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping
from typing import Any

from ddptui.core.events import Event, GpuFlag, GpuReport, GpuStat, RankState
from ddptui.core.monitor.board import RankBoard
from ddptui.core.monitor.gpu import read_sample
from ddptui.core.monitor.rank_cell import RankCell

HISTORY = 3600  # samples kept per GPU (an hour at the default second)
WINDOW_S = 10.0  # how long a GPU must look busy or idle before it is said
BUSY_UTIL = 50  # percent, on average over the window
IDLE_UTIL = 5  # percent, at most, every sample of the window
NO_PROGRESS_S = 20.0  # a rank without progress (or output) for this long makes none
MEM_HIGH = 0.92  # of the GPU's memory: near its limit

BUSY_NO_PROGRESS, IDLE, MEM_HIGH_FLAG = "busy_no_progress", "idle", "mem_high"


class GpuWatch:
    """Per node and GPU: the samples of the run (time, util, memory), and the flags now."""

    def __init__(self, board: RankBoard) -> None:
        self.board = board
        self.history: dict[str, dict[int, deque[tuple[float, int | None, int | None]]]] = {}
        self.latest: dict[str, tuple[GpuStat, ...]] = {}
        self.stalled = False  # the job-wide stall (StallWatch): no rank makes progress
        self._running_since: dict[tuple[str, int], float] = {}  # (node, rank): first seen running

    def sample(self, node: str, record: Mapping[str, Any], now: float) -> list[Event]:
        """A node's sample in: its GpuReport out, with the flags it raises now."""
        gpus = read_sample(record)
        if not gpus:
            return []
        self.latest[node] = gpus
        per_gpu = self.history.setdefault(node, {})
        for gpu in gpus:
            per_gpu.setdefault(gpu.index, deque(maxlen=HISTORY)).append(
                (now, gpu.util, gpu.mem_used_mib)
            )
        return [GpuReport(node, gpus, tuple(self.flags(node, gpus, now)), ts=now)]

    def flags(self, node: str, gpus: tuple[GpuStat, ...], now: float) -> list[GpuFlag]:
        flags = []
        for gpu in gpus:
            ratio = gpu.mem_ratio
            if ratio is not None and ratio >= MEM_HIGH:
                flags.append(
                    GpuFlag(
                        MEM_HIGH_FLAG,
                        gpu.index,
                        gpu.ranks[0] if len(gpu.ranks) == 1 else None,
                        f"GPU {gpu.index} memory {ratio:.0%} full "
                        f"({gpu.mem_used_mib}/{gpu.mem_total_mib} MiB)",
                    )
                )
            window = self._window(node, gpu.index, now)
            for rank in gpu.ranks:
                cell = self._cell(node, rank)
                if cell is None or cell.state not in (RankState.RUNNING, RankState.HUNG):
                    self._running_since.pop((node, rank), None)
                    continue
                since = self._running_since.setdefault((node, rank), now)
                # a rank that just began (CUDA and NCCL starting) is not idle yet
                if window is None or now - since < WINDOW_S:
                    continue
                flag = self._rank_flag(cell, gpu.index, window, now)
                if flag is not None:
                    flags.append(flag)
        return flags

    def _window(self, node: str, index: int, now: float) -> list[int] | None:
        """The GPU's utilisation over the last WINDOW_S, None until samples cover it."""
        samples = self.history.get(node, {}).get(index)
        if not samples or samples[0][0] > now - WINDOW_S:
            return None
        recent = [u for t, u, _ in samples if t >= now - WINDOW_S and u is not None]
        return recent if len(recent) >= 2 else None

    def _cell(self, node: str, rank: int) -> RankCell | None:
        for cell in self.board.cells.get(node, ()):
            if cell.rank == rank:
                return cell
        return None

    def _rank_flag(
        self, cell: RankCell, index: int, window: list[int], now: float
    ) -> GpuFlag | None:
        mean = sum(window) / len(window)
        last = cell.progress.last_at or cell.last_output
        quiet = now - last if last else None
        # a rank that prints progress every minute is not stuck after 20 s
        patience = max(NO_PROGRESS_S, 4 * cell.progress.interval)
        if mean >= BUSY_UTIL and (self.stalled or (quiet is not None and quiet >= patience)):
            since = f"for {quiet:.0f} s" if quiet is not None else "in the stall"
            return GpuFlag(
                BUSY_NO_PROGRESS,
                index,
                cell.rank,
                f"GPU {index} busy ({mean:.0f}%) but rank {cell.rank} made no progress {since}",
            )
        if max(window) <= IDLE_UTIL and cell.lines > 0:
            return GpuFlag(
                IDLE,
                index,
                cell.rank,
                f"rank {cell.rank} runs but GPU {index} is idle ({max(window)}% or less "
                f"for {WINDOW_S:.0f} s)",
            )
        return None

    def series(self, node: str, index: int) -> list[tuple[float, int | None, int | None]]:
        """A GPU's samples over the run: (time, util %, memory MiB)."""
        return list(self.history.get(node, {}).get(index, ()))
