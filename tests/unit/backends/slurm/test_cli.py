"""Slurm CLI output parsed: scontrol show job (captured from 22.05), salloc, steps, sbatch."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from ddptui.core.backends.slurm.cli import (
    CliQuery,
    JobInfo,
    SlurmError,
    choose_query,
    job_states,
    parse_hostnames,
    parse_node_addresses,
    parse_salloc_line,
    parse_sbatch_parsable,
    parse_scontrol_job,
    parse_steps,
    parse_version,
)

# `scontrol -o show job ID` of Slurm 22.05.8, captured on the testbed: each case, then its line
CAPTURES = Path(__file__).parents[3] / "data" / "slurm" / "scontrol_show_job_2205.txt"


def _captured() -> dict[str, str]:
    cases: dict[str, str] = {}
    case = ""
    for line in CAPTURES.read_text().splitlines()[1:]:
        if line.startswith("# "):
            case = line[2:]
        elif line.strip():
            cases[case] = line
    return cases


def _job(case: str) -> JobInfo:
    line = _captured()[case]
    job_id = line.split()[0].partition("=")[2]
    job = parse_scontrol_job(f"{line}\n", job_id)
    assert job is not None
    return job


def test_a_running_allocation() -> None:
    job = _job("running")
    assert job.running and not job.pending and not job.ended
    assert (job.job_id, job.name, job.nodes) == ("2006", "ddptui-capture", "node[1-2]")
    assert (job.cpus, job.node_count, job.cpus_per_node) == (2, 2, 1)
    assert (job.reason, job.exit_code, job.restarts) == ("", 0, 0)


def test_a_pending_job_has_its_reason_and_no_nodes() -> None:
    held = _job("held")  # NumNodes=1-1: a pending job's node count is a range
    assert held.pending and held.reason == "JobHeldUser"
    assert (held.nodes, held.node_count) == ("", 1)


def test_ended_jobs_with_their_exit_codes() -> None:
    failed = _job("failed")  # ExitCode=3:0
    assert failed.ended and failed.state == "FAILED" and failed.exit_code == 3
    assert failed.reason == "NonZeroExitCode"
    assert _job("signal").exit_code == 128 + 9  # ExitCode=0:9, as a shell reports it
    cancelled = _job("cancelled")
    assert cancelled.ended and cancelled.exit_code == 128 + 15
    timeout = _job("timeout")  # its time limit reached
    assert timeout.ended and timeout.state == "TIMEOUT" and timeout.reason == "TimeLimit"


def test_a_completing_job_has_not_ended() -> None:
    job = _job("cancel_now")  # just scancelled: its processes may be alive
    assert job.states == ("COMPLETING",) and not job.ended and not job.running


def test_a_requeued_job_counts_its_restarts_and_has_not_ended() -> None:
    completing, pending = _job("requeued"), _job("requeued_pending")
    assert completing.restarts == pending.restarts == 1
    assert not completing.ended and not pending.ended
    assert pending.pending and pending.reason == "BeginTime"


def test_another_jobs_line_or_none_is_not_the_job() -> None:
    line = _captured()["running"]
    assert parse_scontrol_job(line, "206") is None
    assert parse_scontrol_job("", "2006") is None
    # a name with spaces (sbatch -J 'my run') is read whole
    spaced = line.replace("JobName=ddptui-capture ", "JobName=my run ")
    job = parse_scontrol_job(spaced, "2006")
    assert job is not None and job.name == "my run" and job.running


def test_keys_in_another_order_still_give_their_first_word() -> None:
    line = "JobId=9 JobState=PENDING Reason=Priority JobName=ddptui-r9 NumNodes=2-2 NumCPUs=2"
    job = parse_scontrol_job(line, "9")
    assert job is not None
    assert (job.name, job.reason, job.node_count) == ("ddptui-r9", "Priority", 2)


async def test_the_cli_asks_for_the_one_job_and_a_forgotten_one_is_none(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls = tmp_path / "calls"
    scontrol = tmp_path / "scontrol"
    scontrol.write_text(
        "#!/bin/sh\n"
        f'echo "$*" >> {calls}\n'
        'case "$4" in\n'
        f"2006) cat <<'EOF'\n{_captured()['running']}\nEOF\n;;\n"
        "down) echo 'slurm_load_jobs error: Unable to contact slurm controller' >&2; exit 1;;\n"
        "*) echo 'slurm_load_jobs error: Invalid job id specified' >&2; exit 1;;\n"
        "esac\n"
    )
    scontrol.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:{os.environ['PATH']}")
    query = CliQuery()
    job = await query.job("2006")
    assert job is not None and job.running and job.nodes == "node[1-2]"
    assert await query.job("77") is None  # gone from the controller
    with pytest.raises(SlurmError, match="Unable to contact slurm controller"):
        await query.job("down")
    assert calls.read_text().splitlines() == [
        "-o show job 2006",
        "-o show job 77",
        "-o show job down",
    ]


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
