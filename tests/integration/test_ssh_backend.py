"""The SSH backend on real hosts: network namespaces, each with its own OpenSSH sshd."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from testbed.netns import Testbed
from tests.cases import TRAINER_CASES, trainer_args
from tests.integration.sshrun import (
    TRAINER,
    HeadlessRun,
    all_running,
    popen_headless,
    read_until,
    run_headless,
    state_env,
)
from tests.procs import outputs

ENGINES = ["asyncssh", "paramiko"]


def _envcheck(
    tb: Testbed, tmp_path: Path, engine: str, *flags: str, ssh_config: Path | None = None
) -> HeadlessRun:
    """envcheck.py on node1 and node2 over `engine`, `flags` given before the script."""
    return run_headless(
        tb,
        tmp_path / "state",
        "--hosts",
        "node[1-2]",
        "--ssh-engine",
        engine,
        *flags,
        str(TRAINER / "envcheck.py"),
        ssh_config=ssh_config,
    )


def _finish(proc: subprocess.Popen[str], sig: int = signal.SIGTERM) -> list[dict]:
    proc.send_signal(sig)
    out, _ = outputs(proc, 120)
    return [json.loads(line) for line in out.splitlines() if line.startswith("{")]


@pytest.mark.parametrize("engine", ENGINES)
@TRAINER_CASES
def test_two_hosts_each_trainer_green_then_done(
    testbed: Testbed, tmp_path: Path, engine: str, script: str, args: list[str], expect: str
) -> None:
    args = trainer_args(args, tmp_path)
    run = run_headless(
        testbed,
        tmp_path / "state",
        "--hosts",
        "node[1-2]",
        "--ssh-engine",
        engine,
        str(TRAINER / script),
        *args,
    )
    summary = run.summary
    assert run.code == 0, (summary, run.stderr)
    assert [r["state"] for r in summary["ranks"]] == ["done"] * 4
    states = {}
    for e in run.of("rank"):
        if e["rank"] is not None:
            states.setdefault(e["rank"], []).append(e["state"])
    assert all(s[-2:] == ["running", "done"] for s in states.values()), states
    progress = [(e["node"], e["state"]) for e in run.of("node")]
    for host in ("node1", "node2"):
        assert [s for n, s in progress if n == host][:3] == [
            "connecting",
            "authenticated",
            "waiting",
        ]
    assert all(t["clean"] for t in run.of("teardown"))
    text = "".join(p.read_text() for p in (Path(summary["run_dir"]) / "nodes").glob("*.log"))
    assert expect in text
    if script == "envcheck.py":
        assert "host=node1" in text and "host=node2" in text
    assert not testbed.wait_clean(["node1", "node2"])


@pytest.mark.parametrize("engine", ENGINES)
def test_a_slow_login_shell_is_no_lost_node(
    clean_testbed: Testbed, tmp_path: Path, engine: str
) -> None:
    """Every login reads a .bashrc that takes 12 s (a profile's conda init, module loads):
    a node's stream is silent that long before its first byte, longer than a started
    stream's silence that means a lost link (paramiko: 8 s)."""
    bashrc = clean_testbed.login_home / ".bashrc"
    bashrc.write_text("sleep 12\n")
    try:
        run = _envcheck(clean_testbed, tmp_path, engine)
    finally:
        bashrc.unlink()
    summary = run.summary
    assert run.code == 0, (summary, run.stderr)
    assert [r["state"] for r in summary["ranks"]] == ["done"] * 4
    assert not [n for n in run.of("notice") if "lost" in n["message"]], run.of("notice")
    assert all(t["clean"] for t in run.of("teardown"))


def test_three_hosts_from_a_hostlist_expression(testbed: Testbed, tmp_path: Path) -> None:
    run = run_headless(
        testbed,
        tmp_path / "state",
        "--hosts",
        "node[1-3]",
        "--nproc-per-node",
        "1",
        str(TRAINER / "envcheck.py"),
    )
    assert run.code == 0, (run.summary, run.stderr)
    assert {r["node"] for r in run.summary["ranks"]} == {"node1", "node2", "node3"}
    assert run.summary["world_size"] == 3


@pytest.mark.parametrize("engine", ENGINES)
def test_teardown_leaves_nothing_even_after_a_cut_connection(
    clean_testbed: Testbed, tmp_path: Path, engine: str
) -> None:
    tb = clean_testbed
    proc = popen_headless(
        tb,
        tmp_path / "state",
        "--hosts",
        "node[1-2]",
        "--ssh-engine",
        engine,
        "--lines",
        str(TRAINER / "envcheck.py"),
        "--sleep",
        "300",
    )
    all_running(proc)
    assert len(tb.left_on(["node2"])["node2"]) >= 3  # agent + 2 workers (+ the tail)
    tb.cut_link("node2")
    read_until(
        proc,
        lambda e: (
            e["event"] == "notice" and "node2" in e["message"] and "reconnecting" in e["message"]
        ),
    )
    tb.restore_link("node2")
    events = _finish(proc)
    teardown = {e["node"]: e for e in events if e["event"] == "teardown"}
    assert teardown["node1"]["clean"] and teardown["node2"]["clean"], teardown
    assert not tb.wait_clean(["node1", "node2"])


def test_detach_then_attach_shows_logs_then_live_lines(testbed: Testbed, tmp_path: Path) -> None:
    state = tmp_path / "state"
    run = run_headless(
        testbed,
        state,
        "--hosts",
        "node[1-2]",
        "--detach",
        str(TRAINER / "envcheck.py"),
        "--sleep",
        "300",
    )
    assert run.code == 0, (run.events[-3:], run.stderr)
    summary = run.summary
    assert summary["detached"] is True
    run_id = summary["run_id"]
    assert testbed.left_on(["node1", "node2"]).keys() == {"node1", "node2"}
    time.sleep(2)
    attach = subprocess.Popen(
        testbed.ns_argv(
            "head",
            [sys.executable, "-m", "ddptui.cli", "attach", run_id, "--headless", "--lines"],
        ),
        stdout=subprocess.PIPE,
        text=True,
        env=state_env(state),
    )
    lines: list[dict] = []
    beats: set[str] = set()
    running: set[int] = set()

    def live(e: dict) -> bool:
        """Live lines, and the grid rebuilt from both nodes' logs (each node's log is read on
        its own: one may come in later than the other's live beats)."""
        lines.append(e)
        if e["event"] == "line" and "heartbeat" in e["text"]:
            beats.add(e["text"])
        if e["event"] == "rank" and e["state"] == "running":
            running.add(e["rank"])
        return len(beats) >= 12 and running == {0, 1, 2, 3}

    read_until(attach, live)
    texts = [e["text"] for e in lines if e["event"] == "line"]
    assert any("Rendezvous complete" in t for t in texts)  # from the start of the log
    assert any("envcheck host=node2" in t for t in texts)
    assert len(beats) >= 12  # and still live
    ranks = {e["rank"] for e in lines if e["event"] == "rank" and e["state"] == "running"}
    assert ranks == {0, 1, 2, 3}  # the grid rebuilt from the logs
    events = _finish(attach)
    assert all(e["clean"] for e in events if e["event"] == "teardown")
    assert not testbed.wait_clean(["node1", "node2"])


def test_sshd_down_at_launch_is_a_clear_error(clean_testbed: Testbed, tmp_path: Path) -> None:
    assert clean_testbed.ssh is not None
    clean_testbed.ssh.stop_sshd("node2")
    run = run_headless(
        clean_testbed, tmp_path / "state", "--hosts", "node[1-2]", str(TRAINER / "envcheck.py")
    )
    assert run.code == 1
    assert (
        "node2: cannot connect: connection refused (is sshd running there?)"
        in run.summary["detail"]
    )
    assert not clean_testbed.wait_clean(["node1", "node2"])


@pytest.mark.parametrize("engine", ENGINES)
def test_unknown_host_key_is_refused_with_how_to_trust(
    testbed: Testbed, tmp_path: Path, engine: str
) -> None:
    assert testbed.ssh is not None
    known = testbed.ssh.known_hosts_without("node2")
    cfg = testbed.ssh.write_ssh_config(tmp_path / "ssh_config", known_hosts=known)
    run = _envcheck(testbed, tmp_path, engine, ssh_config=cfg)
    assert run.code == 1
    detail = run.summary["detail"]
    assert "host key of node2 is not in" in detail and "--accept-new-host-keys" in detail
    assert "node1" not in detail.split("unusable:")[1]
    before = known.read_text()
    run = _envcheck(testbed, tmp_path, engine, "--accept-new-host-keys", ssh_config=cfg)
    assert run.code == 0, run.summary
    assert known.read_text() != before  # the accepted key was recorded


@pytest.mark.parametrize("engine", ENGINES)
def test_changed_host_key_is_never_accepted(testbed: Testbed, tmp_path: Path, engine: str) -> None:
    assert testbed.ssh is not None
    known = testbed.ssh.write_known_hosts(tmp_path / "known", wrong_key=["node2"])
    cfg = testbed.ssh.write_ssh_config(tmp_path / "ssh_config", known_hosts=known)
    run = _envcheck(testbed, tmp_path, engine, "--accept-new-host-keys", ssh_config=cfg)
    detail = run.summary["detail"]
    assert run.code == 1 and "node2: REMOTE HOST IDENTIFICATION HAS CHANGED" in detail
    assert f"recorded for it in {known}:2" in detail  # where the old key is
    assert "ssh-keyscan" not in detail and "accept-new" not in detail


def test_rank_crash_shows_exit_code_and_traceback(testbed: Testbed, tmp_path: Path) -> None:
    run = run_headless(
        testbed,
        tmp_path / "state",
        "--hosts",
        "node[1-2]",
        str(TRAINER / "envcheck.py"),
        "--fail-rank",
        "2",
        "--sleep",
        "120",
    )
    assert run.code == 1
    ranks = {r["rank"]: r for r in run.summary["ranks"]}
    assert ranks[2]["state"] == "failed" and ranks[2]["exit_code"] == 1
    assert ranks[2]["traceback"][0].startswith("Traceback") and ranks[2]["error"]
    assert "rank 2" in run.summary["detail"]
    # exactly one root cause, the crash; no failure event tells a victim as the culprit
    roots = [f for f in run.summary["failures"] if f["root_cause"]]
    assert [(f["rank"], f["cause"]) for f in roots] == [(2, "exception")]
    told = [e["failure"] for e in run.of("failure") if e["failure"]["root_cause"]]
    assert {f["rank"] for f in told} <= {2}
    assert [r["rank"] for r in run.summary["ranks"] if r["culprit"]] == [2]
    assert all(t["clean"] for t in run.of("teardown"))
    assert not testbed.wait_clean(["node1", "node2"])


def test_node_killed_mid_run_stops_the_rest(clean_testbed: Testbed, tmp_path: Path) -> None:
    tb = clean_testbed
    proc = popen_headless(
        tb,
        tmp_path / "state",
        "--hosts",
        "node[1-2]",
        str(TRAINER / "envcheck.py"),
        "--sleep",
        "300",
    )
    all_running(proc)
    agents = [p for p in tb.describe_pids("node2") if "torchrun" in p]
    assert agents, tb.describe_pids("node2")
    os.kill(int(agents[0].split()[0]), signal.SIGKILL)
    out, _ = outputs(proc, 120)
    events = [json.loads(line) for line in out.splitlines()]
    nodes = [e for e in events if e["event"] == "node" and e["node"] == "node2"]
    assert nodes[-1]["state"] == "failed" and nodes[-1]["exit_code"] == -9
    assert all(t["clean"] for t in events if t["event"] == "teardown")
    assert events[-1]["ok"] is False and proc.returncode == 1
    assert not tb.wait_clean(["node1", "node2"])


def test_rendezvous_port_taken_on_first_host(testbed: Testbed, tmp_path: Path) -> None:
    squatter = testbed.exec(
        "node1",
        [
            "python3",
            "-c",
            # SO_REUSEADDR: an earlier run's rendezvous may leave TIME_WAIT sockets on this
            # port; they must not stop the squatter from listening (a listener still blocks).
            "import socket,time; s=socket.socket(); "
            "s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); "
            f"s.bind(('{testbed.host_ip('node1')}', 29400)); "
            "s.listen(); print('listening', flush=True); time.sleep(120)",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert squatter.stdout is not None
        assert squatter.stdout.readline().strip() == "listening"
        run = run_headless(
            testbed,
            tmp_path / "state",
            "--hosts",
            "node[1-2]",
            "--rdzv-port",  # given: refused (the default port would be picked again there)
            "29400",
            str(TRAINER / "envcheck.py"),
        )
    finally:
        squatter.kill()
        squatter.wait()
    assert run.code == 1
    said = f"port 29400 on node1 is in use by PID {squatter.pid} (user root, python3 -c "
    first = run.summary["detail"].splitlines()[0]  # the story's lead: the refusal, its cause
    assert first.startswith(f"refused before launch — {said}"), run.summary["detail"]
    assert run.summary["headline"] == first
    assert "choose another with --rdzv-port" in run.summary["detail"]
    # The first node's own `launch` refuses (no probe before): node2 may have started
    # meanwhile, and teardown leaves nothing of the job on either host.
    assert not testbed.wait_clean(["node1", "node2"])


def test_odd_host_names_and_arguments_are_taken_literally(testbed: Testbed, tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    script = tmp_path / "echo args.py"
    script.write_text(
        "import os, sys\nos.write(1, ('ARGS=' + repr(sys.argv[1:]) + '\\n').encode())\n"
    )
    nasty = f"a b'c\";touch {marker}"
    run = run_headless(
        testbed,
        tmp_path / "state",
        "--hosts",
        "node[1-2]",
        "--nproc-per-node",
        "1",
        str(script),
        nasty,
        "$(touch " + str(marker) + ")",
    )
    assert run.code == 0, run.summary
    text = "".join(p.read_text() for p in (Path(run.summary["run_dir"]) / "nodes").glob("*"))
    assert f"ARGS={[nasty, '$(touch ' + str(marker) + ')']!r}" in text
    bad = run_headless(
        testbed,
        tmp_path / "state",
        "--hosts",
        f"node1,node2;touch {marker}",
        str(TRAINER / "envcheck.py"),
    )
    assert bad.code != 0
    assert not marker.exists()


def test_activation_step_runs_before_torchrun(testbed: Testbed, tmp_path: Path) -> None:
    """A venv is activated on every host before torchrun: its environment reaches the ranks."""
    venv = tmp_path / "env with space"
    subprocess.run(
        [sys.executable, "-m", "venv", "--system-site-packages", "--without-pip", str(venv)],
        check=True,
    )
    script = tmp_path / "which.py"
    script.write_text(
        "import os\nos.write(1, f'VENV={os.environ.get(\"VIRTUAL_ENV\")}\\n'.encode())\n"
    )
    activate = f"source '{venv}/bin/activate'"
    run = run_headless(
        testbed,
        tmp_path / "state",
        "--hosts",
        "node[1-2]",
        "--nproc-per-node",
        "1",
        "--activate",
        activate,
        str(script),
    )
    assert run.code == 0, run.summary
    text = "".join(p.read_text() for p in (Path(run.summary["run_dir"]) / "nodes").glob("*"))
    assert text.count(f"VENV={venv}") == 2
