"""Profiles: presets, files, `extends`, precedence (CLI > profile > defaults) and bad files."""

from __future__ import annotations

from pathlib import Path

import pytest

from ddptui.cli.jobargs import spec_from_args
from ddptui.cli.main import _parser, main
from ddptui.core.job.profiles import (
    BUILTIN,
    ProfileError,
    builtin_profiles,
    bundled_trainer,
    load_profiles,
    profile_files,
)
from ddptui.core.job.spec import SpecError

TRAINER = Path(bundled_trainer()).parent


@pytest.fixture(autouse=True)
def dirs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A private config dir and a project dir as the working directory."""
    monkeypatch.setenv("DDPTUI_CONFIG_DIR", str(tmp_path / "config"))
    monkeypatch.setenv("DDPTUI_STATE_DIR", str(tmp_path / "state"))
    project = tmp_path / "project"
    project.mkdir()
    monkeypatch.chdir(project)
    return tmp_path


def user_file(dirs: Path, text: str) -> Path:
    path = dirs / "config" / "profiles.toml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def project_file(dirs: Path, text: str) -> Path:
    path = dirs / "project" / "ddptui.toml"
    path.write_text(text)
    return path


def spec_for(*argv: str):  # type: ignore[no-untyped-def]
    args = _parser().parse_args(list(argv))
    if args.command in ("run", "preflight"):
        return spec_from_args(args, args.script, args.script_args)
    return spec_from_args(args, None, [])


def test_presets_cover_the_manual_procedures() -> None:
    presets = builtin_profiles()
    assert set(presets) >= {
        "local",
        "env-check",
        "cpu-ddp-conda",
        "cpu-ddp-container",
        "elastic-ddp",
        "cifar10-vgg",
    }
    assert all(p.source == BUILTIN and p.description for p in presets.values())
    cifar = load_profiles().resolve("cifar10-vgg").fields
    assert cifar["backend"] == "slurm" and cifar["slurm"]["launch"] == "srun"
    assert cifar["script"] == str(TRAINER / "cifar10_vgg.py")
    assert cifar["script_args"][:2] == ["--launch", "srun"]
    conda = load_profiles().resolve("cpu-ddp-conda").fields
    assert conda["script"] == str(TRAINER / "cpu_ddp.py")
    assert conda["activate"].startswith("conda activate")
    container = load_profiles().resolve("cpu-ddp-container").fields
    assert container["container"]["engine"] == "pyxis"


def test_the_default_job_is_the_local_profile() -> None:
    spec = spec_for()
    assert (spec.profile, spec.backend, spec.nodes, spec.nproc_per_node) == ("local", "local", 2, 2)
    assert spec.script == bundled_trainer()
    same = spec_for("--profile", "local")
    assert same.model_dump() == spec.model_dump()


def test_cli_flags_beat_the_profile_which_beats_the_defaults(dirs: Path) -> None:
    project_file(
        dirs,
        """
[profiles.train]
backend = "slurm"
nodes = 4
nproc_per_node = 8
script = "train.py"
script_args = ["--epochs", "3"]
env = { OMP_NUM_THREADS = "1", NCCL_DEBUG = "INFO" }
slurm = { partition = "gpu", time = "01:00:00" }
""",
    )
    spec = spec_for("--profile", "train")
    assert (spec.backend, spec.nodes, spec.nproc_per_node) == ("slurm", 4, 8)
    assert spec.script_args == ("--epochs", "3")
    assert spec.slurm.partition == "gpu" and spec.max_restarts == 0  # a default
    spec = spec_for(
        "--profile", "train", "--nodes", "2", "--time", "00:10:00", "--env", "NCCL_DEBUG=WARN"
    )
    assert (spec.nodes, spec.nproc_per_node) == (2, 8)
    assert (spec.slurm.partition, spec.slurm.time) == ("gpu", "00:10:00")  # merged key by key
    assert spec.env == {"OMP_NUM_THREADS": "1", "NCCL_DEBUG": "WARN"}
    spec = spec_for("run", "--profile", "train", "other.py", "--lr", "0.1")
    assert (spec.script, spec.script_args) == ("other.py", ("--lr", "0.1"))
    assert spec.profile == "train"


def test_project_file_beats_user_file_beats_presets(dirs: Path) -> None:
    user_file(dirs, '[profiles.local]\nnodes = 3\nscript = "{trainer}/envcheck.py"\n')
    spec = spec_for("--profile", "local")
    assert spec.nodes == 3 and spec.backend == "local"
    project_file(dirs, '[profiles.local]\nnodes = 1\nscript = "{trainer}/envcheck.py"\n')
    spec = spec_for("--profile", "local")
    assert spec.nodes == 1
    assert [p.name for p in profile_files()] == ["profiles.toml", "ddptui.toml"]


def test_project_file_is_found_from_a_subdirectory(
    dirs: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    project_file(dirs, '[profiles.mine]\nscript = "{trainer}/envcheck.py"\nnodes = 1\n')
    sub = dirs / "project" / "src" / "deep"
    sub.mkdir(parents=True)
    monkeypatch.chdir(sub)
    assert spec_for("--profile", "mine").nodes == 1


def test_a_preset_is_a_template_extends_fills_in_the_script(dirs: Path) -> None:
    user_file(
        dirs,
        """
[profiles.my-cifar]
extends = "cifar10-vgg"
script = "/home/me/cifar10_vgg.py"
slurm = { partition = "a100" }
""",
    )
    spec = spec_for("--profile", "my-cifar")
    assert spec.script == "/home/me/cifar10_vgg.py"
    assert (spec.slurm.launch, spec.slurm.gres, spec.slurm.partition) == ("srun", "gpu:4", "a100")
    assert spec.profile == "my-cifar"


def test_ssh_hosts_from_a_profile_and_from_the_command_line(dirs: Path) -> None:
    (dirs / "project" / "hosts.txt").write_text("n1 slots=4\nn2 slots=4\nn3 slots=4\n")
    project_file(
        dirs,
        """
[profiles.lab]
hostfile = "hosts.txt"
script = "train.py"

[profiles.pair]
hosts = "gpu[01-02]"
script = "train.py"
""",
    )
    lab = spec_for("--profile", "lab")
    assert (lab.backend, lab.hosts, lab.nodes, lab.nproc_per_node) == (
        "ssh",
        ("n1", "n2", "n3"),
        3,
        4,
    )
    pair = spec_for("--profile", "pair", "--hosts", "x[1-3]")
    assert (pair.hosts, pair.nodes) == (("x1", "x2", "x3"), 3)
    assert spec_for("--profile", "lab", "--nodes", "2").hosts == ("n1", "n2")


@pytest.mark.parametrize(
    ("body", "expect"),
    [
        (
            'nodez = 2\nscript = "t.py"',
            r"profile 'bad': nodez: unknown key \(did you mean 'nodes'\?\)",
        ),
        (
            'nodes = "two"\nscript = "t.py"',
            r"profile 'bad': nodes: input should be a valid integer \(got 'two'\)",
        ),
        (
            'script = "t.py"\n[profiles.bad.slurm]\npartiton = "gpu"',
            r"slurm\.partiton: unknown key \(did you mean 'partition'\?\)",
        ),
        ('script = "t.py"\nenv = { A = 1 }', r"env\.A: input should be a valid string \(got 1\)"),
        ('script = "t.py"\nnodes = 0', r"nodes: input should be greater than or equal to 1"),
        ('script = "t.py"\nhosts = 3', r"hosts: expected a host list"),
        ('script = "t.py"\nbackend = "k8s"', r"backend: input should be 'local', 'ssh' or 'slurm'"),
    ],
)
def test_a_bad_profile_names_file_field_and_reason(dirs: Path, body: str, expect: str) -> None:
    path = project_file(dirs, f"[profiles.bad]\n{body}\n")
    with pytest.raises(ProfileError, match=expect) as caught:
        load_profiles()
    assert str(caught.value).startswith(f"{path}: profile 'bad': ")


def test_missing_script_is_reported_with_file_and_field(dirs: Path) -> None:
    path = project_file(dirs, "[profiles.noscript]\nnodes = 2\n")
    with pytest.raises(ProfileError) as caught:
        spec_for("--profile", "noscript")
    assert str(caught.value).startswith(f"{path}: profile 'noscript': script: missing")
    assert spec_for("run", "--profile", "noscript", "given.py").script == "given.py"
    project_file(dirs, '[profiles.gone]\nscript = "nope.py"\n')
    with pytest.raises(ProfileError, match=r"profile 'gone': script: script not found: nope\.py"):
        spec_for("--profile", "gone")


def test_bad_files_as_the_cli_reports_them(dirs: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = project_file(dirs, "[profiles.x\nnodes = 2\n")
    assert main(["run", "--headless", "--profile", "x"]) == 2
    err = capsys.readouterr().err
    assert f"ddptui: error: {path}: not valid TOML" in err
    project_file(dirs, '[profiles.x]\nscript = "t.py"\nnproc = 2\n')
    assert main(["preflight", "--profile", "x"]) == 2
    assert f"{path}: profile 'x': nproc: unknown key" in capsys.readouterr().err
    project_file(dirs, '[profiles.x]\nscript = "t.py"\n')
    assert main(["run", "--headless", "--profile", "y"]) == 2
    assert "no profile 'y'" in capsys.readouterr().err
    project_file(dirs, 'default = "x"\n')
    with pytest.raises(ProfileError, match="default: unknown top-level key"):
        load_profiles()


def test_extends_problems(dirs: Path) -> None:
    project_file(dirs, '[profiles.a]\nextends = "b"\n[profiles.b]\nextends = "a"\n')
    with pytest.raises(ProfileError, match=r"extends: a loop \(a -> b -> a\)"):
        load_profiles().resolve("a")
    path = project_file(dirs, '[profiles.a]\nextends = "nothere"\n')
    with pytest.raises(ProfileError, match=f"{path}: profile 'a': extends: no profile 'nothere'"):
        load_profiles().resolve("a")


def test_a_profile_names_secret_variables_and_the_command_line_adds_more(dirs: Path) -> None:
    project_file(
        dirs,
        '[profiles.p]\nbackend = "slurm"\nscript = "t.py"\nsecret_env = ["RUN_LABEL"]\n'
        'env = { RUN_LABEL = "a", OTHER = "b", HF_TOKEN = "c" }\n',
    )
    spec = spec_for("run", "--profile", "p", "--secret-env", "OTHER")
    assert spec.secret_env == ("RUN_LABEL", "OTHER")
    assert spec.masked().env == {"RUN_LABEL": "***", "OTHER": "***", "HF_TOKEN": "***"}
    assert spec_for("run", "--profile", "p").masked().env["OTHER"] == "b"


def test_gpu_sampling_period_from_profile_and_command_line(dirs: Path) -> None:
    project_file(dirs, '[profiles.quiet]\nscript = "t.py"\ngpu_sample_ms = 0\n')
    (dirs / "project" / "t.py").write_text("")
    assert spec_for("run", "t.py").gpu_sample_ms == 1000  # the default: a sample a second
    assert spec_for("--profile", "quiet").gpu_sample_ms == 0
    assert spec_for("--profile", "quiet", "--gpu-sample-ms", "250").gpu_sample_ms == 250
    project_file(dirs, '[profiles.bad]\nscript = "t.py"\ngpu_sample_ms = -1\n')
    with pytest.raises(ProfileError, match=r"gpu_sample_ms: input should be greater than"):
        load_profiles()


def test_a_profiles_metric_patterns_and_the_metric_flag(dirs: Path) -> None:
    project_file(
        dirs,
        """
[profiles.lm]
script = "{trainer}/envcheck.py"
metric_patterns = { ppl = 'perplexity (\\S+)' }
""",
    )
    assert spec_for("--profile", "lm").metric_patterns == {"ppl": r"perplexity (\S+)"}
    spec = spec_for("--profile", "lm", "--metric", r"bleu=BLEU = ([\d.]+)")
    assert spec.metric_patterns == {"ppl": r"perplexity (\S+)", "bleu": r"BLEU = ([\d.]+)"}
    bad = '[profiles.lm]\nscript = "{trainer}/envcheck.py"\nmetric_patterns = { ppl = "(a)(b)" }\n'
    project_file(dirs, bad)
    with pytest.raises(ProfileError, match="'ppl': needs one group"):
        spec_for("--profile", "lm")
    with pytest.raises(SpecError, match="expected NAME=REGEX"):
        spec_for("--profile", "local", "--metric", "noequals")
