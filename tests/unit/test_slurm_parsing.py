"""The Slurm backend's pure parts: what the Slurm CLI prints, and how srun's labelled output
becomes per-node, per-rank lines (command lines and batch scripts: test_slurm_commands.py)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

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
from ddptui.core.backends.slurm.log_follow import follow_log
from ddptui.core.backends.slurm.srun_output import (
    SrunDemux,
    expand_tasks,
    slurm_complaint,
    task_exit,
)
from ddptui.core.events import RankState
from ddptui.core.job.spec import SpecError, make_spec
from ddptui.core.monitor.monitor import Monitor

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


def _spec(**fields: object):  # type: ignore[no-untyped-def]
    base: dict[str, object] = {
        "backend": "slurm",
        "nodes": 2,
        "nproc_per_node": 2,
        "script": "train.py",
        "script_args": ("--lr", "0.1 x"),
    }
    return make_spec(**{**base, **fields})


# -- squeue, salloc, scontrol, sbatch -------------------------------------------------------------


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


def test_demux_sends_each_rank_to_its_node_in_the_prefix_format() -> None:
    demux = SrunDemux(["node1", "node2"], 2)
    out = demux.feed(b"0: hello\n 3: from three\n2: partial")
    assert out == {0: b"[ddptui:0:0]:hello\n", 1: b"[ddptui:3:1]:from three\n"}
    out = demux.feed(
        b" line\nsrun: error: node2: tasks 2-3: Terminated\nsrun: Force Terminated StepId=6.0\n"
    )
    assert out[1] == (
        b"[ddptui:2:0]:partial line\n"
        b"[ddptui:2:0]:ddptui: worker ended: exit -15, stopped by the launcher"
        b" | srun: error: node2: task 2: Terminated\n"
        b"[ddptui:3:1]:ddptui: worker ended: exit -15, stopped by the launcher"
        b" | srun: error: node2: task 3: Terminated\n"
    )
    assert out[0] == b"srun: Force Terminated StepId=6.0\n"
    assert demux.feed(b"1: no newline yet") == {}
    assert demux.flush() == {0: b"[ddptui:1:1]:no newline yet"}


def test_srun_task_lines() -> None:
    assert expand_tasks("0-1,3") == [0, 1, 3]
    assert task_exit("srun: error: node2: task 3: Exited with exit code 1") == (1, True)
    assert task_exit("srun: error: node1: task 0: Terminated") == (-15, False)
    assert task_exit("srun: error: node1: task 0: Killed") == (-9, False)
    assert task_exit("srun: error: node1: task 0: Segmentation fault (core dumped)") == (-11, True)
    assert task_exit("srun: error: Unable to create step for job 5: More processors") is None


def test_slurms_complaints_are_found() -> None:
    assert slurm_complaint(["x", "srun: unrecognized option '--container-image=a'", "y"]) == (
        "srun: unrecognized option '--container-image=a'"
    )
    assert (
        slurm_complaint(
            [
                "srun: error: Unable to create step for job 5: More processors "
                "requested than permitted"
            ]
        )
        is not None
    )
    assert slurm_complaint(["srun: error: node2: task 0: Exited with exit code 1"]) is None


def test_monitor_learns_exit_codes_from_srun_direct_lines() -> None:
    demux = SrunDemux(["node1", "node2"], 2)
    m = Monitor(["node1", "node2"], 2)
    raw = (
        b"0: ok\n1: ok\n2: ok\n3: Traceback (most recent call last):\n"
        b'3:   File "x.py", line 1, in <module>\n'
        b"2: a stdout line between the traceback's lines\n"
        b"3: RuntimeError: boom\n"
        b"srun: error: node1: tasks 0-1: Terminated\n"
        b"srun: error: node2: task 3: Exited with exit code 1\n"
        b"srun: error: node2: task 2: Terminated\n"
    )
    for index, data in demux.feed(raw).items():
        m.feed(["node1", "node2"][index], data)
    cells = {c.rank: c for c in m.board.all_cells()}
    assert (cells[3].state, cells[3].exit_code, cells[3].error) == (
        RankState.FAILED,
        1,
        "RuntimeError: boom",
    )
    assert cells[3].traceback[0].startswith("Traceback") and len(cells[3].traceback) == 3
    assert (cells[0].state, cells[0].exit_code) == (RankState.FAILED, -15)
    assert (cells[2].node, cells[2].exit_code) == ("node2", -15)
    assert m.board.culprit() is cells[3]


# -- following a log the job writes ---------------------------------------------------------------


async def test_follow_log_reads_to_the_exit_file(tmp_path: Path) -> None:
    log = tmp_path / "000-node1.log"
    log.write_bytes(b"one\ntwo\n")
    (tmp_path / "000-node1.log.exit").write_text("3\n")
    got: list[bytes] = []
    assert await follow_log(log, 4, got.append) == 3
    assert b"".join(got) == b"two\n"


async def test_follow_log_stops_when_the_writer_is_gone(tmp_path: Path) -> None:
    import ddptui.core.backends.slurm.log_follow as lf

    log = tmp_path / "missing.log"
    asked: list[int] = []

    async def ended() -> int | None:
        asked.append(1)
        return 143

    old = lf.CHECK_EVERY_S, lf.EXIT_GRACE_S
    lf.CHECK_EVERY_S, lf.EXIT_GRACE_S = 0.2, 0.2
    try:
        assert await follow_log(log, 0, lambda _c: None, ended) == 143
    finally:
        lf.CHECK_EVERY_S, lf.EXIT_GRACE_S = old
    assert asked


def test_run_for_job_finds_the_run(tmp_path: Path) -> None:
    from ddptui.core.backends.slurm.backend import run_for_job

    for run_id, job in (("20260101-000000-aaaaaa", "41"), ("20260102-000000-bbbbbb", "42")):
        (tmp_path / run_id).mkdir()
        (tmp_path / run_id / "plan.json").write_text(
            json.dumps({"backend": {"backend": "slurm", "job_id": job}})
        )
    found = run_for_job("42", tmp_path)
    assert found is not None and found.run_id == "20260102-000000-bbbbbb"
    assert run_for_job("43", tmp_path) is None


def test_slurm_backend_imports_without_textual_or_pyslurm() -> None:
    code = (
        "import sys\n"
        "import ddptui.core.backends.slurm.backend, ddptui.core.backends.slurm.allocator\n"
        "import ddptui.core.backends.slurm.cli\n"
        "bad = [m for m in sys.modules if m.startswith(('textual', 'ddptui.ui', 'pyslurm'))]\n"
        "assert not bad, bad\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_mode_auto_uses_the_allocation_we_are_inside() -> None:
    from ddptui.core.backends.slurm.commands import resolve_mode

    assert resolve_mode(_spec(), {"SLURM_JOB_ID": "12"}) == "existing"
    assert resolve_mode(_spec(), {}) == "salloc"
    assert resolve_mode(_spec(slurm={"mode": "sbatch"}), {"SLURM_JOB_ID": "12"}) == "sbatch"
    with pytest.raises(SpecError, match="SLURM_JOB_ID is not set"):
        resolve_mode(_spec(slurm={"mode": "existing"}), {})
