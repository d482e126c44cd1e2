"""salloc asked for early, then taken over by the allocator with the answers after its grant,
or given back when nobody takes it (ddptui/core/backends/slurm/early_alloc.py), against fake
Slurm commands."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from ddptui.core.backends.slurm import cli, early_alloc
from ddptui.core.backends.slurm.allocator import SlurmAllocator
from ddptui.core.backends.slurm.cli import CliQuery
from ddptui.core.events import AllocationChanged, Event

SCONTROL_JOB = (
    "JobId=7 JobName=ddptui-r1 UserId=alice(1000) GroupId=alice(1000) JobState=RUNNING "
    "Reason=None Dependency=(null) Restarts=0 ExitCode=0:0 ReqNodeList=(null) NodeList=n[1-3] "
    "NumNodes=3 NumCPUs=3"
)
ARGV = ["salloc", "--no-shell", "--job-name=ddptui-r1", "--nodes=2"]


@pytest.fixture
def fake_slurm(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """salloc that pends then grants job 7; scontrol (show job, show node) and scancel that
    log their arguments (one line each) in calls.log."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    calls = tmp_path / "calls.log"
    log = f'echo "$(basename "$0") $*" >> {calls}\n'
    tools = {
        "salloc": '[ -z "$SLOW_SALLOC" ] || exec sleep 30\n'
        "echo 'salloc: Pending job allocation 7' >&2\n"
        "echo 'salloc: job 7 queued and waiting for resources' >&2\n"
        "echo 'salloc: Granted job allocation 7' >&2\n",
        "scontrol": f'[ "$3" = job ] && {{ echo "{SCONTROL_JOB}"; exit; }}\n'
        'echo "NodeName=n1 NodeAddr=10.9.0.1"; echo "NodeName=n2 NodeAddr=10.9.0.2"\n',
        "scancel": "",
    }
    for name, body in tools.items():
        (bin_dir / name).write_text("#!/bin/sh\n" + log + body)
        (bin_dir / name).chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    yield calls
    early_alloc.discard()
    monkeypatch.setattr(cli, "_answers_ahead", [])


async def test_the_allocator_takes_it_over_with_the_answers_after_the_grant(
    fake_slurm: Path,
) -> None:
    early_alloc.request(ARGV, 2)
    events: list[Event] = []
    query = CliQuery()
    job = await SlurmAllocator(query, events.append, "ddptui-r1").salloc(ARGV)
    assert job.job_id == "7" and job.nodes == "n[1-3]"
    states = [e.state for e in events if isinstance(e, AllocationChanged)]
    assert states == ["requested", "pending"]  # granted is the backend's, with the nodes
    assert await query.node_addresses(["n1", "n2"]) == {"n1": "10.9.0.1", "n2": "10.9.0.2"}
    # salloc, the job's record and its nodes' addresses once each: the allocator ran none again
    assert [c for c in _calls(fake_slurm) if not c.startswith("salloc")] == [
        "scontrol -o show job 7",
        "scontrol -o show node n1,n2",
    ]
    await query.job("7")  # an answer is taken once: now scontrol is asked again
    assert _calls(fake_slurm)[-1] == "scontrol -o show job 7"
    early_alloc.discard()
    assert not [c for c in _calls(fake_slurm) if c.startswith("scancel")]  # taken over


def _calls(log: Path) -> list[str]:
    return log.read_text().splitlines()


def _said_all() -> None:
    """Until the early salloc has said all it says (granted, here)."""
    assert early_alloc._early is not None
    early_alloc._early.thread.join(10)


async def test_another_jobs_salloc_gives_the_early_one_back(fake_slurm: Path) -> None:
    early_alloc.request(ARGV, 2)
    _said_all()
    query = CliQuery()
    await SlurmAllocator(query, lambda _e: None, "ddptui-r2").salloc([*ARGV[:2], "--nodes=3"])
    calls = _calls(fake_slurm)
    assert calls.count("scancel 7") == 1 and calls.count("salloc " + " ".join(ARGV[1:])) == 1


def test_one_nobody_took_is_scancelled(fake_slurm: Path) -> None:
    early_alloc.request(ARGV, 2)
    _said_all()
    assert early_alloc.claim(ARGV[:-1]) is None  # not the command the backend would run
    early_alloc.discard()
    assert "scancel 7" in fake_slurm.read_text().splitlines()
    assert early_alloc.claim(ARGV) is None  # given back: nothing left to take


def test_one_stopped_before_it_said_its_job_is_scancelled_by_name(
    fake_slurm: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SLOW_SALLOC", "1")
    early_alloc.request(ARGV, 2)
    early_alloc.discard()
    assert "scancel --name=ddptui-r1" in fake_slurm.read_text().splitlines()
