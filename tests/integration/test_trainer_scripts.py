"""Integration tests of the trainer scripts: real torchrun, real c10d rendezvous
on 127.0.0.1, real gloo collectives, and srun-style launches without torchrun.

They pin the output line formats the console's log parser depends on, the
clean exit (no gloo abort at shutdown), and snapshot resume.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.cases import TRAINER
from tests.procs import pids_with_tag

pytestmark = pytest.mark.integration

TIMEOUT_S = 180.0

IDENT_RE = re.compile(
    r"^envcheck host=(?P<host>\S+) local_rank=(?P<local_rank>\d+) rank=(?P<rank>\d+) "
    r"group_rank=(?P<group_rank>\d+) local_world_size=(?P<local_world_size>\d+) "
    r"world_size=(?P<world_size>\d+) backend=(?P<backend>\S+) device=(?P<device>\S+)"
    r"(?: visible=(?P<visible>\S+))?(?: gpu=(?P<gpu>\S+))?$"
)
ALLREDUCE_RE = re.compile(r"^envcheck rank=(?P<rank>\d+) allreduce=ok sum=(?P<sum>\d+)$")
HEARTBEAT_RE = re.compile(r"^envcheck rank=(?P<rank>\d+) heartbeat=(?P<beat>\d+)$")
EPOCH_RE = re.compile(
    r"^\[RANK (?P<rank>\d+)\] Epoch (?P<epoch>\d+) "
    r"\| Batchsize: (?P<bs>\d+) \| Steps: (?P<steps>\d+)$"
)
SAVED_RE = re.compile(r"^Epoch (?P<epoch>\d+) \| Training snapshot saved at (?P<path>.+)$")
RESUME_RE = re.compile(r"^Resuming training from snapshot at Epoch (?P<epoch>\d+)$")


@dataclass
class Result:
    """One finished process: exit code and its full output."""

    code: int
    stdout: str
    stderr: str

    @property
    def lines(self) -> list[str]:
        return [line for line in self.stdout.splitlines() if line.strip()]


def matches(pattern: re.Pattern[str], lines: list[str]) -> list[re.Match[str]]:
    return [m for line in lines if (m := pattern.match(line))]


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def base_env(**extra: str) -> dict[str, str]:
    """The test's environment without any launcher identity leaking in (pytest
    itself might run inside a Slurm job or under torchrun)."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("SLURM_", "TORCHELASTIC_"))
        and k
        not in (
            "RANK",
            "WORLD_SIZE",
            "LOCAL_RANK",
            "LOCAL_WORLD_SIZE",
            "GROUP_RANK",
            "MASTER_ADDR",
            "MASTER_PORT",
        )
    }
    env.update(GLOO_SOCKET_IFNAME="lo", PYTHONUNBUFFERED="1", OMP_NUM_THREADS="1")
    env.update(extra)
    return env


def torchrun_cmd(
    script: str, args: list[str], port: int, nnodes: int = 1, nproc: int = 2, rdzv_id: str = "test"
) -> list[str]:
    return [
        sys.executable,
        "-m",
        "torch.distributed.run",
        f"--nnodes={nnodes}",
        f"--nproc_per_node={nproc}",
        f"--rdzv_id={rdzv_id}",
        "--rdzv_backend=c10d",
        f"--rdzv_endpoint=127.0.0.1:{port}",
        "--local-addr=127.0.0.1",
        str(TRAINER / script),
        *args,
    ]


def run_all(cmds: list[list[str]], cwd: Path, envs: list[dict[str, str]]) -> list[Result]:
    """Start every command at once (they form one job), wait for all.

    Output goes to files, not pipes, so a chatty process can't block while we
    wait on another. On timeout each process group gets SIGTERM (torchrun
    forwards it to its workers), then SIGKILL. Every process carries a
    DDPTUI_TAG, and afterwards none may be left.
    """
    tag = f"trainer-test-{uuid.uuid4().hex[:12]}"
    with contextlib.ExitStack() as stack:
        procs = []
        for i, (cmd, env) in enumerate(zip(cmds, envs, strict=True)):
            out = stack.enter_context(open(cwd / f"{tag}.{i}.out", "w+"))
            err = stack.enter_context(open(cwd / f"{tag}.{i}.err", "w+"))
            proc = subprocess.Popen(
                cmd,
                cwd=cwd,
                env={**env, "DDPTUI_TAG": tag},
                stdout=out,
                stderr=err,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
            procs.append((proc, out, err))
        deadline = time.monotonic() + TIMEOUT_S
        timed_out = False
        for proc, _, _ in procs:
            try:
                proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                timed_out = True
        if timed_out:
            for sig in (signal.SIGTERM, signal.SIGKILL):
                for proc, _, _ in procs:
                    if proc.poll() is None:
                        with contextlib.suppress(ProcessLookupError):
                            os.killpg(proc.pid, sig)
                time.sleep(5)
        results = []
        for proc, out, err in procs:
            proc.wait()
            out.seek(0)
            err.seek(0)
            results.append(Result(proc.returncode, out.read(), err.read()))
    if timed_out:
        pytest.fail(
            f"timed out after {TIMEOUT_S}s: " + "\n".join(r.stdout + r.stderr for r in results)
        )
    assert_nothing_left(tag)
    return results


def assert_nothing_left(tag: str) -> None:
    """No worker outlives its launcher (torchrun reaps them; srun-style ones exit)."""
    deadline = time.monotonic() + 10
    while (left := pids_with_tag(tag)) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not left, f"processes left behind: {left}"


def run_torchrun(script: str, args: list[str], cwd: Path) -> Result:
    return run_all([torchrun_cmd(script, args, free_port())], cwd, [base_env()])[0]


def assert_clean(result: Result) -> None:
    """Exit 0 and none of the gloo shutdown abort's traces."""
    detail = f"\n--- stdout\n{result.stdout}\n--- stderr\n{result.stderr}"
    assert result.code == 0, f"exit code {result.code}{detail}"
    assert "terminate called" not in result.stderr, detail
    assert "SIGABRT" not in result.stderr, detail
    assert "Traceback" not in result.stderr, detail


def check_envcheck(lines: list[str], world: int, local_world: int) -> None:
    """Every rank's identity and all-reduce line, and no other or merged line."""
    idents = {}
    sums = {}
    for line in lines:
        if m := IDENT_RE.match(line):
            idents[int(m["rank"])] = m
        elif m := ALLREDUCE_RE.match(line):
            sums[int(m["rank"])] = int(m["sum"])
        else:
            assert HEARTBEAT_RE.match(line), f"unexpected line {line!r}"
    assert sorted(idents) == list(range(world))
    for rank, m in idents.items():
        assert int(m["world_size"]) == world
        assert int(m["local_world_size"]) == local_world
        assert int(m["group_rank"]) == rank // local_world
        assert int(m["local_rank"]) == rank % local_world
        assert (m["backend"], m["device"]) == ("gloo", "cpu")
    assert sums == {r: world * (world + 1) // 2 for r in range(world)}


def test_envcheck_single_node(tmp_path: Path) -> None:
    result = run_torchrun("envcheck.py", ["--sleep", "1.2"], tmp_path)
    assert_clean(result)
    check_envcheck(result.lines, world=2, local_world=2)
    beats = {(int(m["rank"]), int(m["beat"])) for m in matches(HEARTBEAT_RE, result.lines)}
    assert beats == {(0, 1), (1, 1)}


def test_envcheck_two_agents_one_job(tmp_path: Path) -> None:
    """Two torchrun agents on 127.0.0.1 form one 4-rank job (the embedded
    default's pseudo-nodes)."""
    port = free_port()
    rdzv_id = f"two-{uuid.uuid4().hex[:8]}"
    cmds = [torchrun_cmd("envcheck.py", [], port, nnodes=2, rdzv_id=rdzv_id) for _ in range(2)]
    results = run_all(cmds, tmp_path, [base_env(), base_env()])
    for result in results:
        assert_clean(result)
    check_envcheck(results[0].lines + results[1].lines, world=4, local_world=2)
    # Each agent's workers share one group rank.
    for result in results:
        groups = {int(m["group_rank"]) for line in result.lines if (m := IDENT_RE.match(line))}
        assert len(groups) == 1


def test_envcheck_srun_style(tmp_path: Path) -> None:
    """As `srun -N2 -n2 python envcheck.py` would start it: no torchrun, the
    identity comes from SLURM_* and the rendezvous from MASTER_ADDR/PORT."""
    port = str(free_port())
    envs = [
        base_env(
            SLURM_PROCID=str(i),
            SLURM_NTASKS="2",
            SLURM_LOCALID="0",
            SLURM_NODEID=str(i),
            SLURM_TASKS_PER_NODE="1(x2)",
            SLURM_NNODES="2",
            MASTER_ADDR="127.0.0.1",
            MASTER_PORT=port,
        )
        for i in range(2)
    ]
    cmds = [[sys.executable, str(TRAINER / "envcheck.py")] for _ in range(2)]
    results = run_all(cmds, tmp_path, envs)
    for result in results:
        assert_clean(result)
    check_envcheck(results[0].lines + results[1].lines, world=2, local_world=1)


def test_envcheck_srun_style_minimal_env(tmp_path: Path) -> None:
    """Only SLURM_PROCID/NTASKS/LOCALID: one node of two tasks."""
    port = str(free_port())
    envs = [
        base_env(
            SLURM_PROCID=str(i),
            SLURM_NTASKS="2",
            SLURM_LOCALID=str(i),
            MASTER_ADDR="127.0.0.1",
            MASTER_PORT=port,
        )
        for i in range(2)
    ]
    cmds = [[sys.executable, str(TRAINER / "envcheck.py")] for _ in range(2)]
    results = run_all(cmds, tmp_path, envs)
    for result in results:
        assert_clean(result)
    check_envcheck(results[0].lines + results[1].lines, world=2, local_world=2)


def test_envcheck_fail_rank(tmp_path: Path) -> None:
    result = run_torchrun("envcheck.py", ["--fail-rank", "1"], tmp_path)
    assert result.code != 0
    assert "Traceback (most recent call last)" in result.stderr
    assert "RuntimeError: envcheck: deliberate failure on rank 1 (--fail-rank)" in result.stderr


def test_envcheck_without_launcher_is_a_clear_error(tmp_path: Path) -> None:
    result = run_all([[sys.executable, str(TRAINER / "envcheck.py")]], tmp_path, [base_env()])[0]
    assert result.code == 2
    assert result.stderr.startswith("error: no distributed identity"), result.stderr
    assert "Traceback" not in result.stderr


def test_cpu_ddp_trains_and_resumes(tmp_path: Path) -> None:
    """First run with the defaults (snapshot.pt in the cwd), then resume from
    that snapshot moved to an explicit --checkpoint_path."""
    first = run_torchrun("cpu_ddp.py", ["5", "2"], tmp_path)
    assert_clean(first)
    epochs = {(int(m["rank"]), int(m["epoch"])) for m in matches(EPOCH_RE, first.lines)}
    assert epochs == {(r, e) for r in range(2) for e in range(5)}
    for m in matches(EPOCH_RE, first.lines):
        assert (m["bs"], m["steps"]) == ("32", "32")  # 2048 samples / 2 ranks / 32
    saved = [(int(m["epoch"]), m["path"]) for m in matches(SAVED_RE, first.lines)]
    assert saved == [(0, "snapshot.pt"), (2, "snapshot.pt"), (4, "snapshot.pt")]
    assert not matches(RESUME_RE, first.lines)

    snapshot = tmp_path / "ckpt" / "snap.pt"
    snapshot.parent.mkdir()
    (tmp_path / "snapshot.pt").rename(snapshot)
    args = ["7", "2", "--checkpoint_path", str(snapshot), "--batch_size", "64"]
    second = run_torchrun("cpu_ddp.py", args, tmp_path)
    assert_clean(second)
    # Every rank resumes; like the original, the saved epoch runs again.
    assert [int(m["epoch"]) for m in matches(RESUME_RE, second.lines)] == [4, 4]
    epochs = {
        (int(m["rank"]), int(m["epoch"]), m["bs"], m["steps"])
        for m in matches(EPOCH_RE, second.lines)
    }
    assert epochs == {(r, e, "64", "16") for r in range(2) for e in range(4, 7)}
    saved = [(int(m["epoch"]), m["path"]) for m in matches(SAVED_RE, second.lines)]
    assert saved == [(4, str(snapshot)), (6, str(snapshot))]
    assert not (tmp_path / "snapshot.pt").exists()


def test_elastic_ddp(tmp_path: Path) -> None:
    result = run_torchrun("elastic_ddp.py", ["--steps", "3"], tmp_path)
    assert_clean(result)
    for rank in range(2):
        mine = [line for line in result.lines if re.search(rf"\brank {rank}\b", line)]
        assert mine[0] == f"Start running basic DDP example on rank {rank}."
        assert [line.split(" loss=")[0] for line in mine[1:-2]] == [
            f"rank {rank} step={s}" for s in range(1, 4)
        ]
        for line in mine[1:-2]:
            assert re.fullmatch(rf"rank {rank} step=\d+ loss=\d+\.\d{{6}}", line)
        assert re.fullmatch(
            rf"rank {rank} throughput: [\d.]+ samples/s \(3 steps in [\d.]+ s\)", mine[-2]
        )
        assert mine[-1] == f"rank {rank} finished"


def test_allreduce_bench(tmp_path: Path) -> None:
    result = run_torchrun(
        "allreduce_bench.py",
        ["--min-bytes", "64K", "--max-bytes", "1M", "--iters", "3", "--warmup", "1"],
        tmp_path,
    )
    assert_clean(result)
    lines = result.lines
    assert lines[0] == (
        "allreduce_bench world_size=2 backend=gloo device=cpu dtype=float32 iters=3 warmup=1"
    )
    assert lines[1].startswith("#")
    assert "busbw(GB/s)" in lines[1]
    rows = [line.split() for line in lines[2:-2]]
    assert [int(r[0]) for r in rows] == [64 << 10, 128 << 10, 256 << 10, 512 << 10, 1 << 20]
    assert lines[-2].startswith("# Avg bus bandwidth : ")
    tag, _, payload = lines[-1].partition(" ")
    assert tag == "ALLREDUCE_RESULT"
    data = json.loads(payload)
    summary = (data["world_size"], data["backend"], data["device"], data["ok"])
    assert summary == (2, "gloo", "cpu", True)
    assert [r["bytes"] for r in data["results"]] == [int(r[0]) for r in rows]
    for r in data["results"]:
        assert r["count"] == r["bytes"] // 4
        assert r["time_us"] > 0
        assert r["algbw_gbps"] > 0
        assert r["busbw_gbps"] == pytest.approx(r["algbw_gbps"] * 2 * (2 - 1) / 2, abs=1e-3)
