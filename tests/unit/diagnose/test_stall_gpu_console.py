"""The console's own output of a GPU stall on 2 x H100 (NCCL), replayed in CI.

tests/data/stall/gpu_h100x2/console holds what `bench/gpu/stall.py` brought back from the
console path (`ddptui run --headless`): rank 1 skips the 5th all_reduce. `stall.jsonl`: the
hang-timeout stall, its stacks and the teardown; `watchdog.jsonl`: stall detection off, the
collectives' 20 s timeout gathering the flight recorder's dumps; each with its node's raw
dumps (`*/fr`). The captured output is checked for what the issue asks of it, and the
Monitor run here on the same node output and dumps must say the same again.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ddptui.core.diagnose.job_watch import JobWatch
from ddptui.core.diagnose.stall_events import FlightRecorderReport, StallReport
from ddptui.core.node import worker_hook

DATA = Path(__file__).resolve().parents[2] / "data" / "stall" / "gpu_h100x2" / "console"
GAP = "rank 1 never entered collective 5 (nccl:all_reduce [1048576]) of group 0"


def _events(name: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (DATA / name).read_text().splitlines()]


def test_the_console_said_the_stall_named_rank_1_and_tore_down_clean() -> None:
    events = _events("stall.jsonl")
    stalls = [e for e in events if e["event"] == "stall"]
    assert stalls[0]["groups"] == [] and stalls[0]["since_s"] <= 10 + 10  # said at once
    stall = stalls[-1]
    assert stall["suspects"] == [1] and stall["method"] == "faulthandler-signal"
    assert [g["ranks"] for g in stall["groups"]] == [[1], [0]]
    assert stall["groups"][0]["stack"][0].endswith(" in sleep_forever")
    assert stall["flight_recorder"] == [GAP]
    recorder = next(e for e in events if e["event"] == "flight_recorder")
    assert recorder["trigger"] == "teardown" and recorder["suspects"] == [1]
    teardown = next(e for e in events if e["event"] == "teardown")
    assert teardown["clean"] and teardown["gpu"]["clean"]
    summary = events[-1]
    assert summary["stopped_by"] == "operator" and not summary["failures"]
    assert {r["state"] for r in summary["ranks"]} == {"stopped"}
    assert [r["rank"] for r in summary["ranks"] if r["culprit"]] == [1]
    assert GAP in summary["detail"]


def test_the_stall_replayed_says_the_same_and_where_rank_0_waits() -> None:
    captured = [e for e in _events("stall.jsonl") if e["event"] == "stall"][-1]
    m = JobWatch(["local0"], 2)
    log = (DATA / "stall_node.log").read_bytes()
    m.feed("local0", log[: log.index(b"\n", log.index(b"skips all_reduce")) + 1], now=100.0)
    m.board.last_progress = 100.0
    m.tick(111.0, 10.0)
    report = json.loads((DATA / "stall_collect.json").read_text())
    events = m.stacks_taken({"local0": report}, now=112.0)
    stall = next(e for e in events if isinstance(e, StallReport)).to_dict()
    for key in ("suspects", "method", "deadlock", "flight_recorder"):
        assert stall[key] == captured[key], key
    assert [(g["ranks"], g["stack"]) for g in stall["groups"]] == [
        (g["ranks"], g["stack"]) for g in captured["groups"]
    ]
    # rank 0 waits on the GPU (`synchronize`), not in torch.distributed's frames: the
    # flight recorder says which collective it waits in
    assert stall["groups"][1]["collective"] == "collective 5 (nccl:all_reduce) of group 0"


def test_the_watchdog_timeout_gathered_the_dumps_and_they_name_rank_1() -> None:
    events = _events("watchdog.jsonl")
    assert not [e for e in events if e["event"] in ("stall", "stacks")]
    timed_out = [
        e for e in events if e["event"] == "rank" and "collective_timeout" in str(e["diagnoses"])
    ]
    assert timed_out and timed_out[0]["rank"] == 0
    gathered = [e for e in events if e["event"] == "flight_recorder"]
    assert [e["trigger"] for e in gathered] == ["watchdog", "teardown"]
    assert gathered[0]["collectives"] == [GAP] and gathered[0]["suspects"] == [1]
    marked = [e for e in events if e["event"] == "rank" and e["suspect"]]
    assert {e["rank"] for e in marked} == {1}
    # the raw NCCL dumps, read without torch, say the same again
    dumps = worker_hook._flight_recorder(str(DATA / "watchdog"))
    m = JobWatch(["local0"], 2)
    again = m.recorder_taken({"local0": {"ranks": [], "fr": dumps}}, "watchdog", now=1.0)
    report = again[-1]
    assert isinstance(report, FlightRecorderReport)
    expected = {k: v for k, v in gathered[0].items() if k != "ts"}
    assert {k: v for k, v in report.to_dict().items() if k != "ts"} == expected
