"""GPU samples read as the node sends them: captures from 2 x H100, rank -> GPU mapping, the
flags that GPU and progress together raise, and the GPU part of the teardown proof."""

from __future__ import annotations

from pathlib import Path

import pytest

from ddptui.core.diagnose.job_watch import JobWatch
from ddptui.core.events import GpuReport
from ddptui.core.monitor.gpu import (
    Worker,
    judge_gpus,
    memory_before,
    parse_rows,
    rank_gpus,
    read_sample,
    worker_gpu,
)

DATA = Path(__file__).parents[2] / "data" / "gpu"
FIRST_FIELDS = "index,uuid,name,utilization.gpu,memory.used,memory.total,power.draw,temperature.gpu"
UUID0 = "GPU-af5b2fab-eee7-f1e0-23d2-b7ff33aec7f1"
UUID1 = "GPU-97a62be1-75d7-7c32-92f1-157eb0ce6154"


def _rows(name: str) -> list[str]:
    return (DATA / name).read_text().splitlines()


def test_captured_query_loop_parses_every_gpu_of_every_sample() -> None:
    gpus = parse_rows(_rows("h100x2_first/query_busy_lms.csv"), FIRST_FIELDS)
    assert len(gpus) == 16 and {g.index for g in gpus} == {0, 1}
    assert gpus[3].util == 48 and gpus[3].mem_used_mib == 1665 and gpus[3].uuid == UUID1
    assert gpus[0].mem_total_mib == 81559 and gpus[0].power_w == 118.94 and gpus[0].temp_c == 38
    assert all(g.mem_ratio is not None and g.mem_ratio < 0.05 for g in gpus)


def test_fields_in_the_samplers_order_and_unsupported_values() -> None:
    rows = [
        "0, GPU-a, 97, 70000, 81559, [N/A], 61",
        "1, GPU-b, [Not Supported], 10, 81559, 300.5, [N/A]",
        "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.",
    ]
    gpus = parse_rows(rows)
    assert [(g.index, g.util, g.power_w, g.temp_c) for g in gpus] == [
        (0, 97, None, 61),
        (1, None, 300.5, None),
    ]


@pytest.mark.parametrize(
    ("local_rank", "visible", "gpu"),
    [
        (0, None, 0),
        (1, None, 1),
        (0, "1,0", 1),  # a pseudo-node given GPUs in another order
        (1, "1", None),  # fewer GPUs visible than local ranks
        (0, "", None),  # no GPU at all
        (0, UUID1, 1),  # named by UUID
        (0, "GPU-97a62be1", 1),  # by a UUID's prefix, as CUDA allows
        (0, "MIG-1234", None),
    ],
)
def test_rank_gpu_from_the_workers_environment(
    local_rank: int, visible: str | None, gpu: int | None
) -> None:
    gpus = parse_rows(_rows("standin/once.csv"))
    assert worker_gpu(Worker(100, local_rank, local_rank, visible), gpus) == gpu


def test_process_lists_win_over_the_environment_when_they_have_the_job() -> None:
    """Both ranks on GPU 0 (a script that ignores LOCAL_RANK): NVML says so, the environment
    would have put rank 1 on GPU 1."""
    gpus = parse_rows(_rows("standin/once.csv"))
    workers = [Worker(10, 0, 0, None), Worker(11, 1, 1, None), Worker(12, 1, 1, None)]
    assert rank_gpus(gpus, workers, None) == {0: {0}, 1: {1}}
    apps = [[10, UUID0, 900], [11, UUID0, 900], [999, UUID1, 500]]  # 999: not the job's
    assert rank_gpus(gpus, workers, apps) == {0: {0, 1}, 1: set()}
    # empty lists (a container's PID namespace): the environment decides
    assert rank_gpus(gpus, workers, []) == {0: {0}, 1: {1}}


def test_a_sample_as_the_node_sends_it() -> None:
    record = {
        "fields": FIRST_FIELDS,
        "rows": _rows("h100x2_first/query_idle.csv"),
        "workers": [[20, 2, 0, "1,0"], [21, 3, 1, "1,0"], "junk"],
    }
    gpus = read_sample(record)
    assert [(g.index, g.ranks) for g in gpus] == [(0, (3,)), (1, (2,))]
    assert memory_before(record) == "0:0,1:0"


def _sample(utils: tuple[int, int], mem: tuple[int, int] = (1000, 1000)) -> dict:
    rows = [
        f"0, {UUID0}, {utils[0]}, {mem[0]}, 81559, 300.0, 60",
        f"1, {UUID1}, {utils[1]}, {mem[1]}, 81559, 120.0, 45",
    ]
    return {"rows": rows, "workers": [[30, 0, 0, None], [31, 1, 1, None]]}


def _monitor_running(now: float) -> JobWatch:
    monitor = JobWatch(["n0"], 2)
    monitor.feed_lines(
        "n0",
        [
            "[ddptui:0:0]:hang rank=0 step=0",
            "[ddptui:1:1]:hang rank=1 step=0",
        ],
        now=now,
    )
    return monitor


def _flags(events: list) -> list[tuple[str, int, int | None]]:
    report = next(e for e in events if isinstance(e, GpuReport))
    return [(f.kind, f.gpu, f.rank) for f in report.flags]


def test_nccl_hang_busy_gpu_without_progress_and_idle_gpu_of_a_running_rank() -> None:
    """trainer/hang.py --skip-rank 1 on 2 GPUs: rank 0 spins in all_reduce at 100%, rank 1
    sleeps with its GPU at 0%. Neither prints; GPU and output together tell them apart."""
    t0 = 1000.0
    monitor = _monitor_running(t0)
    assert [c.state.value for c in monitor.board.all_cells()] == ["running", "running"]
    events: list = []
    for second in range(0, 31):
        events = monitor.gpu_sample("n0", _sample((100, 0)), now=t0 + second)
        if second == 5:
            # busy and idle, but not for WINDOW_S yet, and the ranks printed just now
            assert _flags(events) == []
        if second == 12:
            assert _flags(events) == [("idle", 1, 1)]
    assert _flags(events) == [("busy_no_progress", 0, 0), ("idle", 1, 1)]
    report = next(e for e in events if isinstance(e, GpuReport))
    assert "rank 0 made no progress for 30 s" in report.flags[0].detail
    assert len(monitor.gpu.series("n0", 0)) == 31


def test_busy_gpu_of_a_progressing_rank_is_no_flag() -> None:
    t0 = 1000.0
    monitor = _monitor_running(t0)
    events: list = []
    for second in range(0, 40):
        monitor.feed_lines(
            "n0",
            [f"[ddptui:0:0]:rank 0 step={second}", f"[ddptui:1:1]:rank 1 step={second}"],
            now=t0 + second,
        )
        events = monitor.gpu_sample("n0", _sample((95, 90)), now=t0 + second)
    assert _flags(events) == []


def test_memory_near_the_limit_is_flagged_at_once() -> None:
    monitor = _monitor_running(1000.0)
    events = monitor.gpu_sample("n0", _sample((90, 90), mem=(80000, 1000)), now=1000.0)
    report = next(e for e in events if isinstance(e, GpuReport))
    assert [(f.kind, f.gpu, f.rank) for f in report.flags] == [("mem_high", 0, 0)]
    assert "98% full" in report.flags[0].detail


def test_teardown_proof_clean_held_and_memory_not_returned() -> None:
    rows = [f"0, {UUID0}, 0, 3, 81559, 70.0, 37", f"1, {UUID1}, 0, 9000, 81559, 70.0, 37"]
    clean = judge_gpus({"rows": rows[:1], "apps": [], "held": [], "before": {"0": 0}})
    assert clean.clean and clean.detail == "GPUs free (0: 3 MiB)"
    report = {
        "rows": rows,
        "apps": [[4242, UUID1, 8900]],
        "held": [[4242, UUID1, 8900]],
        "names": {"4242": "python3 -u train.py"},
        "before": {"0": 0, "1": 4},
    }
    proof = judge_gpus(report)
    assert not proof.clean
    assert [(h.pid, h.gpu, h.mem_mib, h.command) for h in proof.held] == [
        (4242, 1, 8900, "python3 -u train.py")
    ]
    assert proof.detail == (
        "GPU NOT FREE: GPU 1 held by 4242 (python3 -u train.py, 8900 MiB); "
        "GPU 1 memory not returned: 9000 MiB, 4 before"
    )


def test_rows_of_the_first_seven_fields_read_with_no_clock_or_reasons() -> None:
    """A node running an older helper, or a capture, sends the first seven fields only."""
    gpus = parse_rows(["0, GPU-a, 97, 70000, 81559, 300.5, 61"])
    assert [(g.index, g.util, g.sm_mhz, g.throttle) for g in gpus] == [(0, 97, None, ())]
    gpus = parse_rows(["0, GPU-a, 97, 70000, 81559, 300.5, 61, 1755, 0x0000000000000048"])
    assert gpus[0].sm_mhz == 1755 and gpus[0].throttle == ("HW slowdown", "HW thermal")
