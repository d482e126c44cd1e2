"""The preemption drill's parts without a job: the node side's timing of real processes (one
that exits on the signal, one whose handler outlasts the grace), the exit codes it reads from a
zombie, the report's rows from the nodes' and the agents' words, the table that fits the
console, Slurm's lead time, and the control file's `drill` line."""

from __future__ import annotations

import asyncio
import io
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from contextlib import redirect_stdout
from pathlib import Path
from typing import Any

import pytest

from ddptui.core.backends.base import BackendError
from ddptui.core.backends.local import LocalBackend
from ddptui.core.events import Event, Notice, RankChanged, RankState, RankSummary
from ddptui.core.job.plan import NodeCommand
from ddptui.core.job.spec import make_spec
from ddptui.core.node.drill import drill, ended, ranks_of
from ddptui.core.session.drill import (
    DrillAsked,
    DrillReport,
    RankExit,
    drill_table,
    exit_text,
    rank_exits,
    slurm_lead_s,
)
from ddptui.core.session.membership import NodeAction, NodeActionKind, parse_action
from ddptui.core.session.session import Session
from tests.cases import ROOT, slurm_spec
from tests.procs import pids_with_tag

# A rank that exits 3 on USR1, and one whose USR1 handler sleeps past any grace.
QUICK = (
    "import signal,time,os; signal.signal(signal.SIGUSR1, lambda *a: os._exit(3)); time.sleep(60)"
)
SLOW = (
    "import signal,time; signal.signal(signal.SIGUSR1, lambda *a: time.sleep(60)); time.sleep(60)"
)


def _rank(tag: str, rank: int, code: str) -> subprocess.Popen[bytes]:
    env = {**os.environ, "DDPTUI_TAG": tag, "RANK": str(rank), "LOCAL_RANK": str(rank)}
    return subprocess.Popen([sys.executable, "-c", code], env=env)


def _ready(procs: list[subprocess.Popen[bytes]]) -> None:
    """Until each has its USR1 handler (SigCgt), so the signal is not its default's."""
    deadline = time.monotonic() + 20
    for proc in procs:
        while time.monotonic() < deadline:
            with open(f"/proc/{proc.pid}/status") as f:
                status = f.read()
            caught = int(
                next(x for x in status.splitlines() if x.startswith("SigCgt")).split()[1], 16
            )
            if caught & (1 << (signal.SIGUSR1 - 1)):
                break
            time.sleep(0.02)


def test_the_node_times_each_rank_and_kills_what_outlasts_the_grace() -> None:
    tag = f"drill-unit-{os.getpid()}"
    quick, slow = _rank(tag, 0, QUICK), _rank(tag, 1, SLOW)
    try:
        _ready([quick, slow])
        said = io.StringIO()
        at = round(time.time() + 0.5, 3)  # every node is told the same time to send at
        with redirect_stdout(said):
            assert drill(tag, "1.0", "USR1", "", f"{at:.3f}") == 0
        report = json.loads(said.getvalue())
    finally:
        for proc in (quick, slow):
            proc.kill()
            proc.wait()
    assert report["signals"] == ["USR1"] and report["grace"] == 1.0
    assert at <= report["sent"] < at + 0.5
    by_rank = {r["rank"]: r for r in report["ranks"]}
    assert sorted(by_rank) == [0, 1]
    # never reaped by their parent (this test) while the drill looked: zombies, codes read
    assert by_rank[0]["code"] == 3 and not by_rank[0]["killed"]
    assert 0 <= by_rank[0]["after"] < 1.0
    assert by_rank[1]["killed"] and by_rank[1]["after"] is None
    assert by_rank[1]["code"] == -signal.SIGKILL
    assert by_rank[0]["pid"] == quick.pid and by_rank[1]["pid"] == slow.pid


def test_slurms_own_client_is_left_alone(tmp_path: Path) -> None:
    """srun direct's `srun` carries the job's tag (and, in a batch job, SLURM_PROCID 0 on the
    first node): it is no rank, gets no signal, and is not killed once the ranks have ended
    (that ended the step and lost every task's exit code)."""
    tag = f"drill-srun-{os.getpid()}"
    srun = tmp_path / "srun"
    srun.symlink_to(shutil.which("sleep") or "/bin/sleep")  # its name is what Slurm's is
    env = {**os.environ, "DDPTUI_TAG": tag, "SLURM_PROCID": "0", "SLURM_LOCALID": "0"}
    client = subprocess.Popen([str(srun), "60"], env=env)
    quick = _rank(tag, 0, QUICK)
    try:
        _ready([quick])
        said = io.StringIO()
        with redirect_stdout(said):
            assert drill(tag, "1.0", "USR1") == 0
        report = json.loads(said.getvalue())
        assert [r["pid"] for r in report["ranks"]] == [quick.pid]
        assert report["ranks"][0]["code"] == 3
        assert client.poll() is None  # neither USR1 (its default ends it) nor SIGKILL
    finally:
        for proc in (client, quick):
            proc.kill()
            proc.wait()


def test_a_zombie_gives_its_exit_code_and_a_live_process_none() -> None:
    proc = subprocess.Popen([sys.executable, "-c", "import sys; sys.exit(7)"])
    deadline = time.monotonic() + 20
    while not ended(proc.pid)[0] and time.monotonic() < deadline:
        time.sleep(0.01)
    assert ended(proc.pid) == (True, 7)
    proc.wait()
    assert ended(proc.pid) == (True, None)  # reaped: gone, its code with its parent
    assert ended(os.getpid()) == (False, None)


def test_a_ranks_own_children_are_not_ranks() -> None:
    """A data loader's worker has its rank's environment: only the rank itself is listed."""
    code = (
        "import subprocess,sys,time; "
        "subprocess.Popen([sys.executable,'-c','import time; time.sleep(30)']); time.sleep(30)"
    )
    tag = f"drill-children-{os.getpid()}"
    parent = _rank(tag, 4, code)
    try:
        deadline = time.monotonic() + 20
        children: list[int] = []
        while not children and time.monotonic() < deadline:
            children = [
                int(p) for p in os.listdir("/proc") if p.isdigit() and _ppid(int(p)) == parent.pid
            ]
            time.sleep(0.05)
        assert children
        assert ranks_of([parent.pid, *children]) == {parent.pid: (4, 4)}
    finally:
        for pid in children:
            os.kill(pid, signal.SIGKILL)
        parent.kill()
        parent.wait()


def _ppid(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return int(f.read().rsplit(")", 1)[1].split()[1])
    except OSError:
        return 0


def _report(**fields: object) -> DrillReport:
    rows = (
        RankExit("node1", 0, 0, 101, 1700000000.25, 2.5, False, 0),
        RankExit("node2", 1, 0, 202, 1700000000.5, None, True, -9),
    )
    values: dict = {"signals": ("USR1",), "grace_s": 10.0, "lead_s": None, "ranks": rows}
    return DrillReport(**{**values, **fields})  # type: ignore[arg-type]


def test_rows_take_the_nodes_word_then_the_agents_then_sigkills() -> None:
    reports = {
        "a": {
            "sent": 5.0,
            "ranks": [
                {"pid": 1, "rank": 2, "local_rank": 0, "after": 0.5, "code": None, "killed": False},
                {"pid": 2, "rank": 3, "local_rank": 1, "after": 0.7, "code": -10, "killed": False},
            ],
        },
        "b": {
            "sent": 6.0,
            "ranks": [
                {"pid": 3, "rank": 0, "local_rank": 0, "after": None, "code": None, "killed": True}
            ],
        },
    }
    ends = (  # the agents' word on a's ranks, and a rank of b that ended before the signal
        RankSummary(2, "a", 0, RankState.DONE, 0),
        RankSummary(3, "a", 1, RankState.FAILED, 1),
        RankSummary(1, "b", 1, RankState.FAILED, -15),
        RankSummary(9, "c", 0, RankState.DONE, 0),  # a node not drilled: not a row
    )
    rows = rank_exits(reports, ends)
    assert [r.rank for r in rows] == [0, 1, 2, 3]
    assert [r.exit_code for r in rows] == [-9, -15, 0, -10]  # killed; agent's twice; node's
    assert [r.outcome for r in rows] == [
        "needed SIGKILL",
        "gone before it",
        "within grace",
        "within grace",
    ]
    assert rows[2].sent_at == 5.0 and rows[0].sent_at == 6.0 and rows[1].sent_at == 6.0
    report = _report(ranks=rows)
    assert "2 of 4 rank(s) exited within" in report.headline
    assert "1 had ended before the signal (rank 1 on b)" in report.headline


def test_the_table_fits_the_console_and_names_who_needed_sigkill() -> None:
    long = RankExit("a-very-long-node-name-of-a-cluster", 12, 3, 9, 1.0, 9.99, False, -15)
    report = _report(lead_s=5.0, ranks=(*_report().ranks, long))
    table = drill_table(report)
    assert all(len(line) <= 78 for line in table), table
    assert table[0].startswith("SIGUSR1 to 3 rank(s) on 3 node(s) · grace 10 s")
    assert "Slurm warns 5 s ahead" in table[0]
    rows = [line for line in table if line.startswith(("node1", "node2", "a-very"))]
    assert "2.50 s" in rows[0] and "within grace" in rows[0] and rows[0].endswith(" 0")
    assert "needed SIGKILL" in rows[1] and rows[1].endswith("-9 SIGKILL")
    assert "past the lead" in rows[2] and rows[2].endswith("-15 SIGTERM")
    text = " ".join(table)
    assert "1 needed SIGKILL (rank 1 on node2)" in text
    assert "past Slurm's 5 s warning: rank 12 on a-very-long-node-name-of-a-cluster" in text


def test_the_headline_names_the_slowest_when_all_made_it() -> None:
    report = _report(ranks=_report().ranks[:1])
    assert report.headline == (
        "preemption drill (SIGUSR1): 1 of 1 rank(s) exited within the 10 s grace; "
        "the slowest, rank 0 on node1, after 2.50 s"
    )
    data = report.to_dict()
    assert data["event"] == "drill" and data["ranks"][0]["outcome"] == "within grace"
    assert data["headline"] == report.headline


@pytest.mark.parametrize(
    ("signal_arg", "lead"), [("B:USR1@120", 120.0), ("USR1", 60.0), ("TERM@30", 30.0), (None, None)]
)
def test_slurms_lead_time_from_its_signal_option(
    signal_arg: str | None, lead: float | None
) -> None:
    assert slurm_lead_s(slurm_spec(slurm={"signal": signal_arg})) == lead


def test_off_slurm_there_is_no_lead_time() -> None:
    assert slurm_lead_s(make_spec(script="train.py")) is None


def test_exit_codes_as_an_operator_reads_them() -> None:
    assert [exit_text(c) for c in (0, 1, -10, None)] == ["0", "1", "-10 SIGUSR1", "?"]


def test_the_control_file_asks_for_a_drill() -> None:
    assert parse_action("drill") == DrillAsked()
    assert parse_action("  drill \n") == DrillAsked()
    assert parse_action("drill node1") is None
    assert parse_action("kill node1") == NodeAction(NodeActionKind.KILL, "node1")


def test_rank_summaries_give_the_agents_word() -> None:
    """What the session hands the drill: its monitor's ranks (RankSummary)."""
    ends = (RankSummary(0, "a", 0, RankState.STOPPED, -10),)
    rows = rank_exits(
        {"a": {"sent": 1.0, "ranks": [{"pid": 5, "rank": 0, "local_rank": 0, "after": 0.1}]}}, ends
    )
    assert rows[0].exit_code == -10 and rows[0].found


class OneNodeUnreachable(LocalBackend):
    """The local backend, its second node's drill refused (a node that cannot be reached)."""

    async def drill(self, command: NodeCommand, at: float) -> dict[str, Any]:
        if command.node == "local1":
            raise BackendError("local1: could not drill: connection refused")
        return await super().drill(command, at)


async def test_a_node_that_cannot_be_drilled_is_named_and_the_run_still_ends(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The session's drill with real torchrun on two pseudo-nodes, one of which refuses: the
    other's ranks are timed, the refusal is the report's problem, and the run is torn down
    and proven clean all the same. Asked before the job runs, a drill is refused."""
    monkeypatch.setenv("DDPTUI_STATE_DIR", str(tmp_path / "state"))
    seen: list[Event] = []
    spec = make_spec(
        script=str(ROOT / "tests" / "data" / "graceful" / "worker.py"),
        script_args=("--ckpt-dir", str(tmp_path / "ckpt"), "--handler-s", "0.5"),
        nodes=2,
        nproc_per_node=1,
        grace=5,
        hang_timeout=0,
    )
    session = Session(spec, seen.append)
    session.backend = OneNodeUnreachable(spec, session.run, session.emit)
    session.request_drill()  # no plan yet: refused, nothing asked of the nodes
    assert isinstance(seen[-1], Notice) and "no running job to drill" in seen[-1].message
    runner = asyncio.ensure_future(session.run_job())
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        running = {e.rank for e in seen if isinstance(e, RankChanged) and e.state == "running"}
        if len(running) == 2:
            break
        await asyncio.sleep(0.2)
    session.request_drill()
    summary = await asyncio.wait_for(runner, 120)

    drills = [e for e in seen if isinstance(e, DrillReport)]
    assert len(drills) == 1
    report = drills[0]
    assert report.problems == ("local1: could not drill: connection refused",)
    assert [(r.node, r.outcome, r.exit_code) for r in report.ranks] == [
        (r.node, "within grace", 0) for r in report.ranks
    ]
    assert {r.node for r in report.ranks} == {"local0"}
    assert "not drilled: local1: could not drill" in report.headline
    assert (session.run.path / "drill.json").exists()
    assert "ended by a drill (" in summary.detail, summary.detail
    assert all(r.clean for r in session.teardown_reports.values()), summary.detail
    assert pids_with_tag(f"{session.run_id}.") == []
