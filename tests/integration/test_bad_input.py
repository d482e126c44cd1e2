"""The bad-input catalogue: every input the operator can get wrong, run through the real
`ddptui` command. Each gives one line on stderr that names the input and the fix, exit 2,
nothing on stdout and no run started. A new option that can be given wrong adds its row.
"""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from testbed.netns import Testbed
from tests.integration.sshrun import run_headless

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = str(ROOT / "trainer" / "envcheck.py")
RUN = ["run", "--headless"]


@dataclass(frozen=True)
class Bad:
    argv: list[str]
    message: str  # a part of the one line; `{tmp}` stands for the test's directory
    # written under the test directory; those under bin/ are programs found first on PATH
    files: dict[str, bytes] = field(default_factory=dict)


# `nvidia-smi --list-gpus` of a 2 x H100 machine (tests/data/gpu/h100x2_first), played back
TWO_GPUS = {
    "bin/nvidia-smi": b"#!/bin/sh\n"
    b"echo 'GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-af5b2fab-eee7-f1e0-23d2-b7ff33aec7f1)'\n"
    b"echo 'GPU 1: NVIDIA H100 80GB HBM3 (UUID: GPU-97a62be1-75d7-7c32-92f1-157eb0ce6154)'\n"
}


CATALOGUE: dict[str, Bad] = {
    "hostfile not UTF-8": Bad(
        [*RUN, "--hostfile", "{tmp}/hosts", SCRIPT],
        "hostfile {tmp}/hosts is not UTF-8 text (byte 6): save it as UTF-8",
        {"hosts": b"node1\n\xff\xfenode2\n"},
    ),
    "profile file not UTF-8": Bad(
        [*RUN, "--profile", "mine"],
        "{tmp}/ddptui.toml: not UTF-8 text (byte 21): save the profile file as UTF-8",
        {"ddptui.toml": b"[profiles.mine]\nx = '\xff'\n"},
    ),
    "profile error keeps the value's case": Bad(
        [*RUN, "--profile", "mine"],
        "invalid environment variable name 'My-Var'",
        {"ddptui.toml": b'[profiles.mine]\nscript = "x.py"\nenv = { "My-Var" = "1" }\n'},
    ),
    "attach: spec.json corrupt": Bad(
        ["attach", "r1", "--headless"],
        "run r1: {tmp}/state/runs/r1/spec.json cannot be read",
        {"state/runs/r1/plan.json": b"{}", "state/runs/r1/spec.json": b"{not json"},
    ),
    "attach: plan.json corrupt": Bad(
        ["attach", "r1", "--headless"],
        "run r1: {tmp}/state/runs/r1/plan.json cannot be read",
        {
            "state/runs/r1/plan.json": b'{"run_id": 1}',
            "state/runs/r1/spec.json": b'{"script": "x"}',
        },
    ),
    "history: database corrupt": Bad(
        ["history"],
        "history database {tmp}/state/history.sqlite3 cannot be read (file is not a database):"
        " move it aside",
        {"state/history.sqlite3": b"this is not sqlite" * 100},
    ),
    "ssh_config with Port abc": Bad(
        [*RUN, "--hosts", "a", "--ssh-config", "{tmp}/cfg", SCRIPT],
        "ssh config {tmp}/cfg line 2: Port 'abc' is not a number from 1 to 65535: fix that line",
        {"cfg": b"Host *\n  Port abc\n"},
    ),
    "--ssh-config missing": Bad(
        [*RUN, "--hosts", "a", "--ssh-config", "{tmp}/nope", SCRIPT],
        "--ssh-config {tmp}/nope: no such file",
    ),
    "--launcher with an open quote": Bad(
        [*RUN, "--launcher", 'torchrun "', SCRIPT],
        "launcher: No closing quotation in 'torchrun \"' (quote words as in a shell)",
    ),
    "--python empty": Bad([*RUN, "--python", " ", SCRIPT], "python: empty command"),
    "--hosts ,": Bad([*RUN, "--hosts", ",", SCRIPT], "bad host list ',': no host names in it"),
    "--hosts node[1-": Bad([*RUN, "--hosts", "node[1-", SCRIPT], "bad host list 'node[1-'"),
    "job flags before the command": Bad(
        ["--nodes", "7", "run", SCRIPT], "--nodes must come after `run`: ddptui run ..."
    ),
    "job flags before history": Bad(["--nodes", "7", "history"], "--nodes does not apply to"),
    "--container-engine without an image": Bad(
        [*RUN, "--container-engine", "podman", SCRIPT],
        "--container-engine needs --container-image IMAGE",
    ),
    "--container-mount without an image": Bad(
        [*RUN, "--container-mount", "/a:/b", SCRIPT],
        "--container-mount needs --container-image IMAGE",
    ),
    "pyxis with ssh": Bad(
        [*RUN, "--hosts", "a", "--container-image", "i", "--container-engine", "pyxis", SCRIPT],
        "--container-engine pyxis runs containers through srun: use it with --backend slurm",
    ),
    "pyxis with local": Bad(
        [*RUN, "--container-image", "i", "--container-engine", "pyxis", SCRIPT],
        "or podman/docker with --backend local",
    ),
    "sbatch workdir with a newline": Bad(
        [
            *RUN,
            "--backend",
            "slurm",
            "--slurm-mode",
            "sbatch",
            "--workdir",
            "/x\n#SBATCH -A y",
            SCRIPT,
        ],
        "has a line break: a batch script cannot hold it",
    ),  # fmt: skip
    "--env with a bad name": Bad([*RUN, "--env", "NO-EQ", SCRIPT], "malformed --env 'NO-EQ'"),
    "--env NAME not set": Bad(
        [*RUN, "--env", "DDPTUI_TEST_UNSET", SCRIPT],
        "--env DDPTUI_TEST_UNSET: DDPTUI_TEST_UNSET is not set in this environment",
    ),
    "--secret-env with a bad name": Bad(
        [*RUN, "--secret-env", "1X", SCRIPT], "invalid environment variable name '1X'"
    ),
    "--nodes 0": Bad([*RUN, "--nodes", "0", SCRIPT], "nodes: Input should be greater than"),
    "--nodes 3:2": Bad([*RUN, "--nodes", "3:2", SCRIPT], "nodes: '3:2' needs 1 <= MIN <= MAX"),
    "--backend nope": Bad([*RUN, "--backend", "nope", SCRIPT], "unknown backend 'nope'"),
    "script missing": Bad([*RUN, "missing.py"], "script not found: missing.py"),
    "more GPUs than the machine has": Bad(  # an explicit shape: the default one is fitted
        [*RUN, "--nodes", "2", "--nproc-per-node", "2", SCRIPT],
        "the job needs 4 GPUs (2 pseudo-nodes x 2 processes), this machine has 2: use --nodes 1 "
        "--nproc-per-node 2, --nodes 2 --nproc-per-node 1, or run on the CPU with "
        "--env CUDA_VISIBLE_DEVICES=",
        TWO_GPUS,
    ),
    "more GPUs than CUDA_VISIBLE_DEVICES gives": Bad(
        [*RUN, "--nproc-per-node", "1", "--env", "CUDA_VISIBLE_DEVICES=1", SCRIPT],
        "CUDA_VISIBLE_DEVICES=1 (--env) gives it 1",
        TWO_GPUS,
    ),
}


@pytest.mark.parametrize("case", list(CATALOGUE))
def test_bad_input_is_one_line_exit_2_and_starts_nothing(tmp_path: Path, case: str) -> None:
    bad = CATALOGUE[case]
    for name, data in bad.files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_bytes(data)
        if name.startswith("bin/"):
            (tmp_path / name).chmod(0o755)
    runs = tmp_path / "state" / "runs"
    before = sorted(runs.iterdir()) if runs.is_dir() else []
    env = {k: v for k, v in os.environ.items() if k != "DDPTUI_TEST_UNSET"}
    env.update(DDPTUI_STATE_DIR=str(tmp_path / "state"), DDPTUI_CONFIG_DIR=str(tmp_path / "cfg"))
    env["PATH"] = f"{tmp_path / 'bin'}{os.pathsep}{env['PATH']}"
    env.pop("CUDA_VISIBLE_DEVICES", None)
    argv = [a.replace("{tmp}", str(tmp_path)) for a in bad.argv]
    proc = subprocess.run(
        [sys.executable, "-m", "ddptui.cli", *argv],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
        env=env,
    )
    assert proc.returncode == 2, proc.stderr
    assert proc.stdout == ""
    assert proc.stderr.startswith("ddptui: error: ") and proc.stderr.count("\n") == 1, proc.stderr
    assert bad.message.replace("{tmp}", str(tmp_path)) in proc.stderr
    assert (sorted(runs.iterdir()) if runs.is_dir() else []) == before


def test_version() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "ddptui.cli", "--version"], capture_output=True, text=True
    )
    assert proc.returncode == 0 and proc.stdout.startswith("ddptui 0.")


def test_a_script_missing_on_the_ssh_nodes_is_bad_input_read_from_where_ddptui_ran(
    clean_testbed: Testbed, tmp_path: Path
) -> None:
    """Refused on the nodes before anything starts: exit 2 and one line on stderr (besides
    the JSON), the relative path read from the directory ddptui ran in, said so."""
    state = tmp_path / "state"
    run = run_headless(clean_testbed, state, "--hosts", "node[1-2]", "nope/x.py", timeout=120)
    assert run.code == 2, (run.stderr, run.events[-3:])
    assert run.stderr.startswith("ddptui: error: ") and run.stderr.count("\n") == 1, run.stderr
    wanted = f"script {tmp_path}/nope/x.py not found on node1, node2"
    assert wanted in run.stderr, run.stderr
    assert f"a relative path is read from the directory ddptui ran from, {tmp_path}" in run.stderr
    assert wanted in run.summary["detail"]
    for host in ("node1", "node2"):
        assert not [p for p in clean_testbed.describe_pids(host) if "torchrun" in p]
