#!/bin/sh
# Builds the container image the test suite runs torchrun in, offline: a Debian 12 minbase
# root filesystem (debootstrap) with python3, the pinned torch wheel installed into it with
# pip --target (pip's own index and find-links, so the machine's local wheel), and a
# `torchrun` on PATH; then `podman import` of that tree.
#
#   sh scripts/build-test-image.sh [IMAGE]        (default IMAGE: localhost/ddptui-test)
#
# The image is tagged with a hash of its inputs (this script, the torch version, the
# suite and mirror) and not rebuilt while that tag exists in podman's store: set
# CONTAINERS_CONF / CONTAINERS_STORAGE_CONF to use a private store (the test suite does).
# Prints the full image name (IMAGE:HASH) on its last line. Needs root, podman, debootstrap.
set -eu
IMAGE=${1:-localhost/ddptui-test}
TORCH=${DDPTUI_IMAGE_TORCH:-torch==2.13.0}
SUITE=${DDPTUI_IMAGE_SUITE:-bookworm}
MIRROR=${DDPTUI_IMAGE_MIRROR:-http://deb.debian.org/debian}
KEY=$( (cat "$0"; echo "$TORCH $SUITE $MIRROR") | sha256sum | cut -c1-12)
NAME="$IMAGE:$KEY"

if podman image exists "$NAME"; then
    echo "$NAME"
    exit 0
fi
ROOT=$(mktemp -d "${TMPDIR:-/var/tmp}/ddptui-image.XXXXXX")
trap 'rm -rf "$ROOT"' EXIT
echo "building $NAME in $ROOT" >&2
debootstrap --variant=minbase --include=python3 "$SUITE" "$ROOT" "$MIRROR" >"$ROOT.log" 2>&1 \
    || { tail -20 "$ROOT.log" >&2; rm -f "$ROOT.log"; exit 1; }
rm -f "$ROOT.log"
python3 -m pip install -q --no-warn-script-location --target "$ROOT/usr/lib/python3/dist-packages" "$TORCH"
cat >"$ROOT/usr/local/bin/torchrun" <<'EOF'
#!/usr/bin/python3
import sys
from torch.distributed.run import main
sys.exit(main())
EOF
chmod 755 "$ROOT/usr/local/bin/torchrun"
# what pip --target put beside the packages is not for the image
rm -rf "$ROOT/usr/lib/python3/dist-packages/bin" "$ROOT/var/cache/apt/archives/"*.deb
tar -C "$ROOT" -c . | podman import --change 'CMD ["/bin/bash"]' - "$NAME" >/dev/null
echo "$NAME"
