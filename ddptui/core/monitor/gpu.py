"""Provides the reading of a node's GPU samples: nvidia-smi's CSV rows, which rank uses which
GPU, and the judgement of the GPU part of the teardown proof.

The node sends what it saw as it saw it (core/node/gpu_sampler.py): the rows of
`nvidia-smi --query-gpu=FIELDS --format=csv,noheader,nounits` (NVML's numbers written the same
way), the job's workers with their RANK, LOCAL_RANK and CUDA_VISIBLE_DEVICES, and the compute
processes when NVML or nvidia-smi list them. What it means is decided here.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ddptui.core.events import GpuHolder, GpuProof, GpuStat

DEFAULT_FIELDS = (
    "index,uuid,utilization.gpu,memory.used,memory.total,power.draw,temperature.gpu,"
    "clocks.sm,clocks_throttle_reasons.active"
)
# NVML's clock event reasons (nvmlClocksThrottleReasons*), as nvidia-smi's hex bitmask shows
# them: the ones that slow a GPU that has work (idle and sync boost are left out)
THROTTLE_REASONS = (
    (0x4, "power cap"),
    (0x8, "HW slowdown"),
    (0x20, "thermal"),
    (0x40, "HW thermal"),
    (0x80, "power brake"),
    (0x2, "applications clocks"),
)
MEM_MARGIN_MIB = 256  # memory above its level before the job that still counts as returned
_FIELD = {
    "index": "index",
    "uuid": "uuid",
    "utilization.gpu": "util",
    "memory.used": "mem_used_mib",
    "memory.total": "mem_total_mib",
    "power.draw": "power_w",
    "temperature.gpu": "temp_c",
    "clocks.sm": "sm_mhz",
    "clocks_throttle_reasons.active": "throttle",
}


@dataclass(frozen=True)
class Worker:
    """A worker process of the job on a node, as its environment says."""

    pid: int
    rank: int | None
    local_rank: int
    visible: str | None  # CUDA_VISIBLE_DEVICES, None when unset


def _number(text: str) -> float | None:
    """nvidia-smi's value: `[N/A]`, `[Not Supported]`, `N/A` and blanks are None."""
    try:
        return float(text)
    except ValueError:
        return None


def parse_rows(rows: Iterable[str], fields: str = DEFAULT_FIELDS) -> list[GpuStat]:
    """GPUs from the CSV rows of a `--query-gpu` (any of its field orders; a field not asked
    for is None). Rows that are not a GPU's (an error message, a short line) are left out; a
    row of the first seven fields only (an older node's, a capture) reads with the rest None."""
    names = [f.strip() for f in fields.split(",")]
    gpus = []
    for row in rows:
        parts = [p.strip() for p in row.split(",")]
        if len(parts) != len(names) and not (7 <= len(parts) < len(names)):
            continue
        values: dict[str, Any] = {}
        for name, text in zip(names, parts, strict=False):
            key = _FIELD.get(name)
            if key in ("uuid", "throttle"):
                values[key] = text
            elif key is not None:
                values[key] = _number(text)
        index = values.get("index")
        if index is None:
            continue
        gpus.append(
            GpuStat(
                int(index),
                _whole(values.get("util")),
                _whole(values.get("mem_used_mib")),
                _whole(values.get("mem_total_mib")),
                values.get("power_w"),
                _whole(values.get("temp_c")),
                uuid=values.get("uuid", ""),
                sm_mhz=_whole(values.get("sm_mhz")),
                throttle=throttle_reasons(values.get("throttle", "")),
            )
        )
    return gpus


def throttle_reasons(mask: str) -> tuple[str, ...]:
    """nvidia-smi's `clocks_throttle_reasons.active` (`0x0000000000000004`) in words."""
    try:
        bits = int(mask, 16)
    except ValueError:
        return ()
    return tuple(name for bit, name in THROTTLE_REASONS if bits & bit)


def _whole(value: float | None) -> int | None:
    return None if value is None else round(value)


def parse_workers(raw: Iterable[Sequence[Any]]) -> list[Worker]:
    workers = []
    for item in raw:
        try:
            pid, rank, local_rank, visible = item
            workers.append(Worker(int(pid), rank, int(local_rank), visible))
        except (TypeError, ValueError):
            continue
    return workers


def worker_gpu(worker: Worker, gpus: Sequence[GpuStat]) -> int | None:
    """The GPU index a worker uses, from its environment: device LOCAL_RANK among the visible
    ones (what `torch.cuda.set_device(LOCAL_RANK)` picks), the visible list naming GPUs by
    index or by UUID. None when it names no GPU of the node (an empty list, a MIG device)."""
    if worker.visible is None:
        entries = [str(g.index) for g in gpus]
    else:
        entries = [e.strip() for e in worker.visible.split(",") if e.strip()]
    if worker.local_rank >= len(entries):
        return None
    entry = entries[worker.local_rank]
    for gpu in gpus:
        if entry == str(gpu.index) or (gpu.uuid and entry.startswith("GPU-") and entry in gpu.uuid):
            return gpu.index
    return None


def rank_gpus(
    gpus: Sequence[GpuStat], workers: Sequence[Worker], apps: Sequence[Sequence[Any]] | None
) -> dict[int, set[int]]:
    """GPU index -> the ranks on it. A rank whose process NVML or nvidia-smi lists on a GPU
    is there; any other rank is where its environment says (in a container's PID namespace
    the process lists are empty)."""
    by_uuid = {g.uuid: g.index for g in gpus if g.uuid}
    rank_of = {w.pid: w.rank for w in workers if w.rank is not None}
    placed: dict[int, set[int]] = {g.index: set() for g in gpus}
    listed: set[int] = set()
    for app in apps or ():
        if len(app) < 2:
            continue
        rank, index = rank_of.get(int(app[0])), by_uuid.get(str(app[1]))
        if rank is not None and index is not None:
            placed[index].add(rank)
            listed.add(rank)
    for worker in workers:
        if worker.rank is None or worker.rank in listed:
            continue
        index = worker_gpu(worker, gpus)
        if index is not None:
            placed[index].add(worker.rank)
    return placed


def read_sample(record: Mapping[str, Any]) -> tuple[GpuStat, ...]:
    """A sample as the node sent it, with each GPU's ranks."""
    gpus = parse_rows(record.get("rows") or [], str(record.get("fields") or DEFAULT_FIELDS))
    workers = parse_workers(record.get("workers") or [])
    placed = rank_gpus(gpus, workers, record.get("apps"))
    return tuple(_with_ranks(g, sorted(placed.get(g.index, ()))) for g in gpus)


def _with_ranks(gpu: GpuStat, ranks: Sequence[int]) -> GpuStat:
    return GpuStat(
        gpu.index,
        gpu.util,
        gpu.mem_used_mib,
        gpu.mem_total_mib,
        gpu.power_w,
        gpu.temp_c,
        tuple(ranks),
        gpu.uuid,
        gpu.sm_mhz,
        gpu.throttle,
    )


def memory_before(record: Mapping[str, Any]) -> str:
    """A first sample's memory per GPU, as the node's reaper takes it: `0:503,1:503` (MiB)."""
    gpus = parse_rows(record.get("rows") or [], str(record.get("fields") or DEFAULT_FIELDS))
    return ",".join(f"{g.index}:{g.mem_used_mib}" for g in gpus if g.mem_used_mib is not None)


def judge_gpus(report: Mapping[str, Any]) -> GpuProof:
    """The GPU part of a node's teardown proof (the reaper's `gpu` report): failed when a
    process of the job still holds a GPU (named with its PID and command line) or a GPU's
    memory is more than MEM_MARGIN_MIB above its level before the job."""
    gpus = parse_rows(report.get("rows") or [], str(report.get("fields") or DEFAULT_FIELDS))
    by_uuid = {g.uuid: g.index for g in gpus if g.uuid}
    names = report.get("names") or {}
    held = tuple(
        GpuHolder(int(app[0]), by_uuid.get(str(app[1])), int(app[2]), names.get(str(app[0]), ""))
        for app in report.get("held") or []
    )
    before = {int(k): int(v) for k, v in (report.get("before") or {}).items()}
    used = tuple((g.index, g.mem_used_mib) for g in gpus if g.mem_used_mib is not None)
    problems = [
        f"GPU {h.gpu if h.gpu is not None else '?'} held by {h.pid} ({h.command or '?'}, "
        f"{h.mem_mib} MiB)"
        for h in held
    ]
    for index, mib in used:
        if index in before and mib > before[index] + MEM_MARGIN_MIB:
            problems.append(f"GPU {index} memory not returned: {mib} MiB, {before[index]} before")
    if problems:
        detail = "GPU NOT FREE: " + "; ".join(problems)
    else:
        free = ", ".join(f"{i}: {m} MiB" for i, m in used)
        detail = f"GPUs free ({free})" + ("" if before else "; no memory level before the job")
    return GpuProof(not problems, used, tuple(sorted(before.items())), held, detail)
