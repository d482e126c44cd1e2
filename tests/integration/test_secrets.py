"""A job with a secret, on the SSH testbed and on the local backend: the value reaches the
ranks' environment and nothing else (files on the console host and the nodes, stdout, any
process's command line)."""

from __future__ import annotations

import hashlib
import json
import os
import stat
import subprocess
import sys
import time
from pathlib import Path

from testbed.netns import Testbed
from tests.integration.sshrun import ddptui_argv, state_env
from tests.procs import outputs

SECRET = "hf_" + hashlib.sha256(str(os.getpid()).encode()).hexdigest()[:24]
ALSO_SECRET = "plain-named-" + SECRET[-8:]  # secret only through --secret-env
NUL = bytes(1)
DIGEST = hashlib.sha256(SECRET.encode()).hexdigest()[:12]

# Prints a digest of the value (proof it arrived), never the value; runs long enough for the
# command lines of every process of the job to be read while they run.
SCRIPT = """\
import hashlib, os, time
token = os.environ["HF_TOKEN"]
assert os.environ["RUN_LABEL"] == "{also}"
digest = hashlib.sha256(token.encode()).hexdigest()[:12]
os.write(1, f"[RANK {{os.environ['RANK']}}] token digest {{digest}}\\n".encode())
time.sleep(4)
"""


def _script(tmp_path: Path) -> Path:
    path = tmp_path / "secret_job.py"
    path.write_text(SCRIPT.format(also=ALSO_SECRET))
    return path


def _job_args(script: Path) -> list[str]:
    """The values come from the console's environment (`--env NAME`): on its command line
    they would be in /proc/PID/cmdline before ddptui could do anything about it."""
    return [
        "--env",
        "HF_TOKEN",
        "--env",
        "RUN_LABEL",
        "--secret-env",
        "RUN_LABEL",
        "--lines",
        str(script),
    ]


def _cmdlines_with(values: list[bytes]) -> list[str]:
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/cmdline", "rb") as f:
                cmdline = f.read()
        except OSError:
            continue
        if any(v in cmdline for v in values):
            found.append(f"{name}: {cmdline.replace(NUL, b' ')!r}")
    return found


def _watch(argv: list[str], env: dict[str, str], cwd: Path) -> tuple[int, str, str, list[str]]:
    """Run the console to its end, reading every process's command line meanwhile."""
    values = [SECRET.encode(), ALSO_SECRET.encode()]
    leaks: list[str] = []
    with subprocess.Popen(
        argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, cwd=cwd
    ) as proc:
        deadline = time.monotonic() + 240
        while proc.poll() is None and time.monotonic() < deadline:
            leaks += _cmdlines_with(values)
            time.sleep(0.05)
        out, err = outputs(proc, 60)
    return proc.returncode, out.decode(), err.decode(), leaks


def _check_files(root: Path) -> None:
    """Every file under `root` is 0600 in 0700 directories, and holds neither value."""
    assert root.is_dir(), root
    for path in [root, *root.rglob("*")]:
        mode = stat.S_IMODE(path.lstat().st_mode)
        if path.is_dir():
            assert mode == 0o700, f"{path}: {oct(mode)}"
            continue
        assert mode == 0o600, f"{path}: {oct(mode)}"
        data = path.read_bytes()
        assert SECRET.encode() not in data and ALSO_SECRET.encode() not in data, path


def _check_output(code: int, out: str, err: str, leaks: list[str]) -> None:
    assert code == 0, (out[-2000:], err[-2000:])
    assert not leaks, leaks
    assert SECRET not in out + err and ALSO_SECRET not in out + err
    events = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    lines = [e["text"] for e in events if e["event"] == "line"]
    assert sum(f"token digest {DIGEST}" in t for t in lines) == 4, lines[-20:]
    plan = next(e for e in events if e["event"] == "plan")
    assert all(
        "HF_TOKEN='***'" in line and "RUN_LABEL='***'" in line for _, line in plan["commands"]
    )


def test_ssh_job_keeps_its_secret(testbed: Testbed, tmp_path: Path) -> None:
    state = tmp_path / "state"
    argv = ddptui_argv(
        testbed, "run", "--headless", "--backend", "ssh", "--hosts", "node[1-2]",
        *_job_args(_script(tmp_path)),
    )  # fmt: skip
    env = {**state_env(state), "HF_TOKEN": SECRET, "RUN_LABEL": ALSO_SECRET}
    code, out, err, leaks = _watch(argv, env, tmp_path)
    _check_output(code, out, err, leaks)
    _check_files(state)
    run_id = json.loads(out.splitlines()[-1])["run_id"]
    # The nodes keep their logs under the login user's state dir (the hosts share this disk).
    _check_files(testbed.login_home / ".local/state/ddptui/runs" / run_id)


def test_local_job_keeps_its_secret(tmp_path: Path) -> None:
    state = tmp_path / "state"
    argv = [
        sys.executable,
        "-m",
        "ddptui.cli",
        "run",
        "--headless",
        *_job_args(_script(tmp_path)),
    ]
    env = {**os.environ, "DDPTUI_STATE_DIR": str(state), "HF_TOKEN": SECRET}
    env["RUN_LABEL"] = ALSO_SECRET
    code, out, err, leaks = _watch(argv, env, tmp_path)
    _check_output(code, out, err, leaks)
    _check_files(state)
