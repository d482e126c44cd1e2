"""`ddptui serve`'s pieces that need no browser: the console's argv, the control lock."""

from __future__ import annotations

import sys
from pathlib import Path

from ddptui.cli.serve import ServeOptions, newest_run, serve_notes, viewer_argv
from ddptui.cli.view import take_control
from ddptui.core.job.plan import NodeTarget, build_plan
from ddptui.core.job.spec import make_spec
from ddptui.core.runs.run_dir import RunDir


def _run(root: Path, run_id: str, backend: str = "local") -> RunDir:
    hosts = {"hosts": ("a", "b")} if backend == "ssh" else {}
    spec = make_spec(backend=backend, nodes=2, nproc_per_node=1, script="x.py", **hosts)
    plan = build_plan(spec, [NodeTarget(n, "127.0.0.1") for n in ("a", "b")], run_id, 29400)
    run = RunDir.create(run_id, root=root)
    run.write_spec(spec)
    run.write_plan(plan, {})
    return run


def test_the_console_a_tab_runs_is_an_argv_of_this_python_and_the_run(tmp_path: Path) -> None:
    run = _run(tmp_path, "20260101-000000-aaaaaa")
    argv = viewer_argv(run, allow_control=False)
    assert argv == [sys.executable, "-m", "ddptui.cli.view", str(run.path.resolve())]
    assert viewer_argv(run, allow_control=True)[-1] == "--control"


def test_newest_run_by_its_start_time(tmp_path: Path) -> None:
    _run(tmp_path, "20260101-000000-aaaaaa")
    newest = _run(tmp_path, "20260102-000000-bbbbbb")
    (tmp_path / "20260103-not-a-run").mkdir()
    assert newest_run(tmp_path).path == newest.path


def test_one_console_at_a_time_holds_control(tmp_path: Path) -> None:
    run = _run(tmp_path, "20260101-000000-aaaaaa")
    first = take_control(run.path)
    assert first is not None
    assert take_control(run.path) is None
    assert (run.path / "control.lock").stat().st_mode & 0o077 == 0
    first.close()
    again = take_control(run.path)
    assert again is not None
    again.close()


def test_notes_for_listening_beyond_loopback_and_a_remote_run(tmp_path: Path) -> None:
    local = _run(tmp_path, "20260101-000000-aaaaaa")
    assert serve_notes(ServeOptions(local)) == []
    assert "reachable beyond this machine" in serve_notes(ServeOptions(local, host="0.0.0.0"))[0]
    remote = _run(tmp_path, "20260101-000000-bbbbbb", backend="ssh")
    assert "ddptui attach 20260101-000000-bbbbbb" in serve_notes(ServeOptions(remote))[0]
