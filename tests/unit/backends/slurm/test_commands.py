"""Slurm command lines and the generated batch script, built as pure functions."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from ddptui.core.backends.slurm.batch_script import batch_script
from ddptui.core.backends.slurm.commands import (
    allocation_args,
    direct_plan,
    direct_step_argv,
    nodes_step_argv,
    salloc_argv,
    torchrun_plan,
)
from ddptui.core.job.plan import NodeTarget
from ddptui.core.job.spec import SpecError
from ddptui.core.node import job_helper_source
from tests.cases import slurm_spec as _spec

NODES = [NodeTarget("node1", "10.0.0.11"), NodeTarget("node2", "10.0.0.12")]


# -- command lines --------------------------------------------------------------------------------


def test_salloc_asks_for_what_the_job_needs() -> None:
    spec = _spec(
        slurm={
            "partition": "gpu",
            "time": "00:30:00",
            "gres": "gpu:8",
            "exclusive": True,
            "account": "ml",
            "extra_args": ("--qos=high", "--cpus-per-task=32"),
        }
    )
    argv = salloc_argv(spec, "r1")
    assert argv[:3] == ["salloc", "--no-shell", "--job-name=ddptui-r1"]
    assert argv[3:] == [
        "--nodes=2",
        "--ntasks-per-node=1",
        "--cpus-per-task=2",
        "--partition=gpu",
        "--time=00:30:00",
        "--gres=gpu:8",
        "--account=ml",
        "--exclusive",
        "--qos=high",
        "--cpus-per-task=32",
    ]
    direct = _spec(slurm={"launch": "srun"})
    assert allocation_args(direct) == ["--nodes=2", "--ntasks-per-node=2"]


def test_an_elastic_job_is_allocated_and_stepped_to_outlive_a_lost_node() -> None:
    """Slurm ends a job (and its step) when it tells one of its nodes down, unless asked not
    to: an elastic job asks, a fixed one keeps Slurm's default."""
    elastic, fixed = _spec(nodes=3, min_nodes=2), _spec(nodes=3)
    assert "--no-kill" in allocation_args(elastic)
    assert "--no-kill" in nodes_step_argv(elastic, "12", "r1", ["a", "b", "c"], 1, "/w")
    assert "--no-kill" not in allocation_args(fixed)
    assert "--no-kill" not in nodes_step_argv(fixed, "12", "r1", ["a", "b", "c"], 1, "/w")
    batch = _spec(nodes=3, min_nodes=2, slurm={"mode": "sbatch"})
    assert "--no-kill" not in allocation_args(batch)  # nobody would tell it live


def test_torchrun_steps_one_per_node_with_their_own_address() -> None:
    spec = _spec(activate="source /opt/venv/bin/activate", env={"NCCL_DEBUG": "INFO"})
    plan = torchrun_plan(spec, "r1", NODES, 29400, "77", "/work", 2, {"node2": "ib0"})
    first, second = plan.commands
    assert first.argv[:10] == (
        "srun",
        "--jobid=77",
        "--nodes=1",
        "--ntasks=1",
        "--ntasks-per-node=1",
        "--nodelist=node1",
        "--job-name=ddptui-r1-0",
        "--export=ALL",
        "--chdir=/work",
        "--cpus-per-task=2",
    )
    assert first.argv[10:13] == ("bash", "-c", 'source /opt/venv/bin/activate && exec "$@"')
    assert "--rdzv_endpoint=10.0.0.11:29400" in first.argv
    assert "--local-addr=10.0.0.11" in first.argv and "--local-addr=10.0.0.12" in second.argv
    assert first.argv[-3:] == ("train.py", "--lr", "0.1 x")
    assert first.cwd is None and first.prelude is None  # both happen on the node
    assert second.env["GLOO_SOCKET_IFNAME"] == "ib0" and "GLOO_SOCKET_IFNAME" not in first.env
    assert first.env["NCCL_DEBUG"] == "INFO" and first.tag == "r1.0"


def test_pyxis_container_maps_to_srun_flags() -> None:
    spec = _spec(
        container={
            "image": "nvcr.io/nvidia/pytorch:24.01-py3",
            "engine": "pyxis",
            "mounts": ("/data:/data", "/ckpt:/ckpt"),
        }
    )
    argv = torchrun_plan(spec, "r1", NODES, 29400, "77", "/work", 0, {}).commands[0].argv
    assert "--container-image=nvcr.io/nvidia/pytorch:24.01-py3" in argv
    assert "--container-mounts=/data:/data,/ckpt:/ckpt" in argv
    assert "--container-workdir=/work" in argv
    assert argv.index("--container-image=nvcr.io/nvidia/pytorch:24.01-py3") < argv.index("torchrun")


def test_srun_direct_is_one_labelled_step_for_all_nodes() -> None:
    spec = _spec(slurm={"launch": "srun"}, python="python3")
    argv = direct_step_argv(spec, "77", "r1", ["node1", "node2"], "/work")
    assert argv[:5] == ["srun", "--jobid=77", "--nodes=2", "--ntasks=4", "--ntasks-per-node=2"]
    assert {"--distribution=block", "--kill-on-bad-exit=1", "--label"} <= set(argv)
    assert argv[-5:] == ["python3", "-u", "train.py", "--lr", "0.1 x"]
    plan = direct_plan(spec, "r1", NODES, 29500, "77", "/work", "eth0")
    env = plan.commands[1].env
    assert (env["MASTER_ADDR"], env["MASTER_PORT"], env["GLOO_SOCKET_IFNAME"]) == (
        "10.0.0.11",
        "29500",
        "eth0",
    )
    assert "TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE" not in env
    assert len({c.argv for c in plan.commands}) == 1 and plan.world_size == 4


def test_srun_direct_refuses_a_podman_container() -> None:
    spec = _spec(slurm={"launch": "srun"}, container={"image": "x", "engine": "podman"})
    with pytest.raises(SpecError, match="pyxis"):
        direct_step_argv(spec, "77", "r1", ["node1"], "/w")


# -- the batch script -----------------------------------------------------------------------------


def _check_shell(script: str) -> None:
    subprocess.run(["bash", "-n"], input=script, text=True, check=True)


def test_batch_script_follows_the_seed_procedure(tmp_path: Path) -> None:
    spec = _spec(
        slurm={
            "mode": "sbatch",
            "partition": "gpu",
            "gres": "gpu:4",
            "extra_args": ("--mail-type=END",),
        },
        activate="conda activate ml",
        workdir="/shared/proj",
    )
    script = batch_script(spec, "r1", "/shared/runs/r1", 29400)
    _check_shell(script)
    lines = script.splitlines()
    assert lines[0] == "#!/bin/bash"
    assert {
        "#SBATCH --job-name=ddptui-r1",
        "#SBATCH --nodes=2",
        "#SBATCH --partition=gpu",
        "#SBATCH --gres=gpu:4",
        "#SBATCH --mail-type=END",
        "#SBATCH --output=/shared/runs/r1/slurm-%j.out",
        "#SBATCH --chdir=/shared/proj",
    } <= set(lines)
    assert 'nodes=$(scontrol show hostnames "$SLURM_JOB_NODELIST")' in lines
    assert 'head_node=$(echo "$nodes" | head -n 1)' in lines
    run_line = next(line for line in lines if "torchrun --nnodes=2" in line)
    assert "--rdzv_endpoint=${head_addr}:29400" in run_line
    assert "--local-addr=${addr}" in run_line
    assert "'conda activate ml && exec \"$@\"'" in run_line
    assert run_line.endswith('>>"$log" 2>&1')
    assert "export TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE='[ddptui:${rank}:${local_rank}]:'" in (
        script
    )
    assert (
        "srun --ntasks-per-node=1 --kill-on-bad-exit=0 --job-name=ddptui-r1 bash -c run_node"
        in lines
    )
    # the job's own last step proves every node clean, inside its allocation
    assert lines[-1] == (
        "env -u DDPTUI_TAG srun --ntasks-per-node=1 --kill-on-bad-exit=0 "
        "--job-name=ddptui-r1-proof bash -c prove_node"
    )
    assert (
        '    python3 "$run_dir"/job_helper.py reap r1.${SLURM_NODEID} 3 >"$out.tmp" '
        '&& mv "$out.tmp" "$out"' in lines
    )


def test_batch_script_srun_direct(tmp_path: Path) -> None:
    spec = _spec(slurm={"mode": "sbatch", "launch": "srun"}, socket_ifname="ib0")
    script = batch_script(spec, "r1", "/shared/runs/r1", 29500)
    _check_shell(script)
    assert "export MASTER_ADDR=$head_addr MASTER_PORT=29500" in script
    assert 'python3 "$run_dir"/job_helper.py reap r1.step 3 >' in script
    assert "export GLOO_SOCKET_IFNAME=ib0" in script and 'ifname_of "$' not in script
    assert (
        "DDPTUI_TAG=r1.step srun --ntasks-per-node=2 --distribution=block --kill-on-bad-exit=1 "
        "--label --job-name=ddptui-r1 python3 -u train.py --lr '0.1 x' >>\"$log\" 2>&1" in script
    )
    assert "torchrun" not in script


def test_batch_script_runs_each_node_into_its_own_log(tmp_path: Path) -> None:
    """The node part of the script, run here with a fake srun/scontrol environment."""
    spec = _spec(slurm={"mode": "sbatch"}, launcher="echo torchrun")
    run_dir = tmp_path / "run"
    (run_dir / "nodes").mkdir(parents=True)
    script = batch_script(spec, "r1", str(run_dir), 29400)
    (run_dir / "job_helper.py").write_bytes(job_helper_source())
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "scontrol").write_text(
        "#!/bin/sh\ncase \"$1 $2\" in 'show hostnames') printf 'n1\\nn2\\n';; "
        '*) echo "NodeName=$3 NodeAddr=10.9.0.$(echo $3 | tr -d n) State=IDLE";; esac\n'
    )
    (fake / "srun").write_text(  # one task per node, one after the other
        "#!/bin/bash\nshift 3; for i in 0 1; do SLURM_NODEID=$i SLURMD_NODENAME=n$((i+1)) "
        '"$@"; done\n'
    )
    for tool in fake.iterdir():
        tool.chmod(0o755)
    env = {"PATH": f"{fake}:/usr/bin:/bin", "SLURM_JOB_NODELIST": "n[1-2]"}
    out = subprocess.run(
        ["bash", "-c", script], env=env, capture_output=True, text=True, cwd=tmp_path
    )
    assert out.returncode == 0, out.stderr
    assert "rendezvous on n1 at 10.9.0.1:29400" in out.stdout
    second = (run_dir / "nodes" / "001-n2.log").read_text()
    assert "--rdzv_endpoint=10.9.0.1:29400" in second and "--local-addr=10.9.0.2" in second
    assert (run_dir / "nodes" / "001-n2.log.exit").read_text().strip() == "0"
    assert (run_dir / "nodes" / "000-n1.log.exit").exists()
    assert second.rstrip().endswith("--tee=3 train.py --lr 0.1 x")
    proof = json.loads((run_dir / "nodes" / "001-n2.proof").read_text())  # the last step's
    assert proof["found"] == 0 and proof["leftover"] == []
    assert (run_dir / "nodes" / "000-n1.proof").exists()


def test_pyxis_lines_are_the_seed_procedures() -> None:
    """pyxis/enroot (not installable here): the exact srun lines of the seed procedure,
    `srun --container-image ... --container-mounts ...`, for the console's steps and in the
    batch script, for the bundled pyxis preset with mounts added."""
    spec = _spec(
        slurm={"mode": "sbatch"},
        container={"image": "pytorch.sqsh", "engine": "pyxis", "mounts": ("/data:/data", "/c:/c")},
        workdir="/shared/proj",
    )
    script = batch_script(spec, "r1", "/shared/runs/r1", 29400).splitlines()
    assert (
        "srun --ntasks-per-node=1 --kill-on-bad-exit=0 --job-name=ddptui-r1 "
        "--container-image=pytorch.sqsh --container-mounts=/data:/data,/c:/c "
        "--container-workdir=/shared/proj bash -c run_node"
    ) in script
    assert not any("podman" in line for line in script)
    step = torchrun_plan(spec, "r1", NODES, 29400, "77", "/shared/proj", 4, {}).commands[1]
    assert list(step.argv[:14]) == [
        "srun", "--jobid=77", "--nodes=1", "--ntasks=1", "--ntasks-per-node=1",
        "--nodelist=node2", "--job-name=ddptui-r1-1", "--export=ALL", "--chdir=/shared/proj",
        "--cpus-per-task=4", "--container-image=pytorch.sqsh",
        "--container-mounts=/data:/data,/c:/c", "--container-workdir=/shared/proj", "torchrun",
    ]  # fmt: skip


def test_batch_script_wraps_torchrun_in_podman_on_each_node() -> None:
    spec = _spec(slurm={"mode": "sbatch"}, container={"image": "img:1"}, workdir="/shared/p")
    script = batch_script(spec, "r1", "/shared/runs/r1", 29400)
    _check_shell(script)
    run_line = next(line for line in script.splitlines() if "torchrun --nnodes" in line)
    assert run_line.strip().startswith(
        "podman run --rm --network=host --ipc=host --name ddptui-r1.${SLURM_NODEID} "
        "-v /shared/p:/shared/p -w /shared/p -e DDPTUI_TAG -e GLOO_SOCKET_IFNAME -e LOGLEVEL "
        "-e NCCL_SOCKET_IFNAME -e PYTHONUNBUFFERED -e TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE "
        "img:1 torchrun --nnodes=2 "
    ), run_line
    assert (
        'python3 "$run_dir"/job_helper.py reap r1.${SLURM_NODEID} 3 podman '
        "ddptui-r1.${SLURM_NODEID} >" in script
    )
