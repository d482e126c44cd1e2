#!/bin/sh
# Installs everything the test suite needs on Debian 12: the system packages behind the
# real test hosts (network namespaces, OpenSSH, Slurm, munge, tmux), podman with runc and
# debootstrap (the suite builds its container image offline: scripts/build-test-image.sh),
# docker.io (the tests start their own dockerd), chromium (the browser tests of `ddptui
# serve` drive Debian's Chromium through Playwright: Playwright's own browser download
# cannot work here), and the Python packages.
set -eu
export DEBIAN_FRONTEND=noninteractive
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends \
    iproute2 util-linux procps openssh-server openssh-client \
    slurmctld slurmd slurm-client munge tmux pdsh clustershell \
    podman runc debootstrap docker.io chromium >/dev/null
python3 -m pip install -q -e '.[test]'
