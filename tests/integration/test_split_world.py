"""A node pointed at its own rendezvous is named within seconds, as a launch failure: on real
hosts (network namespaces, real sshd, real torchrun), node2's command rewritten by its
environment's activation line (`--activate`, run before torchrun on every node) so that its
--rdzv_endpoint is its own address, as a `localhost` fallback or a wrong endpoint would.
Without the check, every node waits for the others until torchrun's join timeout.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from testbed.netns import Testbed
from tests.cases import TRAINER
from tests.integration.sshrun import run_headless

pytestmark = pytest.mark.integration

NAMED_WITHIN_S = 30.0  # from the plan to the failure; about 2 s on an idle machine


def _point_at_itself(host: str, address: str) -> str:
    """A shell line that, on `host` only, rewrites torchrun's --rdzv_endpoint to `address`."""
    return (
        f'if [ "$(hostname)" = {host} ]; then for a do shift; case "$a" in '
        f'--rdzv_endpoint=*) a="--rdzv_endpoint={address}:${{a##*:}}";; esac; '
        'set -- "$@" "$a"; done; fi'
    )


def test_a_node_pointed_at_its_own_rendezvous_is_named_within_seconds(
    clean_testbed: Testbed, tmp_path: Path
) -> None:
    tb = clean_testbed
    started = time.monotonic()
    run = run_headless(
        tb,
        tmp_path / "state",
        "--hosts",
        "node[1-3]",
        "--nproc-per-node",
        "1",
        "--activate",
        _point_at_itself("node2", tb.host_ip("node2")),
        str(TRAINER / "envcheck.py"),
        timeout=180,
    )
    took = time.monotonic() - started
    assert run.code != 0
    detail = run.summary["detail"]
    # the story's lead: the launch failed, in the world check's words
    said = "launch failed — node2 was started for another rendezvous: its agent asked "
    assert detail.startswith(said), detail
    assert run.summary["headline"] == detail.splitlines()[0]
    assert f"{tb.host_ip('node2')}:" in detail and "on node1" in detail
    [failure] = [e["failure"] for e in run.of("failure") if e["failure"]["cause"] == "split_world"]
    assert failure["node"] == "node2" and failure["root_cause"]
    plan_ts = run.of("plan")[0]["ts"]
    [said] = [e for e in run.of("notice") if e["message"].startswith("launch failed (split_world)")]
    assert said["ts"] - plan_ts < NAMED_WITHIN_S, said["ts"] - plan_ts
    assert all(e["clean"] for e in run.of("teardown")) and len(run.of("teardown")) == 3
    assert took < 120  # not torchrun's 15-minute join timeout
