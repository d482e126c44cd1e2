"""Provides GpuDemux: a node's GPU samples taken out of its helper's stdout, the log left whole.

The node helper writes each GPU sample as one line starting with GPU_MARK between log chunks
(never inside one of its own writes), but a log chunk may end mid-line, so a sample can sit
in the middle of a log line, and a chunk read here may end inside the mark or the sample.
The demultiplexer keeps what it cannot decide yet until the next chunk comes.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from ddptui.core.backends.transport import ChunkSink
from ddptui.core.node.gpu_sampler import GPU_MARK

GpuSink = Callable[[dict[str, Any]], None]
MAX_RECORD = 1 << 20  # a "sample" this long is not one: it goes to the log as it came


class GpuDemux:
    """Feeds log bytes to `on_log` and each GPU sample, decoded, to `on_gpu`."""

    def __init__(self, on_log: ChunkSink, on_gpu: GpuSink) -> None:
        self.on_log = on_log
        self.on_gpu = on_gpu
        self._held = b""  # a possible start of the mark, or a sample still to end

    def feed(self, chunk: bytes) -> None:
        data = self._held + chunk
        self._held = b""
        log = bytearray()
        while data:
            at = data.find(GPU_MARK)
            if at < 0:
                keep = _partial_mark(data)
                log += data[: len(data) - keep]
                self._held = data[len(data) - keep :]
                break
            log += data[:at]
            end = data.find(b"\n", at)
            if end < 0:
                if len(data) - at > MAX_RECORD:
                    log += data[at:]
                else:
                    self._held = data[at:]
                break
            self._record(data[at + len(GPU_MARK) : end])
            data = data[end + 1 :]
        if log:
            self.on_log(bytes(log))

    def flush(self) -> None:
        """The stream ended: what was held back was log after all."""
        if self._held:
            held, self._held = self._held, b""
            self.on_log(held)

    def _record(self, raw: bytes) -> None:
        try:
            record = json.loads(raw)
        except ValueError:
            return
        if isinstance(record, dict):
            self.on_gpu(record)


def _partial_mark(data: bytes) -> int:
    """How many bytes at the end of `data` could begin GPU_MARK."""
    for size in range(min(len(GPU_MARK) - 1, len(data)), 0, -1):
        if GPU_MARK.startswith(data[-size:]):
            return size
    return 0
