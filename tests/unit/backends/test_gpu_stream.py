"""GpuDemux: GPU samples taken out of a node helper's stdout, the log left byte for byte."""

from __future__ import annotations

import json

import pytest

from ddptui.core.backends.gpu_stream import GpuDemux
from ddptui.core.node.gpu_sampler import GPU_MARK

LOG = b"rank 0 step=1\nrank 1 st"
REST = b"ep=1\n\xff\xfe raw bytes\n"


def _sample(n: int) -> bytes:
    return GPU_MARK + json.dumps({"rows": [f"0, GPU-x, {n}, 1, 2, 3.0, 4"]}).encode() + b"\n"


STREAM = LOG + _sample(1) + REST + _sample(2) + b"tail without newline\x1e"


@pytest.mark.parametrize("size", [1, 2, 3, 7, 16, len(STREAM)])
def test_samples_out_log_whole_at_any_chunking(size: int) -> None:
    log: list[bytes] = []
    records: list[dict] = []
    demux = GpuDemux(log.append, records.append)
    for i in range(0, len(STREAM), size):
        demux.feed(STREAM[i : i + size])
    demux.flush()
    assert b"".join(log) == LOG + REST + b"tail without newline\x1e"
    assert [r["rows"][0].split(", ")[2] for r in records] == ["1", "2"]


def test_a_broken_sample_is_dropped_and_the_log_goes_on() -> None:
    log: list[bytes] = []
    records: list[dict] = []
    demux = GpuDemux(log.append, records.append)
    demux.feed(b"a\n" + GPU_MARK + b"{not json\n" + b"b\n")
    assert b"".join(log) == b"a\nb\n" and records == []
