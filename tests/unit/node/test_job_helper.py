"""The node helper's probe, run as the console runs it: `python3 - probe [ADDR PORT]`."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from ddptui.core.node import STDIN_PROGRAM, job_helper_source, reaper_source, with_job
from ddptui.core.node.job_helper import TAG_VAR


def _probe(*args: str) -> dict[str, object]:
    cp = subprocess.run(
        [sys.executable, "-", "probe", *args],
        input=job_helper_source(),
        capture_output=True,
        check=True,
        timeout=30,
    )
    report: dict[str, object] = json.loads(cp.stdout.decode().strip().splitlines()[-1])
    return report


def test_probe_names_the_interface_of_each_address() -> None:
    report = _probe()
    assert report["ifaces"] == {**report["ifaces"], "127.0.0.1": "lo"}  # type: ignore[dict-item]
    assert "port" not in report


def test_probe_also_checks_the_rendezvous_port_when_asked() -> None:
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", 0))
        squatter.listen()
        taken = squatter.getsockname()[1]
        busy = _probe("127.0.0.1", str(taken))["port"]
    [holder] = busy.pop("holders")
    assert holder["pid"] == os.getpid()  # this test holds it
    free_now = busy.pop("free_port")
    assert isinstance(free_now, int) and free_now != taken
    said = f"in use by PID {os.getpid()} (user {holder['user']}, "
    assert busy.pop("why").startswith(said)
    assert busy.pop("error").startswith(said)
    assert busy == {"free": False, "port": taken, "addr": "127.0.0.1"}
    free = _probe("127.0.0.1", str(taken))["port"]
    assert free == {"free": True, "error": "", "port": taken, "addr": "127.0.0.1"}


AGENT = (
    "import signal, subprocess, sys, time\n"
    "signal.signal(signal.SIGTERM, lambda *_: None)  # an agent slow to shut down\n"
    "worker = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])\n"
    "print(worker.pid, flush=True)\n"
    "time.sleep(60)\n"
)


@pytest.mark.parametrize("source", [job_helper_source, reaper_source])
def test_reap_kills_an_agent_left_alone_without_waiting_out_the_grace(
    source: Callable[[], bytes],
) -> None:
    """The reap as the job helper's verb and as the reaper alone (what a teardown sends)."""
    tag = f"unit-reap-{os.getpid()}"
    agent = subprocess.Popen(
        [sys.executable, "-c", AGENT],
        env={**os.environ, TAG_VAR: tag},
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert agent.stdout is not None
        worker = int(agent.stdout.readline())
        # A 60 s grace: were the lone agent waited out, this would pass the 20 s timeout.
        cp = subprocess.run(
            [sys.executable, "-S", "-c", STDIN_PROGRAM, "reap", tag, "60"],
            input=source(),
            capture_output=True,
            check=True,
            timeout=20,
        )
        report = json.loads(cp.stdout.decode().strip().splitlines()[-1])
        names = report.pop("names")
        assert report == {"found": 2, "killed": [agent.pid], "leftover": []}
        assert names[str(agent.pid)].startswith(sys.executable)  # said by name, not only pid
        assert agent.wait(timeout=5) == -signal.SIGKILL
        assert not os.path.exists(f"/proc/{worker}") or _zombie(worker)
    finally:
        agent.kill()
        agent.wait()


def _zombie(pid: int) -> bool:
    with open(f"/proc/{pid}/stat") as f:
        return f.read().rsplit(")", 1)[1].split()[0] == "Z"


def test_a_tail_looks_often_until_output_then_backs_off_while_quiet() -> None:
    from ddptui.core.node.job_helper import POLL_MAX_S, POLL_S, _pause

    assert [_pause(n, False) for n in range(6)] == [POLL_S] * 6  # waiting for the first line
    backing_off = [_pause(n, True) for n in range(6)]
    assert backing_off[0] == POLL_S
    assert backing_off == sorted(backing_off)
    assert backing_off[-1] == POLL_MAX_S


def test_a_tail_after_a_quiet_spell_still_copies_everything(tmp_path: Path) -> None:
    """Output, silence long enough to back off, more output, the exit: all of it comes out."""
    log = tmp_path / "node.log"
    log.write_bytes(b"first\n")
    proc = subprocess.Popen(
        [sys.executable, "-S", "-", "tail", str(log), "0"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert proc.stdin is not None and proc.stdout is not None
    proc.stdin.write(job_helper_source())
    proc.stdin.close()
    assert proc.stdout.readline() == b"first\n"
    time.sleep(1.5)  # quiet: the tail now looks at most every POLL_MAX_S
    with log.open("ab") as f:
        f.write(b"second\n")
    (tmp_path / "node.log.exit").write_text("0\n")
    out = proc.stdout.read()
    assert proc.stderr is not None
    err = proc.stderr.read()
    assert proc.wait(timeout=30) == 0
    assert out == b"second\n"
    assert err.strip().splitlines()[-1] == b'{"exit": 0}'


def test_the_helper_is_one_program_that_imports_nothing_of_ddptui() -> None:
    """The node has no ddptui: the reaper is sent ahead of the helper in one program."""
    source = job_helper_source()
    compile(source, "job_helper", "exec")
    imports = [ln for ln in source.splitlines() if ln.lstrip().startswith((b"import ", b"from "))]
    assert imports and not [ln for ln in imports if b"ddptui" in ln]
    assert source.count(b"from __future__ import annotations") == 1


def _launch(tmp_path: Path, **checks: object) -> tuple[str, str]:
    """`launch` of a job that prints its socket interface variables: (start report, log)."""
    job = {
        "argv": [
            sys.executable,
            "-c",
            "import os; print(os.environ.get('GLOO_SOCKET_IFNAME'),"
            " os.environ.get('NCCL_SOCKET_IFNAME'))",
        ],
        "env": checks.pop("env", {}),
        "cwd": None,
        "prelude": "",
        "tag": f"t{os.getpid()}",
        "log": str(tmp_path / "node.log"),
        "hook": "",
        **checks,
    }
    cp = subprocess.run(
        [sys.executable, "-S", "-", "launch"],
        input=with_job(job_helper_source(), job),
        capture_output=True,
        timeout=60,
    )
    report, _, log = cp.stdout.decode().partition("\n")
    return report, log


def test_launch_points_gloo_and_nccl_at_the_interface_it_was_reached_on(tmp_path: Path) -> None:
    report, log = _launch(tmp_path, ifname_for="127.0.0.1")
    assert json.loads(report)["ifname"] == "lo"
    assert log.strip() == "lo lo"


def test_launch_keeps_an_interface_the_job_names(tmp_path: Path) -> None:
    report, log = _launch(tmp_path, ifname_for="127.0.0.1", env={"GLOO_SOCKET_IFNAME": "eth9"})
    assert log.strip() == "eth9 lo"
    no_match, log = _launch(tmp_path / "again", ifname_for="192.0.2.77")  # on no interface
    assert "ifname" not in json.loads(no_match) and log.strip() == "None None"


def test_launch_refuses_to_start_when_the_rendezvous_port_is_taken(tmp_path: Path) -> None:
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", 0))
        squatter.listen()
        taken = squatter.getsockname()[1]
        report, log = _launch(tmp_path, port_check=["127.0.0.1", taken])
    assert report.startswith("port-taken {")
    said = json.loads(report.removeprefix("port-taken "))
    assert said["port"] == taken and said["holders"][0]["pid"] == os.getpid()
    assert said["why"].startswith(f"in use by PID {os.getpid()} ")
    assert log == "" and not (tmp_path / "node.log").exists()  # nothing started
    report, log = _launch(tmp_path, port_check=["127.0.0.1", taken])
    assert json.loads(report)["pid"] > 0 and log.strip() == "None None"


def test_a_tail_forwards_the_ranks_collectives_lines_across_a_rotation(tmp_path: Path) -> None:
    """Each whole line of a rank's collectives file goes out once, marked, between log chunks;
    a file moved to .1 is read to its end before the new one is read from its start."""
    from ddptui.core.backends.gpu_stream import GpuDemux

    log = tmp_path / "node.log"
    folder = tmp_path / "node.debug" / "collectives"
    folder.mkdir(parents=True)
    rank = folder / "rank_3.jsonl"
    rank.write_bytes(b'{"rank": 3, "n": 1}\n{"rank": 3, "n": 2}\n{"rank": 3, "n"')  # half a line
    log.write_bytes(b"first\n")
    proc = subprocess.Popen(
        [sys.executable, "-S", "-", "tail", str(log), "0", "the-tag", "0"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert proc.stdin is not None and proc.stdout is not None
    proc.stdin.write(job_helper_source())
    proc.stdin.close()
    assert proc.stdout.readline() == b"first\n"
    time.sleep(2.0)  # the follower has looked once (every second)
    with rank.open("ab") as f:
        f.write(b': 3}\n{"rank": 3, "n": 4}\n')  # the half line ends, then the file rotates
    rank.rename(folder / "rank_3.jsonl.1")
    rank.write_bytes(b'{"rank": 3, "n": 5}\n')
    (folder / "rank_0.jsonl").write_bytes(b'{"rank": 0, "n": 1}\n')
    time.sleep(1.6)
    with log.open("ab") as f:
        f.write(b"second\n")
    (tmp_path / "node.log.exit").write_text("0\n")
    out = proc.stdout.read()
    assert proc.wait(timeout=30) == 0
    logged: list[bytes] = []
    records: list[dict] = []
    demux = GpuDemux(logged.append, records.append)
    demux.feed(out)
    demux.flush()
    assert b"".join(logged) == b"second\n"
    lines = [r["collectives"] for r in records]
    assert [line["n"] for line in lines if line["rank"] == 3] == [1, 2, 3, 4, 5]
    assert [line["n"] for line in lines if line["rank"] == 0] == [1]
