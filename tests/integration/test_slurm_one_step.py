"""Every node's torchrun in one Slurm step (a task per node), on the real Slurm testbed: the
step's one stream split back into each node's own log and exit file, a node's failure told
as that node's, and every node proven clean by one reap step."""

from __future__ import annotations

from pathlib import Path

import pytest

from testbed import SlurmCluster
from tests.integration.slurmrun import (
    NODES,
    assert_clean_teardown,
    finish,
    job_of,
    node_logs,
    start,
)
from tests.integration.sshrun import TRAINER, all_running

pytestmark = pytest.mark.integration

STEP_MARK = "\x1eddptui-step"


def test_one_step_runs_every_node_and_a_nodes_failure_stays_its_own(
    slurm_cluster: SlurmCluster, tmp_path: Path
) -> None:
    proc = start(
        slurm_cluster,
        tmp_path,
        *(str(TRAINER / "envcheck.py"), "--sleep", "60", "--fail-rank", "3", "--fail-after", "3"),
    )
    seen = all_running(proc)
    job_id = job_of(seen)
    run_id = next(e["run_id"] for e in seen if e["event"] == "plan")
    steps = slurm_cluster.run(["squeue", "-s", "-h", "-j", job_id, "-o", "%j|%N"]).stdout
    launch = [s for s in steps.split() if s.split("|")[0] in (f"ddptui-{run_id}", "")]
    assert launch == [f"ddptui-{run_id}|node[1-2]"], steps  # one step, both nodes
    assert f"ddptui-{run_id}-0" not in steps and f"ddptui-{run_id}-1" not in steps

    result = finish(proc, None)  # rank 3 fails on node2 by itself
    summary = result.summary
    assert result.code == 1 and summary["ok"] is False
    crashed = {r["rank"]: r for r in summary["ranks"]}[3]
    assert (crashed["node"], crashed["state"], crashed["exit_code"]) == ("node2", "failed", 1)
    assert "deliberate failure on rank 3" in crashed["error"]
    ended = [e for e in result.of("node") if e["exit_code"] is not None]
    assert (ended[0]["node"], ended[0]["state"], ended[0]["exit_code"]) == ("node2", "failed", 1)
    # the story's lead: the crash, its rank and its own words
    assert summary["headline"].startswith("crash: rank 3 on node2 — RuntimeError"), summary

    # each node's log: its own ranks only, no mark of the step's, and its own exit code
    logs = node_logs(summary)
    assert list(logs) == ["000-node1.log", "001-node2.log"]
    one, two = logs["000-node1.log"], logs["001-node2.log"]
    assert "[ddptui:0:0]" in one and "[ddptui:1:1]" in one and "[ddptui:2:" not in one
    assert "[ddptui:3:1]" in two and "[ddptui:0:" not in two
    assert "deliberate failure on rank 3" in two and "deliberate failure" not in one
    assert STEP_MARK not in one + two
    nodes_dir = Path(summary["run_dir"]) / "nodes"
    assert (nodes_dir / "001-node2.log.exit").read_text().strip() == "1"
    assert (nodes_dir / "000-node1.log.exit").exists()

    assert_clean_teardown(slurm_cluster, result, job_id)
    for report in result.of("teardown"):
        assert f"no process of the job left on {report['node']}" in report["detail"], report
    assert sorted(r["node"] for r in result.of("teardown")) == NODES
