"""One step for every node: each node's task, and the step's labelled stream split back into
one log and one exit file per node (ddptui/core/node/step.py)."""

from __future__ import annotations

import base64
import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from ddptui.core.node import (
    STDIN_PROGRAM,
    STEP_SHELL,
    job_helper_source,
    step_task_script,
    with_job,
)
from ddptui.core.node.each import MARK
from ddptui.core.node.step import (
    STEP_PROGRAM_ENV_MAX,
    STEP_PROGRAM_VAR,
    StepSplit,
    program_in_env,
    task_script,
)
from tests.cases import step_task


def _split(tmp_path: Path, nodes: list[str]) -> tuple[StepSplit, dict[str, Path], Path]:
    logs = {n: tmp_path / f"{i:03d}-{n}.log" for i, n in enumerate(nodes)}
    own = tmp_path / "step.log"
    fd = os.open(own, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    return StepSplit({n: str(p) for n, p in logs.items()}, nodes, fd), logs, own


def _exit(log: Path) -> str | None:
    path = Path(f"{log}.exit")
    return path.read_text().strip() if path.exists() else None


def test_each_task_lands_in_its_own_nodes_log_by_its_start_mark(tmp_path: Path) -> None:
    split, logs, own = _split(tmp_path, ["node1", "node2"])
    # Slurm's task order need not be ours: the start marks say which task runs where.
    split.feed(b"1: " + MARK + b"node node1\n0: " + MARK + b"node node2\n")
    split.feed(b"0: [ddptui:2:0]:two\n1: [ddptui:0:0]:zero\n0: a partial")
    split.feed(b" line\n1: more\n")
    assert logs["node1"].read_bytes() == b"[ddptui:0:0]:zero\nmore\n"
    assert logs["node2"].read_bytes() == b"[ddptui:2:0]:two\na partial line\n"
    assert _exit(logs["node1"]) is None and _exit(logs["node2"]) is None
    # node2's command fails (its last line unended): its log ends, its exit file says 3
    split.feed(b"0: Traceback: boom" + MARK + b"exit 3\n")
    assert logs["node2"].read_bytes().endswith(b"a partial line\nTraceback: boom")
    assert _exit(logs["node2"]) == "3" and _exit(logs["node1"]) is None
    split.feed(b"srun: error: node2: task 0: Exited with exit code 3\n1: still here\n")
    assert logs["node1"].read_bytes().endswith(b"more\nstill here\n")
    split.feed(b"1: " + MARK + b"exit -15\n")
    split.finish(143)
    assert _exit(logs["node1"]) == "-15" and _exit(logs["node2"]) == "3"
    assert b"srun: error" not in logs["node1"].read_bytes()
    assert own.read_bytes() == b""


def test_a_refused_step_fails_every_node_with_srun_s_words(tmp_path: Path) -> None:
    split, logs, own = _split(tmp_path, ["node1", "node2"])
    split.feed(b"srun: unrecognized option '--container-image=x'\n")
    split.finish(1)
    for log in logs.values():
        assert log.read_bytes() == b"srun: unrecognized option '--container-image=x'\n"
        assert _exit(log) == "1"
    assert own.read_bytes() == b"srun: unrecognized option '--container-image=x'\n"


def test_a_killed_task_gets_the_code_srun_says(tmp_path: Path) -> None:
    split, logs, _ = _split(tmp_path, ["node1", "node2"])
    split.feed(b"0: up\n1: up\nsrun: error: node2: task 1: Killed\n")
    split.feed(b"0: " + MARK + b"exit 0\n")
    split.finish(137)
    assert (_exit(logs["node1"]), _exit(logs["node2"])) == ("0", "-9")
    assert logs["node2"].read_bytes() == b"up\nsrun: error: node2: task 1: Killed\n"


@pytest.mark.parametrize(
    ("last", "code"),
    [(b"Done waiting for other agents. Elapsed: 0.02 seconds", "0"), (b"ChildFailedError", "1")],
)
def test_a_killed_task_whose_agent_ran_on_gets_the_agents_own_end(
    tmp_path: Path, last: bytes, code: str
) -> None:
    """The task's shell (the agent's parent) SIGKILLed, the agent left running to its end:
    srun's "Killed" is the shell's end, not the agent's; the agent's log says how it ended,
    and the node's log says that the exit is that reading."""
    split, logs, _ = _split(tmp_path, ["node1", "node2"])
    split.feed(b"0: up\n1: up\n1: " + last + b"\nsrun: error: node2: task 1: Killed\n")
    split.feed(b"0: " + MARK + b"exit 0\n")
    split.finish(137)
    assert (_exit(logs["node1"]), _exit(logs["node2"])) == ("0", code)
    said = logs["node2"].read_text().splitlines()
    assert said[-2:] == [
        "srun: error: node2: task 1: Killed",
        f"ddptui: the node's step task was killed and the job's command has ended: its exit, "
        f"never recorded, is taken from its log as {code}",
    ]


@pytest.mark.parametrize("shell", ["sh", "bash"])
@pytest.mark.parametrize("via_env", [True, False])
def test_the_task_runs_its_nodes_command_with_its_env_and_reports_the_exit(
    shell: str, via_env: bool
) -> None:
    script = (
        "import os, sys; print(os.environ['X'] + '|' + os.environ['DDPTUI_TAG'] + "
        f"str('{STEP_PROGRAM_VAR}' in os.environ)); sys.exit(4)"
    )
    done = step_task("node1", [sys.executable, "-c", script], shell, via_env)
    assert done.returncode == 4
    tag = f"r{os.getpid()}.0"
    said = MARK + b"node node1\n" + MARK + b"gpu 0\n" + f'it\'s "$q" `x`\n|{tag}False\n'.encode()
    assert done.stdout == said + MARK + b"proof 0\n" + MARK + b"exit 4\n"
    missing = step_task("node9", ["true"], shell)
    assert missing.returncode == 127 and b"node node9 has no command" in missing.stdout
    assert b"exit 127" in missing.stdout and b"proof" not in missing.stdout


def test_the_program_goes_in_sruns_environment_unless_too_large() -> None:
    env: dict[str, str] = {}
    assert program_in_env(b"echo hi", env) == b"" and env == {STEP_PROGRAM_VAR: "echo hi"}
    large = b"#" * (STEP_PROGRAM_ENV_MAX + 1)
    assert program_in_env(large, env := {}) == large and env == {}
    assert program_in_env(b"a\0b", env := {}) == b"a\0b" and env == {}


def test_each_node_runs_its_own_words_with_the_shared_env_and_its_own() -> None:
    script = 'import os, sys; print(sys.argv[1], os.environ["A"], os.environ["B"])'
    table = {
        "nodes": {
            node: {
                "argv": [sys.executable, "-c", script, f"--local-addr={i}"],
                "env": {"A": "shared", "B": f"own{i}", "DDPTUI_TAG": f"r.{i}"},
                "tag": f"r.{i}",
            }
            for i, node in enumerate(["node1", "node2"])
        }
    }
    port = {"source": "", "argv": []}
    program = task_script(base64.b64encode(step_task_script()).decode(), table, ["python3"], port)
    assert program.count(b"shared") == 1 and program.count(script.encode()) == 1
    for i, node in enumerate(["node1", "node2"]):
        env = {**os.environ, "SLURMD_NODENAME": node}
        done = subprocess.run(["sh", "-c", STEP_SHELL], input=program, capture_output=True, env=env)
        assert f"--local-addr={i} shared own{i}\n".encode() in done.stdout


def test_the_task_proves_its_node_only_once_no_process_carries_its_tag() -> None:
    # a child of the command outlives it a moment: the proof waits for it, and counts it
    brief = step_task("node1", ["sh", "-c", "(sleep 0.3 &); exit 3"])
    assert brief.stdout.endswith(MARK + b"proof 1\n" + MARK + b"exit 3\n")
    # one that stays (a new session, as torchrun's workers): no proof, the reap step's turn
    stays = step_task("node1", ["sh", "-c", "(setsid sleep 3 >/dev/null 2>&1 &); exit 3"])
    assert b"proof" not in stays.stdout and stays.stdout.endswith(MARK + b"exit 3\n")


def test_the_task_finds_its_interface_and_a_taken_rendezvous_port(tmp_path: Path) -> None:
    script = 'import os; print(os.environ.get("GLOO_SOCKET_IFNAME"))'
    done = step_task("node1", [sys.executable, "-c", script], ifname_for="127.0.0.1")
    assert b"\nlo\n" in done.stdout and done.returncode == 0
    with socket.socket() as held:
        held.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        refused = step_task("node1", ["true"], port_check=["127.0.0.1", port])
    assert refused.returncode == 1
    assert f"rendezvous port {port} on node1 is not available (in use by PID".encode() in (
        refused.stdout
    )
    assert refused.stdout.endswith(MARK + b"exit 1\n")


def test_a_free_port_starts_the_command_without_the_port_report(tmp_path: Path) -> None:
    # the report's command stands for the whole report: it leaves a file when it runs
    ran = tmp_path / "report-ran"
    report = ["sh", "-c", f'touch {ran}; echo "in use by a stand-in"', "report"]
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        free = probe.getsockname()[1]
    done = step_task("node1", ["echo", "started"], report=report, port_check=["127.0.0.1", free])
    assert done.returncode == 0 and b"started\n" in done.stdout and not ran.exists()
    with socket.socket() as held:  # bound, not listening: only the bind itself can tell
        held.bind(("127.0.0.1", 0))
        port = held.getsockname()[1]
        refused = step_task(
            "node1", ["echo", "started"], report=report, port_check=["127.0.0.1", port]
        )
    assert refused.returncode == 1 and ran.exists() and b"started" not in refused.stdout
    assert f"rendezvous port {port} on node1 is not available (in use by a stand-in)".encode() in (
        refused.stdout
    )


def test_a_command_that_cannot_start_says_so() -> None:
    done = step_task("node1", ["/nonexistent/torchrun", "--nnodes=2"])
    assert done.returncode == 127
    assert b"ddptui: cannot start /nonexistent/torchrun" in done.stderr


def test_each_runs_the_verb_with_this_nodes_arguments() -> None:
    source = with_job(job_helper_source(), {"nodes": {"node2": ["127.0.0.1", "0"]}})
    env = {**os.environ, "SLURMD_NODENAME": "node2"}
    done = subprocess.run(
        [sys.executable, "-S", "-c", STDIN_PROGRAM, "each", "port"],
        input=source,
        capture_output=True,
        env=env,
    )
    report = json.loads(done.stdout.decode().strip().splitlines()[-1])
    assert report["node"] == "node2" and report["addr"] == "127.0.0.1"


def test_the_split_keeps_each_nodes_proof_beside_its_log(tmp_path: Path) -> None:
    split, logs, _ = _split(tmp_path, ["node1", "node2"])
    split.feed(b"0: " + MARK + b"node node1\n1: " + MARK + b"node node2\n")
    split.feed(b"0: last words" + MARK + b"proof 2\n0: " + MARK + b"exit 143\n")
    split.feed(b"1: " + MARK + b"exit 143\n")
    split.finish(143)
    assert json.loads(Path(f"{logs['node1']}.proof").read_text())["found"] == 2
    assert logs["node1"].read_bytes() == b"last words"
    assert not Path(f"{logs['node2']}.proof").exists()  # its task gave none: the reap step's
