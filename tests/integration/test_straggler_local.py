"""Stragglers found from the collectives the worker hook samples, with real torchrun (gloo).

The job is a plain DDP loop (tests/data/straggler/slow_rank_ddp.py) in which chosen ranks
sleep 50% longer a step (their step about 45% longer: the model's compute is the same);
its step rates are all equal. The session does not read the
hook's records yet, so the test reads them from each node's debug directory in the run
directory and scores them, round after round, as the console will. The last second or
two of a run is not in them (the sampler's last read before the ranks exit), nor are the
job's first collectives (DDP's broadcasts, outside the step's pattern).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from ddptui.core.diagnose.collectives import CollectiveTimeline, StepTimes, read_samples
from ddptui.core.diagnose.straggler import StragglerResult, StragglerScorer
from tests.procs import pids_with_tag

SCRIPT = Path(__file__).resolve().parents[1] / "data" / "straggler" / "slow_rank_ddp.py"


def _run(tmp_path: Path, *args: str) -> tuple[dict, list[StepTimes], dict[int, str]]:
    """Run the job (2 pseudo-nodes x 2 ranks) to its end; its steps and each rank's node."""
    env = {**os.environ, "DDPTUI_STATE_DIR": str(tmp_path / "state")}
    proc = subprocess.run(
        [sys.executable, "-m", "ddptui.cli", "run", "--headless", str(SCRIPT), *args],
        capture_output=True,
        text=True,
        timeout=240,
        cwd=tmp_path,
        env=env,
    )
    events = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    summary = events[-1]
    assert summary["event"] == "summary" and summary["ok"], (summary, proc.stderr[-2000:])
    assert not pids_with_tag(summary["run_id"])
    timeline, nodes = CollectiveTimeline(world_size=summary["world_size"]), {}
    for debug in sorted((Path(summary["run_dir"]) / "nodes").glob("*.debug")):
        node = debug.name.split("-", 1)[1].removesuffix(".debug")
        for path in sorted((debug / "collectives").glob("rank_*.jsonl")):
            samples = read_samples(path.read_text().splitlines())
            assert samples, path
            for sample in samples:
                nodes[sample.rank] = node
                timeline.add(sample)  # both pseudo-nodes share this machine's clock
    return summary, timeline.steps(limit=1000), nodes


def _rounds(steps: list[StepTimes], nodes: dict[int, str]) -> dict[int, StragglerResult]:
    """Score as the console would, a round every 5 steps: {the newest step's seq: result}
    (DDP's one all-reduce a step: seq is the training step plus the job's first few)."""
    scorer = StragglerScorer()
    return {
        steps[end - 1].seq: scorer.score(steps[:end], nodes) for end in range(10, len(steps) + 1, 5)
    }


def test_a_rank_slow_for_a_while_is_named_then_cleared(tmp_path: Path) -> None:
    _, steps, nodes = _run(
        tmp_path, "--steps", "120", "--slow-rank", "1", "--slow", "1.5", "--slow-until", "50"
    )
    assert len(steps) >= 60 and {s.method for s in steps} == {"arrival"}
    rounds = _rounds(steps, nodes)
    slow = [r for seq, r in rounds.items() if 25 <= seq <= 55]
    assert slow and all(r.ranks == (1,) and not r.nodes for r in slow), [r.evidence for r in slow]
    named = slow[-1]
    assert named.evidence[0].startswith(f"rank 1 ({nodes[1]}) at 0.")
    score = named.score_of(1)  # the job sleeps 0.1 s a step, rank 1 0.15 s
    assert score is not None and 0.55 < score.relative < 0.75 and 0.035 < score.late_s < 0.07
    recovered = [r for seq, r in rounds.items() if seq >= 80]  # half a window past step 50
    assert recovered and all(r.ranks == () and r.evidence == () for r in recovered)


def test_a_slow_node_is_named_as_a_node(tmp_path: Path) -> None:
    _, steps, nodes = _run(
        tmp_path, "--steps", "60", "--slow-rank", "2", "--slow-rank", "3", "--slow", "1.5"
    )
    last = list(_rounds(steps, nodes).values())[-1]
    assert last.ranks in ((2, 3), (3, 2)) and last.nodes == (nodes[2],)
    assert nodes[2] == nodes[3] != nodes[0]
    assert last.evidence[0].startswith(f"node {nodes[2]}: all 2 ranks slow")


def test_a_balanced_job_names_nobody(tmp_path: Path) -> None:
    _, steps, nodes = _run(tmp_path, "--steps", "100")
    rounds = list(_rounds(steps, nodes).values())
    assert len(rounds) >= 8
    assert all(r.ranks == () and r.nodes == () for r in rounds), [r.evidence for r in rounds]
    assert min(s.relative for s in rounds[-1].scores) > 0.8
