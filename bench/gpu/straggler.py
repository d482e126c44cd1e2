"""A straggler on GPUs: rank 1 of a 2-rank NCCL job sleeps 0.6 s more a step; who is named.

On a machine with 2+ GPUs: `python bench/gpu/straggler.py OUT_DIR` (the device's run;
`sh bench/gpu/straggler.sh OUT_DIR` wraps it with the cost bench).

1. `ddptui run --headless --nodes 1 --nproc-per-node N` of the straggler tests' plain DDP
   loop (tests/data/straggler/slow_rank_ddp.py: 0.2 s of sleep a step, rank 1 0.6 s more),
   to its end; then the hook's records from the node's debug directory, scored round after
   round (every 5 steps) as the console will: which rank is named, how soon, by which method
   (`duration` where NCCL's timing is on), its scores and evidence.
2. The same job balanced: who is named (nobody, if all is well).

Writes into OUT_DIR: straggler_<case>_records.tar.gz (the hook's files, for the tests'
replay), straggler_<case>.json (the rounds' results, the min/max line, the sampler's own
cost), and prints a summary. On a CPU-only machine it runs the same on gloo, shorter
(`--steps 40 --step-s 0.1 --extra-s 0.05`), which is how it is tried before the device.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path
from statistics import median

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from ddptui.core.diagnose.collectives import CollectiveTimeline, read_samples  # noqa: E402
from ddptui.core.diagnose.straggler import (  # noqa: E402
    StragglerScorer,
    format_min_max,
    min_max_line,
)

SCRIPT = ROOT / "tests" / "data" / "straggler" / "slow_rank_ddp.py"


def run_case(out: Path, name: str, nproc: int, job: list[str]) -> dict:
    state = Path(tempfile.mkdtemp(prefix="ddptui-straggler-"))
    env = {**os.environ, "DDPTUI_STATE_DIR": str(state), "PYTHONPATH": str(ROOT)}
    argv = [sys.executable, "-m", "ddptui.cli", "run", "--headless", "--nodes", "1"]
    argv += ["--nproc-per-node", str(nproc), str(SCRIPT), *job]
    done = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=1800)
    events = [json.loads(x) for x in done.stdout.splitlines() if x.startswith("{")]
    summary = events[-1] if events else {}
    live = _live(events)
    run_dir = Path(summary.get("run_dir", state))
    timeline, nodes, records = CollectiveTimeline(world_size=nproc), {}, []
    for debug in sorted((run_dir / "nodes").glob("*.debug")):
        node = debug.name.split("-", 1)[1].removesuffix(".debug")
        for path in sorted((debug / "collectives").glob("rank_*.jsonl")):
            lines = path.read_text().splitlines()
            records += [json.loads(x) for x in lines if x.strip()]
            for sample in read_samples(lines):
                nodes[sample.rank] = node
                timeline.add(sample)
        with tarfile.open(out / f"straggler_{name}_records.tar.gz", "w:gz") as tar:
            tar.add(debug / "collectives", arcname=f"{debug.name}/collectives")
    steps = timeline.steps(limit=100_000)
    scorer = StragglerScorer()
    rounds = []
    for end in range(10, len(steps) + 1, 5):
        result = scorer.score(steps[:end], nodes)
        rounds.append({"steps": end, **result.to_dict()})
    last = scorer.score(steps, nodes)
    first_named = next((r for r in rounds if r["ranks"]), None)
    costs = [r["cost_us"] for r in records]
    report = {
        "case": name,
        "job": job,
        "ok": summary.get("ok"),
        "steps": len(steps),
        "step_s": median(s.period_s for s in steps) if steps else None,
        "live": live,
        "method": last.method,
        "named": list(last.ranks),
        "nodes": list(last.nodes),
        "first_named_after_steps": first_named["steps"] if first_named else None,
        "scores": {str(s.rank): s.__dict__ for s in last.scores},
        "evidence": list(last.evidence),
        "min_max": format_min_max(min_max_line(last)),
        "sampler": {
            "lines": len(records),
            "dump_ms_median": median(costs) / 1e3 if costs else None,
            "dump_ms_max": max(costs) / 1e3 if costs else None,
            "cpu_s": sum(r["cpu_us"] for r in records) / 1e6,
        },
        "rounds": rounds,
    }
    (out / f"straggler_{name}.json").write_text(json.dumps(report, indent=1) + "\n")
    return report


def _live(events: list[dict]) -> dict:
    """What the console itself said while the job ran: its straggler events, the first that
    named a rank (seconds after the job's `running` phase) and the summary's last one."""
    said = [e for e in events if e.get("event") == "straggler"]
    running = next(
        (e["ts"] for e in events if e.get("event") == "phase" and e.get("phase") == "running"),
        events[0].get("ts") if events else None,
    )
    first = next((e for e in said if e.get("ranks")), None)
    summary = events[-1].get("straggler") if events else None
    return {
        "events": said,
        "first_named": first["ranks"] if first else [],
        "first_named_after_s": (
            round(first["ts"] - running, 1) if first and first.get("ts") and running else None
        ),
        "summary": summary,
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("out", type=Path)
    p.add_argument("--nproc", type=int, default=2)
    p.add_argument("--steps", type=int, default=120)
    p.add_argument("--step-s", default="0.2")
    p.add_argument("--extra-s", default="0.6")
    args = p.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    common = ["--steps", str(args.steps), "--step-s", args.step_s, "--width", "2048"]
    slow = run_case(
        args.out,
        "slow",
        args.nproc,
        [*common, "--slow-rank", "1", "--slow", "1", "--extra-s", args.extra_s],
    )
    balanced = run_case(args.out, "balanced", args.nproc, common)
    for r in (slow, balanced):
        print(
            f"{r['case']}: ok={r['ok']} steps={r['steps']} step={r['step_s']} method={r['method']}"
            f" named={r['named']} nodes={r['nodes']} first after {r['first_named_after_steps']}"
            f" steps; sampler dump {r['sampler']['dump_ms_median']} ms median"
        )
        live = r["live"]
        print(
            f"   live: first named {live['first_named']} {live['first_named_after_s']} s after"
            f" running; {len(live['events'])} straggler events; summary's last:"
            f" {(live['summary'] or {}).get('ranks')}"
        )
        for line in r["evidence"]:
            print("   ", line)
        print("   ", r["min_max"])


if __name__ == "__main__":
    main()
