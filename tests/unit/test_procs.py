"""The tests' own process helpers: what they read of a process is all it said."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.procs import outputs

# Many long lines at once: the first readline buffers far more than the line it returns.
SAYS = "import sys\nfor i in range(400): sys.stdout.write(f'{i:04d} ' + 'x' * 300 + '\\n')\n"


def test_outputs_keeps_what_a_readline_had_buffered() -> None:
    proc = subprocess.Popen([sys.executable, "-c", SAYS], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    first = proc.stdout.readline()
    out, err = outputs(proc, 30)
    lines = [first, *out.splitlines(keepends=True)]
    assert [line[:4] for line in lines] == [f"{i:04d}" for i in range(400)]
    assert all(len(line) == 306 for line in lines) and err is None
    assert proc.returncode == 0


def test_outputs_kills_what_outlives_its_time() -> None:
    proc = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(60)"], stdout=subprocess.PIPE
    )
    with pytest.raises(subprocess.TimeoutExpired):
        outputs(proc, 0.5)
    assert proc.returncode is not None  # killed, not left behind
