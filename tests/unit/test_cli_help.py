"""`ddptui --help` and `ddptui run --help` end with five examples, each a command line the real
parser takes and the job flags resolve into the job it says (local, SSH, Slurm, headless,
elastic)."""

from __future__ import annotations

import argparse
import shlex
from pathlib import Path

import pytest

from ddptui.cli.jobargs import spec_from_args
from ddptui.cli.main import EXAMPLES, _parser
from ddptui.core.job.spec import JobSpec

KINDS = ("local", "SSH", "Slurm", "headless", "elastic")


def _help(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    with pytest.raises(SystemExit) as exited:
        _parser().parse_args(argv)
    assert exited.value.code == 0
    return capsys.readouterr().out


@pytest.mark.parametrize("argv", [["--help"], ["run", "--help"]], ids=["ddptui", "run"])
def test_the_help_ends_with_the_five_examples(
    argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    text = _help(argv, capsys)
    tail = text[text.rindex("examples:") :].splitlines()
    comments = [line.strip() for line in tail if line.strip().startswith("#")]
    lines = [line.strip() for line in tail if line.strip().startswith("ddptui ")]
    assert [c.split(":")[0].lstrip("# ") for c in comments] == list(KINDS)
    assert lines == [line for _, line in EXAMPLES]
    # nothing after them, and the options are still grouped as the flags declare them
    assert text.rstrip().endswith(EXAMPLES[-1][1])
    head = text[: text.rindex("examples:")]
    for group in ("job:", "ssh:", "slurm:"):
        assert f"\n{group}\n" in head, group


def _example(kind: str) -> tuple[argparse.Namespace, JobSpec]:
    line = next(line for what, line in EXAMPLES if what.startswith(f"{kind}:"))
    argv = shlex.split(line)
    assert argv[0] == "ddptui"
    args = _parser().parse_args(argv[1:])
    return args, spec_from_args(args, args.script, args.script_args)


@pytest.fixture
def no_profiles(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A working directory with the example's hostfile and no profile of anyone's."""
    monkeypatch.setenv("DDPTUI_CONFIG_DIR", str(tmp_path))
    monkeypatch.chdir(tmp_path)
    (tmp_path / "hosts.txt").write_text("node1\nnode2\n")
    return tmp_path


@pytest.mark.usefixtures("no_profiles")
def test_every_example_parses_into_the_job_it_names() -> None:
    args, spec = _example("local")
    assert (args.command, spec.backend, spec.nodes, spec.nproc_per_node) == ("run", "local", 2, 2)
    assert spec.script == "trainer/envcheck.py"

    args, spec = _example("SSH")
    assert spec.backend == "ssh"
    assert spec.hosts == ("node01", "node02", "node03", "node04")
    assert (spec.nodes, spec.nproc_per_node, spec.script_args) == (4, 8, ("--epochs", "3"))

    args, spec = _example("Slurm")
    assert (spec.backend, spec.nodes, spec.nproc_per_node) == ("slurm", 2, 4)
    assert (spec.slurm.time, spec.slurm.gres) == ("30", "gpu:4")

    args, spec = _example("headless")
    assert args.headless and not _example("local")[0].headless
    assert (spec.backend, spec.hosts) == ("ssh", ("node1", "node2"))

    args, spec = _example("elastic")
    assert (spec.min_nodes, spec.nodes, spec.spares) == (2, 3, 1)
    assert spec.hosts == ("node1", "node2", "node3", "node4")
