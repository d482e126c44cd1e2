"""Secret values: one module decides what is secret; nothing ddptui shows or writes holds them."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from ddptui.core.backends.slurm.batch_script import batch_script, secret_file
from ddptui.core.job.plan import NodeTarget, build_plan
from ddptui.core.job.secret_env import MASK, StreamScrubber, is_secret, mask_env, unmask_env
from ddptui.core.job.spec import JobSpec, SpecError, make_spec
from ddptui.core.node import job_helper_source, with_job
from ddptui.core.runs.history import RunHistory
from ddptui.core.runs.run_dir import RunDir

TOKEN = "hf_s3cr3t-VALUE"
NODES = [NodeTarget("n1", "10.0.0.1"), NodeTarget("n2", "10.0.0.2")]


def _spec(**fields: object) -> JobSpec:
    base: dict[str, object] = {
        "script": "train.py",
        "env": {"HF_TOKEN": TOKEN, "LR": "0.1", "MY_VAR": "plain-but-private"},
        "secret_env": ("MY_VAR",),
    }
    return make_spec(**{**base, **fields})


@pytest.mark.parametrize(
    "name",
    ["HF_TOKEN", "WANDB_API_KEY", "AWS_SECRET_ACCESS_KEY", "DB_PASSWORD", "PGPASSWD",
     "GOOGLE_APPLICATION_CREDENTIALS", "api_key"],
)  # fmt: skip
def test_names_that_say_secret_are_secret(name: str) -> None:
    assert is_secret(name)


def test_other_names_are_secret_only_when_listed() -> None:
    assert not is_secret("LR")
    assert is_secret("MY_VAR", ["MY_VAR"])
    assert mask_env({"LR": "1", "HF_TOKEN": "x", "MY_VAR": "y"}, ["MY_VAR"]) == {
        "LR": "1",
        "HF_TOKEN": MASK,
        "MY_VAR": MASK,
    }


def test_an_edited_masked_value_keeps_the_real_one() -> None:
    real = {"HF_TOKEN": TOKEN, "LR": "1"}
    assert unmask_env({"HF_TOKEN": MASK, "LR": "2"}, real) == {"HF_TOKEN": TOKEN, "LR": "2"}
    assert unmask_env({"HF_TOKEN": "new"}, real) == {"HF_TOKEN": "new"}


def test_a_value_split_across_chunks_is_still_masked() -> None:
    scrubber = StreamScrubber([TOKEN])
    text = f"token={TOKEN} again {TOKEN}\n".encode()
    for cut in range(1, len(text)):
        scrubber = StreamScrubber([TOKEN])
        out = scrubber.feed(text[:cut]) + scrubber.feed(text[cut:]) + scrubber.flush()
        assert out == f"token={MASK} again {MASK}\n".encode(), cut
    plain = StreamScrubber([TOKEN])
    assert plain.feed(b"hf_s") == b""  # could be the start of the value: held back
    assert plain.feed(b"oup\n") == b"hf_soup\n"


def test_the_plan_shows_masks_but_the_node_gets_the_value() -> None:
    plan = build_plan(_spec(), NODES, "r1", 29400)
    command = plan.commands[0]
    assert command.env["HF_TOKEN"] == TOKEN and command.env["MY_VAR"] == "plain-but-private"
    line = command.shell_line()
    assert TOKEN not in line and "plain-but-private" not in line
    assert f"HF_TOKEN='{MASK}'" in line and "LR=0.1" in line
    assert TOKEN not in json.dumps(plan.to_dict())


def test_the_batch_script_sources_the_secrets_from_a_private_file() -> None:
    spec = _spec(backend="slurm", slurm={"mode": "sbatch"})
    script = batch_script(spec, "r1", "/shared/runs/r1", 29400)
    assert TOKEN not in script and "plain-but-private" not in script
    assert 'set -a; . "$run_dir/secret.env"; set +a' in script
    assert "export LR=0.1" in script
    sourced = secret_file(spec)
    assert sourced is not None
    assert f"export HF_TOKEN={TOKEN}" in sourced and "export MY_VAR=plain-but-private" in sourced
    assert "LR" not in sourced
    assert secret_file(_spec(env={"LR": "1"}, secret_env=())) is None


def test_batch_script_paths_are_quoted_and_cannot_inject_lines() -> None:
    spec = _spec(backend="slurm", workdir="/shared/my project", slurm={"mode": "sbatch"})
    lines = batch_script(spec, "r1", "/shared/runs dir/r1", 29400).splitlines()
    assert "#SBATCH '--output=/shared/runs dir/r1/slurm-%j.out'" in lines
    assert "#SBATCH '--chdir=/shared/my project'" in lines
    evil = _spec(backend="slurm", workdir="/x\n#SBATCH --uid=0", slurm={"mode": "sbatch"})
    with pytest.raises(SpecError, match="line break"):
        batch_script(evil, "r1", "/shared/runs/r1", 29400)


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_run_directory_and_history_are_private(tmp_path: Path) -> None:
    run = RunDir.create("r1", tmp_path / "state" / "runs")
    spec = _spec()
    run.write_spec(spec)
    run.write_plan(build_plan(spec, NODES, "r1", 29400), {"backend": "ssh"})
    run.write_summary({})
    history = RunHistory(tmp_path / "state" / "history.sqlite3")
    history.started(run, spec)
    for path in [tmp_path / "state", tmp_path / "state" / "runs", run.path, run.nodes_dir]:
        assert _mode(path) == 0o700, path
    for path in [p for p in (tmp_path / "state").rglob("*") if p.is_file()]:
        assert _mode(path) == 0o600, path
        assert TOKEN not in path.read_bytes().decode(errors="replace"), path
    assert run.read_spec().env["HF_TOKEN"] == MASK


def test_the_job_reaches_the_helper_on_stdin_not_argv(tmp_path: Path) -> None:
    """`start` takes no argument: the job is in the program itself, sent on stdin."""
    log = tmp_path / "runs" / "r1" / "nodes" / "000-n.log"
    probe = "import os, sys; print(len(os.environ['HF_TOKEN'])); print(sys.argv)"
    job = {
        "argv": [sys.executable, "-c", probe],
        "env": {"HF_TOKEN": TOKEN},
        "cwd": None,
        "prelude": None,
        "tag": f"unit-secret-{os.getpid()}",
        "log": str(log),
    }
    program = with_job(job_helper_source(), job)
    argv = [sys.executable, "-", "start"]
    done = subprocess.run(argv, input=program, capture_output=True, check=True, timeout=30)
    assert b'"pid"' in done.stdout
    subprocess.run(
        [sys.executable, "-", "tail", str(log), "0"],
        input=job_helper_source(),
        capture_output=True,
        check=True,
        timeout=30,
    )
    assert log.read_text().splitlines()[0] == str(len(TOKEN))
    assert _mode(log) == 0o600 and _mode(log.parent) == 0o700
    assert _mode(Path(str(log) + ".exit")) == 0o600
    with pytest.raises(ValueError, match="JOB line"):
        with_job(b"print(1)\n", job)


def test_a_saved_job_runs_again_only_with_its_secret_given_again() -> None:
    saved = _spec().masked()
    assert saved.env["HF_TOKEN"] == MASK
    again = saved.unmasked({"HF_TOKEN": TOKEN, "MY_VAR": "v"})
    assert again.env == {"HF_TOKEN": TOKEN, "LR": "0.1", "MY_VAR": "v"}
    with pytest.raises(SpecError, match="export HF_TOKEN and run it again"):
        saved.unmasked({"MY_VAR": "v"})
    assert _spec().unmasked({}) == _spec()  # nothing masked: nothing asked
