"""The console's side of one Slurm step for every node: the step's command line, and the GPU
sampler step's labelled stream split per node."""

from __future__ import annotations

import json
from typing import Any

from ddptui.core.backends.slurm.commands import every_node_argv, nodes_step_argv
from ddptui.core.backends.slurm.gpu_follow import LabelledGpu
from ddptui.core.job.spec import JobSpec
from ddptui.core.node import STDIN_PROGRAM, STEP_SHELL
from ddptui.core.node.each import MARK
from ddptui.core.node.gpu_sampler import GPU_MARK


def test_one_step_runs_a_task_per_node_with_its_program_on_stdin() -> None:
    spec = JobSpec(script="train.py", nodes=3, nproc_per_node=2)
    argv = nodes_step_argv(spec, "12", "run1", ["a", "b", "c"], 2, "/work")
    assert argv[:1] == ["srun"] and argv[-3:] == ["sh", "-c", STEP_SHELL]
    for flag in (
        "--jobid=12",
        "--nodes=3",
        "--ntasks=3",
        "--ntasks-per-node=1",
        "--nodelist=a,b,c",
        "--label",
        "--input=all",
        "--kill-on-bad-exit=0",
        "--job-name=ddptui-run1",
        "--chdir=/work",
        "--cpus-per-task=2",
    ):
        assert flag in argv, flag
    helper = every_node_argv("12", ["a", "b"], "n", "python3", "each", "gpu", label=True)
    assert (
        "--overlap" in helper
        and "--label" in helper
        and helper[-5:] == ["-S", "-c", STDIN_PROGRAM, "each", "gpu"]
    )


def test_gpu_samples_of_one_step_go_to_the_node_each_task_names() -> None:
    got: list[tuple[str, Any]] = []
    split = LabelledGpu(["a", "b"], lambda node, record: got.append((node, record["t"])))

    def sample(t: int) -> bytes:
        return GPU_MARK + json.dumps({"t": t}).encode()

    split.feed(b"0: " + MARK + b"node b\n1: " + MARK + b"node a\n0: " + sample(1))
    split.feed(b"\n1: " + sample(2) + b"\nsrun: error: a: task 1: Killed\n 0: " + sample(3) + b"\n")
    assert got == [("b", 1), ("a", 2), ("b", 3)]
