"""Provides the cases more than one test file runs: the bundled trainers, a Slurm job, a
local log flood and one task of the Slurm step for every node."""

from __future__ import annotations

import base64
import importlib.util
import os
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from ddptui.core.job.spec import JobSpec, make_spec
from ddptui.core.node import STDIN_PROGRAM, STEP_SHELL, port_check_source, step_task_script
from ddptui.core.node.step import program_in_env, task_script
from testbed.standins import FLOOD_NODE

ROOT = Path(__file__).resolve().parents[1]
TRAINER = ROOT / "trainer"
DATA = Path(__file__).resolve().parent / "data"
TORCHRUN_CAPTURES = DATA / "torchrun"
FLOOD = FLOOD_NODE  # a stand-in torchrun that floods numbered lines

# Each bundled trainer on 2 nodes x 2: its arguments (`{tmp}` is the test's own directory)
# and a line every run of it prints.
TRAINERS = [
    ("envcheck.py", [], "allreduce=ok"),
    ("cpu_ddp.py", ["3", "2", "--checkpoint_path", "{tmp}/snap.pt"], "Epoch 2 | Batchsize"),
    ("elastic_ddp.py", ["--steps", "3"], "Start running basic DDP example on rank"),
]
TRAINER_CASES = pytest.mark.parametrize(("script", "args", "expect"), TRAINERS)


def load_trainer(filename: str) -> ModuleType:
    """A bundled trainer's module, loaded by path once (trainer/ is a script directory, not a
    package): `load_trainer("_dist.py")`."""
    name = f"trainer_{Path(filename).stem.strip('_')}_under_test"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, TRAINER / filename)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module  # dataclasses look their module up here
        spec.loader.exec_module(module)
    return sys.modules[name]


def trainer_args(args: list[str], tmp: Path) -> list[str]:
    return [a.replace("{tmp}", str(tmp)) for a in args]


def slurm_spec(**fields: object) -> JobSpec:
    """A 2 x 2 Slurm job whose script arguments need quoting."""
    base: dict[str, object] = {
        "backend": "slurm",
        "nodes": 2,
        "nproc_per_node": 2,
        "script": "train.py",
        "script_args": ("--lr", "0.1 x"),
    }
    return make_spec(**{**base, **fields})


def flood_spec(workdir: Path, nodes: int, lines: int, rate: float = 0.0) -> JobSpec:
    """A local job of `nodes` pseudo-nodes, each writing `lines` numbered lines (`rate` a
    second; 0: as fast as it can)."""
    return make_spec(
        backend="local",
        nodes=nodes,
        nproc_per_node=1,
        script=str(FLOOD),
        script_args=("--lines", str(lines), "--rate", str(rate)),
        launcher=f"{sys.executable} {FLOOD}",
        workdir=str(workdir),
    )


def step_task(
    node: str,
    argv: list[str],
    shell: str = "sh",
    via_env: bool = True,
    report: list[str] | None = None,
    prefix: Sequence[str] = (),
    env: dict[str, str] | None = None,
    **checks: object,
) -> subprocess.CompletedProcess[bytes]:
    """The Slurm step's task (node/step_task.sh) as SLURMD_NODENAME=`node` runs it, with
    node1's entry: `argv`, a tag and an env value, and `checks` (port_check, ifname_for).
    `report`: the port report's command (default: the real one, on its stdin); `prefix`:
    what runs the task's shell (a network namespace's `ip netns exec NS`); `env`: values
    over this process's environment."""
    tag = f"r{os.getpid()}.0"
    entry = {"argv": argv, "env": {"DDPTUI_TAG": tag, "X": 'it\'s "$q" `x`\n'}, "tag": tag}
    table = {"nodes": {"node1": {**entry, **checks}}}
    python = [sys.executable]
    port: dict[str, Any] = {
        "source": base64.b64encode(port_check_source()).decode(),
        "argv": report or [*python, "-S", "-c", STDIN_PROGRAM],
    }
    program = task_script(base64.b64encode(step_task_script()).decode(), table, python, port)
    task_env = {**os.environ, **(env or {}), "SLURMD_NODENAME": node}
    stdin = program_in_env(program, task_env) if via_env else program
    return subprocess.run(
        [*prefix, shell, "-c", STEP_SHELL], input=stdin, capture_output=True, env=task_env
    )
