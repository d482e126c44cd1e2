"""dockerd for the tests: one of the suite's own for the local backend, and one per testbed
host for the SSH backend.

Why one per host: a `docker run --network=host` container joins the network namespace of the
daemon that creates it (through its containerd shim), not that of the SSH session whose client
asked. The testbed's hosts are network namespaces of one machine, so each host runs its own
dockerd, started inside the host's namespaces the way its sshd is (nsenter --net, a mount
namespace with the host's /etc/hosts, a UTS namespace named after the host: a host-network
container takes its hostname and /etc/hosts from the daemon). Every session on the host gets
DOCKER_HOST for that daemon from sshd's SetEnv (sshd.py), so the job's `docker run` and the
node helper's `docker inspect` / `docker rm -f` at teardown both reach it.

No systemd here: dockerd is started directly, with its own data root, exec root, pidfile and
socket; no bridge and no iptables (jobs use the host's network).
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path
from typing import IO, Any

from .containers import CACHE, Podman
from .namespaces import HostNamespaces

DOCKERD_FLAGS = (
    "--storage-driver", "overlay2", "--iptables=false", "--ip-masq=false", "--bridge=none",
)  # fmt: skip


def dockerd_argv(root: Path) -> list[str]:
    """dockerd keeping everything under `root`: data, exec root (containerd's state and
    socket), pidfile and its API socket."""
    return [
        "dockerd",
        "--data-root", str(root / "data"),
        "--exec-root", str(root / "exec"),
        "--pidfile", str(root / "docker.pid"),
        "-H", f"unix://{root / 'docker.sock'}",
        *DOCKERD_FLAGS,
    ]  # fmt: skip


def host_docker_root(workdir: Path, host: str) -> Path:
    """Where a testbed host's dockerd keeps its state (under the testbed's private dir)."""
    return workdir / "docker" / host


def host_docker_env(workdir: Path, host: str) -> dict[str, str]:
    """DOCKER_HOST of a testbed host's daemon, for its sshd's SetEnv."""
    return Podman(host_docker_root(workdir, host), engine="docker").env


def _require_dockerd() -> None:
    if shutil.which("dockerd") is None:
        raise RuntimeError("missing dockerd: apt-get install docker.io")


def _wait_ready(docker: Podman, proc: subprocess.Popen[Any]) -> None:
    deadline = time.monotonic() + 60
    while docker.run("info").returncode != 0:
        if proc.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"dockerd did not start: see {docker.root / 'dockerd.log'}")
        time.sleep(0.2)


def _children(pid: int) -> list[int]:
    found = []
    for name in filter(str.isdigit, os.listdir("/proc")):
        try:
            stat = Path(f"/proc/{name}/stat").read_text()
        except OSError:
            continue
        if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
            found.append(int(name))
    return found


def shims(root: Path) -> list[int]:
    """containerd shims of the daemon under `root` (`containerd-shim-runc-v2 ... -address
    ROOT/exec/containerd/containerd.sock`): each keeps a container, whatever its client did."""
    found = []
    for name in filter(str.isdigit, os.listdir("/proc")):
        try:
            args = Path(f"/proc/{name}/cmdline").read_bytes().decode(errors="replace").split("\0")
        except OSError:
            continue
        if Path(args[0]).name.startswith("containerd-shim") and any(str(root) in a for a in args):
            found.append(int(name))
    return found


def share_image(seed: Path, data: Path) -> None:
    """Give the fresh data root `data` the images of the data root `seed` without loading
    them again (a `docker load` of the 1.1 GB test image takes about a minute here): the
    image metadata (small files) is copied, and each layer's `diff` directory is a symlink
    to the seed's. Image layers are overlayfs lower directories, never written: a container
    writes to its own upper directory. Hard links would fail (a running dockerd bind-mounts
    its overlay2 directory, and links across mounts give EXDEV), and so would bind mounts in
    the daemon's mount namespace (dockerd binds its overlay2 directory onto itself without
    the mounts below it). Containers' mounts are left out."""
    shutil.copytree(
        seed / "image", data / "image", symlinks=True, ignore=shutil.ignore_patterns("mounts")
    )
    layers = data / "overlay2"
    (layers / "l").mkdir(parents=True)
    shutil.copystat(seed / "overlay2", layers)
    for cache_id in (data / "image" / "overlay2" / "layerdb" / "sha256").glob("*/cache-id"):
        layer = seed / "overlay2" / cache_id.read_text().strip()
        copy = layers / layer.name
        shutil.copytree(layer, copy, symlinks=True, ignore=shutil.ignore_patterns("diff"))
        (copy / "diff").symlink_to(layer / "diff")
        (layers / "l" / (layer / "link").read_text().strip()).symlink_to(f"../{layer.name}/diff")


class DockerDaemon:
    """The suite's own dockerd for the local backend, its state under the cache. The test
    image comes from podman's store (`podman save | docker load`) once; the data root keeps
    it between runs."""

    def __init__(self, podman: Podman, root: Path = CACHE / "docker") -> None:
        self.podman = podman
        self.root = root
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> Podman:
        _require_dockerd()
        self.root.mkdir(parents=True, exist_ok=True)
        docker = Podman(self.root, self.podman.image, engine="docker")
        _end_leftover(self.root)
        (self.root / "docker.sock").unlink(missing_ok=True)
        log = open(self.root / "dockerd.log", "ab")  # noqa: SIM115 - dockerd writes it
        self.proc = subprocess.Popen(
            dockerd_argv(self.root), stdout=log, stderr=log, stdin=subprocess.DEVNULL
        )
        _wait_ready(docker, self.proc)
        if docker.run("image", "inspect", docker.image).returncode != 0:
            save = subprocess.Popen(
                ["podman", "save", "--format", "docker-archive", self.podman.image],
                stdout=subprocess.PIPE,
                env={**os.environ, **self.podman.env},
            )
            loaded = subprocess.run(
                ["docker", "load"], stdin=save.stdout, env={**os.environ, **docker.env},
                capture_output=True, text=True, timeout=900, check=False,
            )  # fmt: skip
            save.wait(timeout=60)
            if loaded.returncode != 0:
                raise RuntimeError(f"docker load failed: {loaded.stderr[-2000:]}")
        return docker

    def stop(self) -> None:
        """SIGTERM dockerd (by PID); then the netns mount it leaves under its exec root."""
        if self.proc is None:
            return
        _stop(self.proc)
        for mount in sorted((self.root / "exec" / "netns").glob("*")):
            subprocess.run(["umount", str(mount)], capture_output=True, check=False)


def _end_leftover(root: Path) -> None:
    """A dockerd of this root left by a suite that was killed before its teardown (its
    pidfile names a live process whose command line has this root's pidfile): SIGTERM by
    PID, as its own teardown would have; a pidfile of a process gone is removed."""
    pidfile = root / "docker.pid"
    try:
        pid = int(pidfile.read_text().strip())
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except (OSError, ValueError):
        pidfile.unlink(missing_ok=True)
        return
    if str(pidfile).encode() not in cmdline:
        pidfile.unlink(missing_ok=True)  # the PID is another process's now
        return
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + 30
    while Path(f"/proc/{pid}").exists() and time.monotonic() < deadline:
        time.sleep(0.2)
    if Path(f"/proc/{pid}").exists():
        os.kill(pid, signal.SIGKILL)
    for mount in sorted((root / "exec" / "netns").glob("*")):
        subprocess.run(["umount", str(mount)], capture_output=True, check=False)
    pidfile.unlink(missing_ok=True)


def _stop(proc: subprocess.Popen[Any], *, signalled: bool = False) -> None:
    """SIGTERM (unless sent already), then SIGKILL after 30 s."""
    if not signalled:
        proc.terminate()
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=10)


class HostDockerds:
    """A dockerd in each of `hosts` of the testbed, holding the test image of `seed` (the
    local daemon's, its layers shared: see share_image). Stopped by PID; their state,
    under the testbed's dir, is removed. The daemons and their containerd count as the
    testbed's daemons, so "nothing left on the host" still means nothing of the job."""

    def __init__(self, tb: HostNamespaces, seed: Podman, hosts: Sequence[str]) -> None:
        self.tb = tb
        self.seed = seed
        self.hosts = list(hosts)
        self.procs: dict[str, subprocess.Popen[Any]] = {}
        self.pids: set[int] = set()
        self.docker: dict[str, Podman] = {}
        self._logs: list[IO[bytes]] = []

    def start(self) -> dict[str, Podman]:
        _require_dockerd()
        try:
            for host in self.hosts:
                self._spawn(host)
            for host, proc in self.procs.items():
                _wait_ready(self.docker[host], proc)
                self.pids |= {proc.pid, *_children(proc.pid)}  # dockerd, its containerd
                if self.docker[host].run("image", "inspect", self.seed.image).returncode != 0:
                    raise RuntimeError(f"{host}'s dockerd lacks {self.seed.image}")
        except BaseException:
            self.stop()
            raise
        self.tb.daemon_pids |= self.pids
        return dict(self.docker)

    def _spawn(self, host: str) -> None:
        root = host_docker_root(self.tb.workdir, host)
        shutil.rmtree(root, ignore_errors=True)
        root.mkdir(parents=True)
        share_image(self.seed.root / "data", root / "data")
        self.docker[host] = Podman(root, self.seed.image, engine="docker")
        log = open(root / "dockerd.log", "ab")  # noqa: SIM115 - dockerd writes it
        self._logs.append(log)
        named = ["unshare", "--uts", "sh", "-c", f'hostname {host} && exec "$@"', "sh"]
        proc = subprocess.Popen(
            self.tb.enter_argv(host, [*named, *dockerd_argv(root)]),
            stdin=subprocess.DEVNULL, stdout=log, stderr=log,
        )  # fmt: skip
        self.tb.track(proc, daemon=True)
        self.procs[host] = proc

    def stop(self) -> None:
        """Remove any container still there (a failed test's), stop each dockerd by PID (it
        stops its containerd), and delete its state. Its mounts lived in its own mount
        namespace and went with it."""
        for host, proc in self.procs.items():
            left = self.docker[host].run("ps", "-aq").stdout.split() if proc.poll() is None else []
            if left:
                self.docker[host].run("rm", "-f", *left)
            proc.terminate()  # all at once: each takes a second or two to stop its containerd
        for host, proc in self.procs.items():
            _stop(proc, signalled=True)
            shutil.rmtree(self.docker[host].root, ignore_errors=True)
        self.tb.daemon_pids -= self.pids | {proc.pid for proc in self.procs.values()}
        for log in self._logs:
            log.close()
        self.procs.clear()
