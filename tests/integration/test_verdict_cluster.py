"""Why is it wrong, over SSH on the testbed (real sshd, real torchrun, gloo): a relative script
path missing on the nodes is refused before launch with the nodes named; a skipped all_reduce
stalls once and stays stalled for three minutes; a size mismatch gets one verdict."""

from __future__ import annotations

import json
import signal
import time
from pathlib import Path

import pytest

from testbed.netns import Testbed
from tests.integration.sshrun import TRAINER, popen_headless, run_headless
from tests.integration.stall_hold import HANG_TIMEOUT, HOLD_S, EventReader, assert_one_stall_held
from tests.integration.test_verdict_local import odd_size_written


def test_a_missing_relative_script_is_refused_before_launch_naming_the_nodes(
    clean_testbed: Testbed, tmp_path: Path
) -> None:
    run = run_headless(
        clean_testbed, tmp_path / "state", "--hosts", "node[1-2]", "../user_scripts/x.py",
        timeout=120,
    )  # fmt: skip
    assert run.code != 0
    summary = run.summary
    detail = summary["detail"]
    assert "user_scripts/x.py not found on node1, node2" in detail, detail
    assert "copy it to every node at the same path" in detail
    assert not run.of("rank") or all(e["state"] == "pending" for e in run.of("rank"))
    assert not [e for e in run.of("node") if e["state"] == "running"]
    for host in ("node1", "node2"):
        assert not [p for p in clean_testbed.describe_pids(host) if "torchrun" in p]


@pytest.mark.long
def test_a_skipped_all_reduce_stalls_once_and_stays_stalled_for_three_minutes(
    clean_testbed: Testbed, tmp_path: Path
) -> None:
    proc = popen_headless(
        clean_testbed, tmp_path / "state", "--hosts", "node[1-2]",
        "--hang-timeout", str(HANG_TIMEOUT), "--stacks-method", "signal",
        str(TRAINER / "hang.py"), "--skip-rank", "1", "--steps", "5",
    )  # fmt: skip
    reader = EventReader(proc)
    try:
        first = reader.until("stall", 180)
        assert first and first[-1]["event"] == "stall", first[-3:]
        time.sleep(HOLD_S)
        assert_one_stall_held(list(reader.events))
    finally:
        proc.send_signal(signal.SIGINT)
    summary = reader.to_the_end(180)[-1]
    assert summary["event"] == "summary" and summary["verdict"]["rank"] == 1


def test_a_gloo_size_mismatch_gets_one_verdict(clean_testbed: Testbed, tmp_path: Path) -> None:
    run = run_headless(
        clean_testbed, tmp_path / "state", "--hosts", "node[1-2]",
        str(TRAINER / "mismatch.py"), "--steps", "40",
    )  # fmt: skip
    final = [e for e in run.of("verdict") if e["final"]]
    assert final, [e["event"] for e in run.events][-8:]
    assert final[-1]["signature"] == "collective_mismatch"
    assert run.summary["verdict"]["signature"] == "collective_mismatch"
    mismatches = run.of("mismatch")
    assert len(mismatches) <= 1, json.dumps(mismatches)  # one per cause
    # Two ranks: gloo aborts rank 0, the receiver, before it records that all_reduce. Rank 1
    # records its odd one at its exception, most often before its agent's SIGTERM: then the
    # audit names it; else nothing shows the odd size and the verdict gives gloo's word.
    runs = clean_testbed.login_home / ".local/state/ddptui/runs" / run.summary["run_id"]
    if odd_size_written(runs, rank=1, numel=2048):
        assert mismatches, [e["event"] for e in run.events]
        assert mismatches[0]["kind"] == "size" and mismatches[0]["culprits"] == [1]
        assert final[-1]["rank"] == 1 and run.summary["verdict"]["rank"] == 1
    else:
        assert not mismatches, json.dumps(mismatches)
        assert "the odd rank may be its peer" in final[-1]["summary"]
