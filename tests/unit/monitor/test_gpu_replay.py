"""Two runs on 2 x H100 through `ddptui run --headless` with the sampler on (NVML), replayed
through the Monitor from their JSON lines (tests/data/gpu/h100x2_telemetry/): the samples as
the node sent them (rows rebuilt from each gpu event; the workers as their environment said:
CUDA_VISIBLE_DEVICES=0,1, LOCAL_RANK = RANK on one node), each rank's output at the times its
rank events came."""

from __future__ import annotations

import json
from pathlib import Path

from ddptui.core.diagnose.job_watch import JobWatch
from ddptui.core.events import GpuReport
from ddptui.core.monitor.gpu import parse_rows, parse_workers, rank_gpus

DATA = Path(__file__).parents[2] / "data" / "gpu" / "h100x2_telemetry"


def _events(name: str) -> list[dict]:
    return [json.loads(line) for line in (DATA / name).read_text().splitlines()]


def _record(event: dict) -> dict:
    rows = [
        f"{g['index']}, {g['uuid']}, {g['util']}, {g['mem_used_mib']}, {g['mem_total_mib']}, "
        f"{g['power_w']}, {g['temp_c']}"
        for g in event["gpus"]
    ]
    return {"rows": rows, "workers": [[1345, 0, 0, "0,1"], [1346, 1, 1, "0,1"]]}


def _replay(name: str, progress_while_busy: bool) -> list[GpuReport]:
    """Each rank prints when its rank event says it runs; with `progress_while_busy` it also
    prints a step line at every sample while its GPU computes (elastic_ddp prints one a step)."""
    monitor = JobWatch(["local0"], 2)
    reports: list[GpuReport] = []
    running: set[int] = set()
    step = 0
    for event in _events(name):
        if event["event"] == "rank" and event["state"] == "running":
            rank = event["rank"]
            running.add(rank)
            monitor.feed_lines(
                "local0", [f"[ddptui:{rank}:{rank}]:hang rank={rank} step=0"], event["ts"]
            )
        if event["event"] == "rank" and event["state"] == "done":
            running.discard(event["rank"])
        if event["event"] != "gpu":
            continue
        if progress_while_busy:
            busy = [g["ranks"][0] for g in event["gpus"] if g["ranks"] and g["util"]]
            step += 1
            lines = [f"[ddptui:{r}:{r}]:rank {r} step={step}" for r in busy if r in running]
            monitor.feed_lines("local0", lines, event["ts"])
        out = monitor.gpu_sample("local0", _record(event), now=event["ts"])
        reports += [e for e in out if isinstance(e, GpuReport)]
    return reports


def test_captured_rows_workers_and_process_lists_agree() -> None:
    """There NVML listed the workers (an earlier capture on the same kind of machine listed
    none): the process lists and the environment put each rank on the same GPU."""
    busy = parse_rows((DATA / "query_busy_lms.csv").read_text().splitlines())
    assert len(busy) == 16 and {g.index for g in busy} == {0, 1}
    assert busy[0].mem_total_mib == 81559 and busy[1].power_w == 107.28
    gpus = parse_rows((DATA / "query_idle.csv").read_text().splitlines())
    env = []
    for line in (DATA / "env_busy.txt").read_text().splitlines():
        pid, *pairs = line.split()
        values = dict(p.split("=", 1) for p in pairs)
        if "LOCAL_RANK" in values:
            env.append(
                [
                    int(pid),
                    int(values["RANK"]),
                    int(values["LOCAL_RANK"]),
                    values["CUDA_VISIBLE_DEVICES"],
                ]
            )
    workers = parse_workers(env)
    apps = [line.split(", ") for line in (DATA / "apps_busy.csv").read_text().splitlines()]
    by_env = rank_gpus(gpus, workers, None)
    by_apps = rank_gpus(gpus, workers, apps)
    assert by_env == by_apps == {0: {0}, 1: {1}}


def test_nccl_hang_flags_busy_rank_0_and_idle_rank_1() -> None:
    """trainer/hang.py --skip-rank 1: rank 0 waits in the all_reduce rank 1 skipped, its GPU at
    100%; rank 1 sleeps, its GPU at 0%."""
    reports = _replay("hang.jsonl", progress_while_busy=False)
    first = {}
    for report in reports:
        for flag in report.flags:
            first.setdefault((flag.kind, flag.gpu, flag.rank), report.ts - reports[0].ts)
    assert set(first) == {("busy_no_progress", 0, 0), ("idle", 1, 1)}
    assert first[("idle", 1, 1)] < first[("busy_no_progress", 0, 0)] < 40
    last = reports[-1]
    assert [(g.index, g.util, g.ranks) for g in last.gpus] == [(0, 100, (0,)), (1, 0, (1,))]


def test_training_run_raises_no_flag() -> None:
    """elastic_ddp.py, 15,292 steps: its GPUs idle while CUDA and NCCL start (6 s after the
    ranks' first line), then 5-40% busy while every rank progresses: no flag, and the
    memory it took (2,144 MiB) came back to 480 MiB by teardown."""
    reports = _replay("telemetry.jsonl", progress_while_busy=True)
    assert len(reports) == 50
    assert [f for r in reports for f in r.flags] == []
    assert max(g.mem_used_mib or 0 for r in reports for g in r.gpus) == 2144
    teardown = next(e for e in _events("telemetry.jsonl") if e["event"] == "teardown")
    assert teardown["gpu"]["mem_before_mib"] == [[0, 480], [1, 480]]
    assert teardown["gpu"]["mem_used_mib"] == [[0, 480], [1, 480]] and teardown["clean"]
