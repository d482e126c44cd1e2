"""Provides NodeGpuFollow: Slurm nodes' GPU samples, from a sampler step of their own.

On Slurm a node's log is written by srun into the run directory and read there, not through
the node helper, so the helper's sampler (core/node/gpu_sampler.py) does not run with it.
Instead one `srun --overlap` step inside the job's allocation, a task per node, runs the
helper's `gpu` verb (the sampler alone) on every node for as long as nodes are followed
(`--label`: LabelledGpu splits it per node), each node's GPU_MARK lines read by the same
GpuDemux as the other backends'.
Stopping it is srun's SIGTERM (srun passes it to the step's task); the sampler also ends by
itself once the job's workers are gone, should the console vanish first.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from collections.abc import Callable, Sequence
from typing import Any

from ddptui.core.backends.gpu_stream import GpuDemux, GpuSink
from ddptui.core.node.each import MARK
from ddptui.core.node.step import LABEL

NodeGpuSink = Callable[[str, dict[str, Any]], None]

STOP_GRACE_S = 5.0


class LabelledGpu:
    """A sampler step with a task per node (`--label`, node/step.py's `each gpu`): each
    task's lines to its node's GpuDemux; a task's first line names its node."""

    def __init__(self, order: Sequence[str], on_gpu: NodeGpuSink) -> None:
        self.order = list(order)
        self.on_gpu = on_gpu
        self.task_node: dict[int, str] = {}
        self.demuxes: dict[str, GpuDemux] = {}
        self._rest = b""

    def feed(self, chunk: bytes) -> None:
        *lines, self._rest = (self._rest + chunk).split(b"\n")
        for line in lines:
            label = LABEL.match(line)
            if label is None:
                continue  # srun's own words: the job is not affected, nothing to sample
            task, body = int(label.group(1)), line[label.end() :]
            if body.startswith(MARK + b"node "):
                self.task_node[task] = body[len(MARK) + 5 :].decode(errors="replace")
                continue
            node = self.task_node.get(task)
            if node is None and task < len(self.order):
                node = self.order[task]
            if node is not None:
                self._demux(node).feed(body + b"\n")

    def _demux(self, node: str) -> GpuDemux:
        if node not in self.demuxes:
            self.demuxes[node] = GpuDemux(lambda _: None, lambda r: self.on_gpu(node, r))
        return self.demuxes[node]


class NodeGpuFollow:
    """One node's sampler step (or, `demux` a LabelledGpu, every node's in one step):
    `start()`, then `stop()` when the node's log (every node's) has ended."""

    def __init__(
        self,
        argv: Sequence[str],
        program: bytes,
        on_gpu: GpuSink,
        demux: GpuDemux | LabelledGpu | None = None,
    ) -> None:
        self.argv = list(argv)
        self.program = program
        self.demux = demux or GpuDemux(lambda _: None, on_gpu)  # the step prints nothing else
        self._proc: asyncio.subprocess.Process | None = None
        self._reader: asyncio.Task[None] | None = None

    async def start(self) -> None:
        try:
            self._proc = await asyncio.create_subprocess_exec(
                *self.argv,
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.DEVNULL,
                env=os.environ.copy(),
            )
        except OSError:
            return  # no srun here: no telemetry, the job itself is not affected
        assert self._proc.stdin is not None
        self._proc.stdin.write(self.program)
        with contextlib.suppress(ConnectionError):
            await self._proc.stdin.drain()
        self._proc.stdin.close()
        self._reader = asyncio.ensure_future(self._read())

    async def _read(self) -> None:
        assert self._proc is not None and self._proc.stdout is not None
        while chunk := await self._proc.stdout.read(1 << 16):
            self.demux.feed(chunk)

    async def stop(self) -> None:
        proc = self._proc
        if proc is None:
            return
        if proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                proc.send_signal(signal.SIGTERM)
            try:
                await asyncio.wait_for(proc.wait(), STOP_GRACE_S)
            except TimeoutError:
                with contextlib.suppress(ProcessLookupError):
                    proc.kill()
                await proc.wait()
        if self._reader is not None:  # what the step wrote before it ended, then done
            with contextlib.suppress(TimeoutError, asyncio.CancelledError):
                await asyncio.wait_for(self._reader, STOP_GRACE_S)
