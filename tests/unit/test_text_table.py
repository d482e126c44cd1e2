"""Tables fitted to the terminal: history and preflight at 80 columns, full when piped."""

from __future__ import annotations

import io
import json
import os
import pty
import subprocess
import sys
from pathlib import Path

import pytest

from ddptui.cli.reports import preflight_text, print_history
from ddptui.cli.text_table import Column, fit_table, terminal_width
from ddptui.core.events import RankState, RankSummary
from ddptui.core.job.hosts import expand_hosts, host_range
from ddptui.core.job.spec import make_spec
from ddptui.core.preflight.preflight import CHECKS, CheckResult, PreflightSummary
from ddptui.core.runs.history import RunHistory
from ddptui.core.runs.run_dir import RunDir
from ddptui.core.runs.summary import RunSummary

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("DDPTUI_STATE_DIR", str(tmp_path / "state"))
    return tmp_path / "state"


def test_hosts_shorten_to_a_range_and_expand_back() -> None:
    nodes = [f"node{i:03d}" for i in range(1, 41)]
    assert host_range(nodes) == "node[001-040]"
    assert expand_hosts(host_range(nodes)) == nodes
    assert host_range(["local0", "local1"]) == "local[0-1]"
    assert host_range([]) == ""


def test_columns_are_cut_then_dropped_and_never_wrapped() -> None:
    columns = (
        Column("ID"),
        Column("NOTE", min_width=6),
        Column("EXTRA", drop=1),
        Column("STATE"),
    )
    rows = [("run-1", "a long note that goes on", "extra", "ok")]
    assert fit_table(columns, rows) == [
        "ID     NOTE                      EXTRA  STATE",
        "run-1  a long note that goes on  extra  ok",
    ]
    cut = fit_table(columns, rows, 40)
    assert cut == [
        "ID     NOTE                 EXTRA  STATE",
        "run-1  a long note that g…  extra  ok",
    ]
    dropped = fit_table(columns, rows, 24)
    assert dropped == ["ID     NOTE        STATE", "run-1  a long no…  ok"]
    assert all(len(line) <= 10 for line in fit_table(columns, rows, 10))


def _record_runs() -> list[str]:
    """Three runs as a user meets them: a 2x8 local one, 40 SSH hosts, a Slurm job."""
    history = RunHistory()
    runs = [
        ("20261126-042126-f0093f", "local", [f"local{i}" for i in range(2)], None, 8),
        ("20261126-050000-0a0b0c", "ssh", [f"node{i:03d}" for i in range(1, 41)], None, 8),
        ("20261126-060000-abcdef", "slurm", ["gpu01", "gpu02", "gpu03", "gpu04"], "4242", 4),
    ]
    for run_id, backend, hosts, job, nproc in runs:
        run = RunDir.create(run_id)
        spec = make_spec(
            script="train.py",
            backend=backend,
            profile="cpu-ddp-conda-long-name",
            nodes=len(hosts),
            nproc_per_node=nproc,
            hosts=tuple(hosts) if backend == "ssh" else (),
        )
        history.started(run, spec)
        history.update(run_id, hosts=json.dumps(hosts), slurm_job=job)
        ranks = tuple(
            RankSummary(
                r,
                hosts[r // nproc],
                r % nproc,
                RankState.FAILED if r in (3, 9) else RankState.DONE,
                1 if r in (3, 9) else 0,
                culprit=r == 3,
            )
            for r in range(len(hosts) * nproc)
        )
        history.finished(RunSummary(False, len(ranks), ranks, str(run.path), run_id, "boom"))
    return [r[0] for r in runs]


def test_history_at_80_columns_is_one_line_per_run() -> None:
    ids = _record_runs()
    out = io.StringIO()
    print_history(None, False, out, width=80)
    lines = out.getvalue().splitlines()
    assert len(lines) == 1 + len(ids) + 1  # the header, a line per run, the count
    assert all(len(line) <= 80 for line in lines), lines
    assert all(run_id in line for run_id, line in zip(reversed(ids), lines[1:], strict=False))
    # what happened (the story's lead) stays; the hosts give way (the wide table has them)
    assert "BACKEND" not in lines[0] and "WHERE" not in lines[0]
    assert "OUTCOME" in lines[0] and "RANKS" in lines[0] and lines[0].endswith("WHAT HAPPENED")
    assert all(line.rstrip().endswith("boom") for line in lines[1:-1]), lines
    assert all(" failed " in line and "done, r3" in line for line in lines[1:-1])


def test_history_piped_or_wide_is_full_width() -> None:
    _record_runs()
    out = io.StringIO()
    print_history(None, False, out, width=terminal_width(out))  # not a terminal: None
    text = out.getvalue()
    assert "node001,node002" in text and "BACKEND" in text
    assert max(len(line) for line in text.splitlines()) > 200


def _tty_run(args: list[str], columns: int) -> str:
    """`ddptui ARGS` with its stdout on a terminal `columns` wide."""
    controller, terminal = pty.openpty()
    env = {**os.environ, "COLUMNS": str(columns), "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen(
        [sys.executable, "-m", "ddptui.cli", *args],
        stdout=terminal,
        stderr=subprocess.PIPE,
        env=env,
    )
    os.close(terminal)
    chunks = []
    while True:
        try:
            data = os.read(controller, 65536)
        except OSError:
            break
        if not data:
            break
        chunks.append(data)
    proc.wait(timeout=60)
    os.close(controller)
    return b"".join(chunks).decode().replace("\r\n", "\n")


def test_ddptui_history_on_an_80_column_terminal() -> None:
    ids = _record_runs()
    fitted = _tty_run(["history"], 80).splitlines()
    assert len(fitted) == len(ids) + 2 and all(len(line) <= 80 for line in fitted), fitted
    wide = _tty_run(["history", "--wide"], 80).splitlines()
    assert len(wide) == len(ids) + 2 and "node001,node002,node003" in "\n".join(wide)
    assert max(map(len, wide)) > 80


def test_preflight_grid_at_80_columns_with_long_host_names() -> None:
    nodes = tuple(f"gpu-node-{i:03d}.cluster.example.org" for i in range(1, 33))
    results = [CheckResult(n, c, "ok", "") for n in nodes for c in CHECKS]
    summary = PreflightSummary(True, nodes, detail="32 node(s) ready")
    fitted = preflight_text(results, summary, 80)
    assert all(len(line) <= 80 for line in fitted), fitted
    grid = fitted[: 1 + len(nodes)]
    assert grid[0].split()[:3] == ["NODE", "reach", "py"]
    assert all(line.count("✓") == len(CHECKS) for line in grid[1:])
    full = preflight_text(results, summary)
    assert "reachable" in full[0] and nodes[0] in full[1]
