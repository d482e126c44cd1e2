"""A stall over SSH as an unprivileged user: the console, the remote logins and so the jobs
all run as `ddpuser` (a user of the testbed's own, testbed/users.py), on nodes whose
kernel says Yama restricts ptrace (`ptrace_scope` 1, the usual default; this machine's
kernel has no Yama, so the testbed makes /proc/sys/kernel say so in its namespaces). With
the default stacks method (auto) the collector sees ptrace refused, does not try py-spy,
and takes the stacks the way that needs no ptrace. The all-stop hang is a stall naming the
sleeping rank; the teardown stops every rank (stopped, not failed), leaving nothing."""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path

import pytest

from testbed.netns import Testbed
from testbed.processes import cmdline
from testbed.users import PlainUser
from tests.cases import ROOT
from tests.integration.sshrun import TRAINER, read_until, sleep_line
from tests.procs import outputs

TIMEOUT = 6
HANG = [str(TRAINER / "hang.py"), "--sleep-rank", "1"]


@pytest.fixture
def user_testbed(make_testbed: Callable[..., Testbed]) -> Testbed:
    return make_testbed(2, sshd=True, user=True)


def _client_config(tb: Testbed, user: PlainUser) -> Path:
    """The user's own ssh config, key and known_hosts, in its home, logging in as itself."""
    assert tb.ssh is not None
    ssh = user.home / ".ssh"
    ssh.mkdir(exist_ok=True)
    user.own(ssh, 0o700)
    key = user.own(Path(shutil.copy(tb.ssh.client_key, ssh / "id_ed25519")), 0o600)
    known = user.own(Path(shutil.copy(tb.ssh.known_hosts, ssh / "known_hosts")), 0o644)
    text = tb.ssh.ssh_config.read_text()
    text = text.replace("User root", f"User {user.name}")
    text = text.replace(str(tb.ssh.client_key), str(key))
    text = text.replace(str(tb.ssh.known_hosts), str(known))
    config = ssh / "config"
    config.write_text(text)
    return user.own(config, 0o600)


def _uid(pid: int) -> int:
    status = Path(f"/proc/{pid}/status").read_text()
    return int(next(line for line in status.splitlines() if line.startswith("Uid:")).split()[1])


def _pids(tb: Testbed, where: str, word: str) -> list[int]:
    return [pid for pid in tb.pids_in(where) if word in cmdline(pid)]


def test_ssh_stall_as_a_plain_user_with_stacks_taken_without_ptrace(
    user_testbed: Testbed,
) -> None:
    tb, user = user_testbed, user_testbed.user
    assert user is not None
    config = _client_config(tb, user)
    console = [sys.executable, "-m", "ddptui.cli", "run", "--headless", "--backend", "ssh"]
    console += ["--ssh-config", str(config), "--hosts", "node[1-2]"]
    console += ["--hang-timeout", str(TIMEOUT), *HANG]  # the stacks method: auto
    env = {"DDPTUI_STATE_DIR": str(user.home / "state"), "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen(
        tb.enter_argv("head", user.as_user(console, **env)),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=user.home,
    )
    stop = threading.Timer(150, proc.send_signal, [signal.SIGINT])
    stop.start()
    try:
        events = read_until(
            proc, lambda e: e["event"] == "summary" or (e["event"] == "stall" and e["groups"])
        )
        # while it hangs: the console and every worker run as the user, none as root
        workers = [pid for host in ("node1", "node2") for pid in _pids(tb, host, "hang.py")]
        owners = {_uid(pid) for pid in [*workers, *_pids(tb, "head", "ddptui.cli")]}
    finally:
        stop.cancel()
    shown = [e for e in events if e["event"] != "rank"][-6:]
    assert events and events[-1]["event"] == "stall", (shown, proc.stderr and proc.poll())
    assert workers and owners == {user.uid}
    stall = events[-1]
    assert stall["since_s"] <= TIMEOUT + 10
    assert stall["suspects"] == [1] and stall["method"] == "faulthandler-signal"
    assert stall["groups"][0]["ranks"] == [1]
    assert stall["groups"][0]["stack"][0].endswith(
        f"hang.py:{sleep_line(Path(HANG[0]))} in sleep_forever"
    )
    stacks = next(e for e in events if e["event"] == "stacks")
    assert stacks["method"] == "faulthandler-signal" and not stacks["problems"]
    assert stacks["pyspy"] == ["ptrace refused (not root, Yama ptrace_scope=1)"]
    assert {r[1] for r in stacks["ranks"]} == {"node1", "node2"}
    proc.send_signal(signal.SIGINT)
    out, err = outputs(proc, 180)
    rest = [json.loads(line) for line in out.splitlines()]
    summary = rest[-1]
    assert summary["event"] == "summary", err[-2000:]
    assert summary["stopped_by"] == "operator" and summary["stall"]["suspects"] == [1]
    assert {r["state"] for r in summary["ranks"]} == {"stopped"} and not summary["failures"]
    causes = {r["rank"]: r["cause"] for r in summary["ranks"]}
    assert causes[1] == "stall_suspect"
    assert summary["flight_recorder"]["suspects"] == [1]  # gathered at the teardown, as the user
    assert all(t["clean"] for t in rest if t["event"] == "teardown")
    for host in ("node1", "node2"):
        assert not _pids(tb, host, "python"), tb.describe_pids(host)
    runs = list((user.home / "state" / "runs").iterdir())
    assert len(runs) == 1 and runs[0].stat().st_uid == user.uid
