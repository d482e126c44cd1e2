"""The collector is off only during start-up: a run always collects cyclic garbage."""

from __future__ import annotations

import gc
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from ddptui.cli.gc_policy import begin_startup, end_startup
from ddptui.cli.main import main

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def _restore_gc() -> Iterator[None]:
    yield
    gc.unfreeze()
    gc.enable()


def test_startup_defers_collections_then_freezes_what_it_built() -> None:
    begin_startup()
    assert not gc.isenabled()
    built = [[] for _ in range(100)]
    end_startup()
    assert gc.isenabled()
    assert gc.get_freeze_count() >= len(built)


def test_cyclic_garbage_made_after_startup_is_collected() -> None:
    begin_startup()
    end_startup()

    class Node:
        pass

    a, b = Node(), Node()
    a.other, b.other = b, a  # type: ignore[attr-defined]
    del a, b
    assert gc.collect() >= 2


def test_the_command_leaves_the_collector_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DDPTUI_STATE_DIR", str(tmp_path))
    assert main(["history", "--limit", "1"]) == 0
    assert gc.isenabled()


def test_a_headless_run_collects_during_the_run(tmp_path: Path) -> None:
    """gc.callbacks see collections while the job runs, not only at exit."""
    code = (
        "import gc, sys\n"
        "from ddptui.cli.main import main\n"
        "seen = []\n"
        "gc.callbacks.append(lambda phase, info: seen.append(phase))\n"
        "import ddptui.core.session.session as s\n"
        "real = s.Session.run_job\n"
        "async def run_job(self):\n"
        "    for _ in range(3000): x = []; x.append(x)\n"
        "    return await real(self)\n"
        "s.Session.run_job = run_job\n"
        "rc = main(['run', '--headless', '--nodes', '1', '--nproc-per-node', '1', "
        f"'--launcher', 'true', {str(tmp_path / 'x.py')!r}])\n"
        "print('collections', len(seen))\n"
    )
    (tmp_path / "x.py").write_text("")
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(ROOT), "DDPTUI_STATE_DIR": str(tmp_path / "state")},
    )
    line = [x for x in out.stdout.splitlines() if x.startswith("collections")]
    assert line, out.stderr[-2000:]
    assert int(line[0].split()[1]) > 0
