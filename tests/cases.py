"""Provides the cases more than one test file runs: the bundled trainers, a Slurm job and a
local log flood."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

from ddptui.core.job.spec import JobSpec, make_spec
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
