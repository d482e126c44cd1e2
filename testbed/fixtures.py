"""pytest fixtures for the real multi-host testbed.

Why: building namespaces + sshd takes ~0.3 s and Slurm ~0.4 s, so they are session
scoped and shared; `clean_testbed` puts things back after tests that break them.
Missing root or tools FAIL the test (never skip): CI installs everything.

Use from a conftest.py:  ``from testbed.fixtures import *  # noqa: F401,F403``
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

from .commands import TestbedError, check_prerequisites
from .containers import Podman, build_image, podman_store
from .dockerd import DockerDaemon, HostDockerds
from .netns import Testbed
from .slurm import SLURM_TOOLS, SlurmCluster
from .sshd import SSH_TOOLS
from .stale import cleanup_stale

__all__ = [
    "testbed",
    "slurm_cluster",
    "clean_testbed",
    "make_testbed",
    "podman",
    "docker",
    "host_dockers",
]

TESTBED_HOSTS = 3


def _require(*tools: str) -> None:
    try:
        check_prerequisites(("ip", "unshare", "nsenter", *tools))
    except TestbedError as e:
        pytest.fail(
            f"{e} -- the multi-host testbed needs root and: apt-get install "
            "iproute2 util-linux openssh-server openssh-client slurmctld slurmd "
            "slurm-client munge",
            pytrace=False,
        )


@pytest.fixture(scope="session")
def testbed() -> Iterator[Testbed]:
    """3 hosts (node1..node3) + head namespace, each host running a real sshd."""
    _require(*SSH_TOOLS)
    cleanup_stale()
    with Testbed(TESTBED_HOSTS, sshd=True) as tb:
        yield tb


@pytest.fixture(scope="session")
def slurm_cluster(testbed: Testbed) -> Iterator[SlurmCluster]:
    """Slurm on the same 3 hosts: slurmctld in the head ns, slurmd on node1..node3."""
    _require(*SLURM_TOOLS)
    with SlurmCluster(testbed) as cluster:
        yield cluster


@pytest.fixture
def clean_testbed(testbed: Testbed) -> Iterator[Testbed]:
    """The session testbed, reset after the test (links up, sshd up, strays killed)."""
    yield testbed
    testbed.reset()


@pytest.fixture
def make_testbed() -> Iterator[Callable[..., Testbed]]:
    """Factory for private testbeds (own namespaces/subnet), closed after the test."""
    made: list[Testbed] = []

    def make(*args: object, **kwargs: object) -> Testbed:
        _require(*SSH_TOOLS)
        tb = Testbed(*args, **kwargs).start()  # type: ignore[arg-type]
        made.append(tb)
        return tb

    yield make
    for tb in reversed(made):
        tb.close()


@pytest.fixture(scope="session")
def podman() -> Podman:
    """A private podman store holding the test image (Debian, python3, torch), built by
    scripts/build-test-image.sh on first use and kept between runs while its inputs hold."""
    try:
        return build_image(podman_store())
    except RuntimeError as e:
        pytest.fail(str(e), pytrace=False)


@pytest.fixture(scope="session")
def docker(podman: Podman) -> Iterator[Podman]:
    """A dockerd of the tests' own (no systemd here) holding the same test image."""
    daemon = DockerDaemon(podman)
    try:
        yield daemon.start()
    except RuntimeError as e:
        pytest.fail(str(e), pytrace=False)
    finally:
        daemon.stop()


@pytest.fixture(scope="module")
def host_dockers(testbed: Testbed, docker: Podman) -> Iterator[dict[str, Podman]]:
    """A dockerd inside node1 and inside node2 (each host's own namespaces), each holding the
    test image of `docker` through hard links; their sessions reach them through DOCKER_HOST."""
    daemons = HostDockerds(testbed, docker, ["node1", "node2"])
    try:
        yield daemons.start()
    except RuntimeError as e:
        pytest.fail(str(e), pytrace=False)
    finally:
        daemons.stop()
