"""Podman for the tests: a private store and config, and the image torchrun runs in.

Why these settings (measured on a root machine without systemd, see README "Containers"):
crun fails on this cgroup layout, so runc; no systemd, so cgroupfs and a file events log;
no CAP_SYS_RESOURCE, so podman's default ulimits (raised above the hard limit) fail and are
set explicitly. One config per store: CLI flags mixed with config on one store made every
`run --rm` slow. The store lives under a cache directory so the image survives between runs;
scripts/build-test-image.sh rebuilds it only when its inputs change.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BUILD_SCRIPT = ROOT / "scripts" / "build-test-image.sh"
CACHE = Path(os.environ.get("DDPTUI_TEST_CACHE", "/var/tmp/ddptui-test"))
CONTAINER_TOOLS = ("podman", "runc", "conmon", "debootstrap")

CONTAINERS_CONF = """\
[containers]
default_ulimits = ["nofile=20000:20000", "nproc=32768:32768"]

[engine]
runtime = "runc"
cgroup_manager = "cgroupfs"
events_logger = "file"
"""

STORAGE_CONF = """\
[storage]
driver = "overlay"
graphroot = "{root}/storage"
runroot = "{root}/run"
"""


@dataclass(frozen=True)
class Podman:
    """A podman store and its config (or a docker daemon: `engine`); `env` is what the
    engine's client needs to use it."""

    root: Path
    image: str = ""
    engine: str = "podman"

    @property
    def env(self) -> dict[str, str]:
        if self.engine == "docker":
            return {"DOCKER_HOST": f"unix://{self.root / 'docker.sock'}"}
        return {
            "CONTAINERS_CONF": str(self.root / "containers.conf"),
            "CONTAINERS_STORAGE_CONF": str(self.root / "storage.conf"),
        }

    def run(self, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [self.engine, *args],
            env={**os.environ, **self.env},
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )

    def containers(self, prefix: str = "") -> dict[str, str]:
        """name -> full id of the store's containers (running or not) named `prefix...`."""
        out = self.run("ps", "-a", "--no-trunc", "--format", "{{.Names}} {{.ID}}")
        assert out.returncode == 0, out.stderr
        pairs = (line.split() for line in out.stdout.splitlines() if line.strip())
        return {name: cid for name, cid in pairs if name.startswith(prefix)}


def pids_naming(words: Iterable[str]) -> list[int]:
    """Processes whose command line has one of `words` as an argument (a container's full id
    names its conmon: `conmon ... -c ID ...`)."""
    wanted = set(words)
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            args = Path(f"/proc/{name}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if wanted & {a.decode(errors="replace") for a in args}:
            found.append(int(name))
    return found


def podman_env_words(root: Path = CACHE / "podman") -> str:
    """The store's variables as `K=V K=V`, for sshd's SetEnv on the test hosts."""
    return " ".join(f"{k}={v}" for k, v in Podman(root).env.items())


def podman_store(root: Path = CACHE / "podman") -> Podman:
    """Write the config files of a store under `root` (idempotent)."""
    missing = [t for t in CONTAINER_TOOLS if shutil.which(t) is None]
    if missing:
        raise RuntimeError(
            f"missing {', '.join(missing)}: apt-get install podman runc debootstrap "
            "(scripts/install-test-deps.sh)"
        )
    root.mkdir(parents=True, exist_ok=True)
    (root / "containers.conf").write_text(CONTAINERS_CONF)
    (root / "storage.conf").write_text(STORAGE_CONF.format(root=root))
    return Podman(root)


def build_image(store: Podman) -> Podman:
    """The test image (Debian + python3 + torch), built once per set of inputs (~2 min)."""
    result = subprocess.run(
        ["sh", str(BUILD_SCRIPT)],
        env={**os.environ, **store.env},
        capture_output=True,
        text=True,
        timeout=1200,
        check=False,
    )
    if result.returncode != 0:
        raise RuntimeError(f"{BUILD_SCRIPT.name} failed:\n{result.stderr[-3000:]}")
    return Podman(store.root, result.stdout.strip().splitlines()[-1])
