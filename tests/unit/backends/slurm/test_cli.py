"""Slurm CLI output parsed: squeue --json of 22.05 and newer, salloc, scontrol, steps, sbatch."""

from __future__ import annotations

import pytest

from ddptui.core.backends.slurm.cli import (
    CliQuery,
    choose_query,
    job_states,
    parse_hostnames,
    parse_node_addresses,
    parse_salloc_line,
    parse_sbatch_parsable,
    parse_squeue_json,
    parse_steps,
    parse_version,
)

# `squeue --json` of Slurm 22.05.8 (trimmed): job_state is a string, numbers are plain.
SQUEUE_2205 = """{"meta": {"Slurm": {"release": "22.05.8"}}, "errors": [], "jobs": [
 {"job_id": 4, "name": "ddptui-r1", "job_state": "PENDING", "state_reason": "PartitionNodeLimit",
  "nodes": "", "cpus": 5, "node_count": 5, "exit_code": 0},
 {"job_id": 5, "name": "no-shell", "job_state": "RUNNING", "state_reason": "None",
  "nodes": "node[1-2]", "cpus": 4, "node_count": 2, "exit_code": 0},
 {"job_id": 3, "name": "no-shell", "job_state": "CANCELLED", "state_reason": "None",
  "nodes": "node[1-3]", "cpus": 3, "node_count": 3, "exit_code": 0},
 {"job_id": 6, "name": "x", "job_state": "COMPLETING", "state_reason": "None",
  "nodes": "node1", "cpus": 1, "node_count": 1, "exit_code": 0}]}"""

# The shape of newer releases (openapi v0.0.40+): state lists, numbers wrapped.
SQUEUE_NEWER = """{"jobs": [
 {"job_id": 42, "name": "ddptui-r2", "job_state": ["PENDING"], "state_reason": "Resources",
  "nodes": "", "cpus": {"set": true, "infinite": false, "number": 8},
  "node_count": {"set": true, "infinite": false, "number": 2},
  "exit_code": {"status": ["PENDING"], "return_code": {"set": false, "number": 0}}},
 {"job_id": 43, "name": "y", "job_state": ["CANCELLED", "COMPLETING"], "state_reason": "None",
  "nodes": "gpu[01-02]", "cpus": {"set": true, "number": 16},
  "node_count": {"set": true, "number": 2},
  "exit_code": {"status": ["SIGNALED"], "return_code": {"set": true, "number": 15}}},
 {"job_id": 44, "name": "z", "job_state": ["RUNNING"], "state_reason": "None",
  "nodes": "gpu03", "cpus": {"set": true, "number": 8}, "node_count": {"set": true, "number": 1},
  "exit_code": {"status": ["SUCCESS"], "return_code": {"set": true, "number": 0}}}]}"""


def test_squeue_json_of_slurm_2205() -> None:
    jobs = parse_squeue_json(SQUEUE_2205)
    assert jobs["4"].pending and jobs["4"].reason == "PartitionNodeLimit"
    assert jobs["5"].running and jobs["5"].reason == "" and jobs["5"].cpus_per_node == 2
    assert jobs["5"].nodes == "node[1-2]" and not jobs["5"].ended
    assert jobs["3"].ended and not jobs["3"].running
    assert not jobs["6"].ended  # still completing: its processes may be alive


def test_squeue_json_of_newer_slurm() -> None:
    jobs = parse_squeue_json(SQUEUE_NEWER)
    assert jobs["42"].pending and jobs["42"].reason == "Resources"
    assert jobs["42"].cpus_per_node == 4 and jobs["42"].exit_code is None
    assert jobs["43"].states == ("CANCELLED", "COMPLETING") and not jobs["43"].ended
    assert jobs["43"].exit_code == 15 and jobs["43"].state == "CANCELLED+COMPLETING"
    assert jobs["44"].running and jobs["44"].exit_code == 0


def test_job_state_string_and_list() -> None:
    assert job_states("RUNNING") == ("RUNNING",)
    assert job_states(["CANCELLED", "COMPLETING"]) == ("CANCELLED", "COMPLETING")
    assert job_states(None) == ()


@pytest.mark.parametrize(
    ("line", "kind", "job_id"),
    [
        ("salloc: Pending job allocation 4\n", "pending", "4"),
        ("salloc: job 4 queued and waiting for resources", "queued", "4"),
        ("salloc: Granted job allocation 17", "granted", "17"),
        ("salloc: Requested partition configuration not available now", "info", None),
        (
            "salloc: error: Job submit/allocate failed: Requested node configuration is not "
            "available",
            "error",
            None,
        ),
        ("salloc: Job allocation 9 has been revoked.", "error", None),
        ("salloc: Job aborted due to signal", "error", None),
        ("salloc: Nodes node[1-2] are ready for job", "info", None),
    ],
)
def test_salloc_stderr_lines(line: str, kind: str, job_id: str | None) -> None:
    parsed = parse_salloc_line(line)
    assert (parsed.kind, parsed.job_id) == (kind, job_id)
    assert not parsed.text.startswith("salloc:")


def test_salloc_error_text_is_slurms() -> None:
    line = parse_salloc_line("salloc: error: invalid partition specified: gpu")
    assert line.text == "invalid partition specified: gpu"


def test_scontrol_outputs() -> None:
    assert parse_hostnames("node1\nnode2\n\nnode3\n") == ["node1", "node2", "node3"]
    shown = (
        "NodeName=node1 Arch=x86_64 CoresPerSocket=1  CPUAlloc=2 NodeAddr=10.78.56.11 "
        "NodeHostName=node1 Version=22.05.8\n"
        "NodeName=gpu02 Arch=x86_64 NodeAddr=gpu02-ib NodeHostName=gpu02\n"
    )
    assert parse_node_addresses(shown) == {"node1": "10.78.56.11", "gpu02": "gpu02-ib"}
    assert parse_version("slurm 22.05.8\n") == (22, 5)
    assert parse_version("slurm-wlm 25.11.0") == (25, 11)


def test_steps_and_sbatch_id() -> None:
    steps = parse_steps("6.2|ddptui-r-0|node1\n6.3|ddptui-r-1|node2\n7.batch|batch|node1\n")
    assert [(s.step_id, s.name) for s in steps] == [
        ("6.2", "ddptui-r-0"),
        ("6.3", "ddptui-r-1"),
        ("7.batch", "batch"),
    ]
    assert parse_sbatch_parsable("1234\n") == "1234"
    assert parse_sbatch_parsable("1234;cluster2\n") == "1234"


def test_without_pyslurm_the_cli_answers() -> None:
    assert isinstance(choose_query(), CliQuery)  # pyslurm is not installed with Slurm 22.05


# -- srun --label output --------------------------------------------------------------------------
