"""A local run left detached that ends by itself: `ddptui history` shows how it really ended."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ddptui.cli.catch_up import ask_run
from ddptui.core.backends.local import LocalBackend
from ddptui.core.runs.history import RunHistory
from tests.cases import TRAINER
from tests.procs import pids_with_tag


def _env(tmp_path: Path) -> dict[str, str]:
    return {**os.environ, "DDPTUI_STATE_DIR": str(tmp_path / "state")}


def _ddptui(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "ddptui.cli", *args],
        capture_output=True,
        text=True,
        timeout=240,
        cwd=tmp_path,
        env=_env(tmp_path),
    )


def _history(tmp_path: Path) -> dict[str, dict]:
    done = _ddptui(tmp_path, "history", "--json")
    assert done.returncode == 0, done.stderr
    return {r["id"]: r for r in map(json.loads, done.stdout.splitlines())}


def _detached_run(tmp_path: Path, *script_args: str) -> str:
    """Launch envcheck.py on 2 local pseudo-nodes x 2, headless, and detach at once."""
    done = _ddptui(
        tmp_path,
        "run",
        "--headless",
        "--detach",
        "--nodes",
        "2",
        "--nproc-per-node",
        "2",
        str(TRAINER / "envcheck.py"),
        *script_args,
    )
    events = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    summary = events[-1]
    assert summary["event"] == "summary" and summary["detached"], done.stderr[-2000:]
    return str(summary["run_id"])


def _wait_for_exit_files(run_dir: Path, nodes: int = 2, timeout: float = 180) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if len(list((run_dir / "nodes").glob("*.log.exit"))) == nodes:
            return
        time.sleep(0.5)
    raise AssertionError(f"the job did not end in {timeout} s: {run_dir}")


@pytest.fixture
def runs(tmp_path: Path):  # type: ignore[no-untyped-def]
    """The run ids launched; whatever of their jobs is left is stopped at the end."""
    launched: list[str] = []
    yield launched
    for run_id in launched:
        for pid in pids_with_tag(run_id):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


@pytest.mark.parametrize(
    ("args", "status", "ranks"),
    [
        (("--sleep", "4"), "ok", "4/4 done"),
        (("--sleep", "8", "--fail-rank", "3", "--fail-after", "3"), "failed", "r3 failed (exit 1)"),
    ],
    ids=["ok", "rank-3-fails"],
)
def test_a_detached_run_that_ended_by_itself_is_listed_with_its_outcome(
    tmp_path: Path, runs: list[str], args: tuple[str, ...], status: str, ranks: str
) -> None:
    run_id = _detached_run(tmp_path, *args)
    runs.append(run_id)
    record = _history(tmp_path)[run_id]
    assert record["status"] == "detached", record  # its job still runs: left as it is
    assert pids_with_tag(run_id), "the job should run on after the detach"
    _wait_for_exit_files(Path(record["run_dir"]))
    listed = _ddptui(tmp_path, "history")
    assert listed.returncode == 0, listed.stderr
    line = next(line for line in listed.stdout.splitlines() if line.startswith(run_id))
    assert f" {status} " in line and ranks in line, listed.stdout
    record = _history(tmp_path)[run_id]
    assert record["status"] == status and record["ended"] is not None
    assert record["detail"].startswith("finished while detached"), record
    if status == "failed":
        # which node's agent gets group rank 0 is the rendezvous' choice
        assert re.search(r"rank 3 on local[01] failed first \(exit 1\)", record["detail"])
        culprit = [r for r in record["ranks"] if r["culprit"]]
        assert [(r["rank"], r["state"], r["exit_code"]) for r in culprit] == [(3, "failed", 1)]
    else:
        assert [r["state"] for r in record["ranks"]] == ["done"] * 4
    summary = json.loads((Path(record["run_dir"]) / "summary.json").read_text())
    assert summary["detached"] is False and summary["ok"] is (status == "ok")


def test_asked_through_its_backend_a_detached_run_reads_the_same(
    tmp_path: Path, runs: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """What `history --refresh` does for SSH and Slurm runs, on a real local job: each node
    asked through its backend (the job helper's `status`: running, then its exit code),
    then, every node ended, the run attached again and read to its end."""
    monkeypatch.setenv("DDPTUI_STATE_DIR", str(tmp_path / "state"))
    run_id = _detached_run(tmp_path, "--sleep", "6", "--fail-rank", "2", "--fail-after", "2")
    runs.append(run_id)
    history = RunHistory()
    record = history.get(run_id)
    assert record is not None and record.status == "detached"
    run = record.run()
    plan, _state = run.read_plan()
    backend = LocalBackend(run.read_spec(), run, lambda event: None)

    async def ask() -> list[int | None]:
        return list(await asyncio.gather(*(backend.ended(c) for c in plan.commands)))

    assert asyncio.run(ask()) == [None, None]  # still running
    assert asyncio.run(ask_run(record, history)).startswith("still running at")
    _wait_for_exit_files(run.path)
    codes = [int(Path(f"{run.node_log(c.index, c.node)}.exit").read_text()) for c in plan.commands]
    assert asyncio.run(ask()) == codes
    assert asyncio.run(ask_run(record, history)) == ""
    settled = history.get(run_id)
    assert settled is not None and settled.status == "failed", settled
    assert re.search(r"rank 2 on local[01] failed first \(exit 1\)", settled.detail)
    assert not pids_with_tag(run_id)
