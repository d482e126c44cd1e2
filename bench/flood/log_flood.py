"""Log ingest under flood: 16 pseudo-nodes writing as fast as they can, and at fixed rates.

Three tiers, each in a fresh process (so its peak RSS is its own):
- core: Monitor.feed alone on big in-memory buffers (framing, rank attribution, rank board),
  then Monitor.feed followed by the UI's SessionRelay.emit (what the app adds per line), and
  a prototype of batching per chunk (what the per-line work costs at least);
- headless: a real Session, local backend, 16 nodes whose "torchrun" is
  testbed/standins/flood_node.py (same node helper, log files, tail processes and pipes as a
  real run), no UI;
- ui: the same Session run by the real DdpApp under `app.run_test()` (which runs the session
  in a process of its own: ddptui/core/session/process.py), launched with `l`,
  while Pilot presses keys in turn, 100 ms apart: `]` (next node's log), `up` (scroll the
  log up) and `end` (follow again). Key-to-screen latency is the time from the press to the
  first frame that shows its effect (frames serialised as a terminal driver would, so that
  cost counts too; bench/flood/ui_tier.py, bench/common/pilot.py).
Lines lost = lines the nodes wrote (counted in the on-disk logs) minus lines the console
ingested (lines of NodeLines events; in the app, the session process's own count of them); the
UI may skip lines on screen by design (the view says how many, the run directory has them
all), and that is reported separately. Console CPU a line: the console's CPU time (user +
system, all its threads; in the app, its session process's too) over the lines it ingested,
the figure a loaded machine moves least; core tiers are in lines per CPU-second too. Peak RSS
in the app: the app's process plus its session process.
With `--baseline TREE`, every tier also runs the ddptui of TREE (another checkout, e.g. a
`git worktree` of an older commit), just before this tree's: the ratios are in one run.
`--quick` writes its report beside the record (log_flood_quick.md), never over it.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.common.report import arg_parser, command_line, environment, fmt_ms
from bench.common.stats import cpu_s, peak_rss_mb, percentile
from bench.common.trees import RESULTS, ROOT, describe_tree
from bench.flood.core_tier import NODES, core_child
from bench.flood.rates import BASE, LAG_SAMPLE, LAG_WARMUP_S, RATES, format_rate, report_name
from testbed.standins import FLOOD_NODE

SHIM = FLOOD_NODE
MAX_LINES_PER_NODE = 150_000
CORE_LINES_PER_NODE = 50_000


def _lines_per_node(rate: int, seconds: float, quick: bool) -> int:
    lines = MAX_LINES_PER_NODE if rate == 0 else int(rate / NODES * seconds)
    return lines // (5 if quick else 1)


# -- core tier ----------------------------------------------------------------------------


# -- headless and UI tiers ----------------------------------------------------------------


class Ingest:
    """Counts what reaches the consumer of a Session's events, and samples the lag."""

    def __init__(self) -> None:
        self.lines = 0
        self.done_lines = 0
        self.first = self.last = 0.0
        self.lags: list[float] = []

    def saw(self, batch: Any) -> None:
        """One NodeLines event: count its rank lines, sample the lag of one in LAG_SAMPLE."""
        now = time.time()
        for text, rank, _ in batch.lines:
            if rank is None:
                continue
            if text.startswith("flood done"):
                self.done_lines += 1
                continue
            if not self.lines:
                self.first = now
            self.lines += 1
            if self.lines % LAG_SAMPLE == 0 and now - self.first > LAG_WARMUP_S:
                self.lags.append(now - float(text[2 : text.index(" ")]))
        if self.lines:
            self.last = now

    def saw_block(self, block: Any) -> None:
        """A block from the session's process: its lines (a sample of all: the lag), and
        the time of its count (the ingest's span: from the first line to the last)."""
        now = time.time()
        for batch in block.batches:
            self.saw(batch)
        if block.seen and not self.first:
            self.first = now
        if block.seen:
            self.last = now

    def result(self) -> dict[str, Any]:
        span = max(self.last - self.first, 1e-9)
        return {
            "ingested": self.lines,
            "done_lines": self.done_lines,
            "ingest_per_s": self.lines / span,
            "span_s": span,
            "lag_p50": percentile(self.lags, 50),
            "lag_p99": percentile(self.lags, 99),
        }


NODES_APART = "FLOOD_NODES_APART"  # read by testbed/standins/flood_node.py
METRICS = "FLOOD_METRICS"  # "0": the console reads no metrics (bench/flood/metrics_flood.py)


def _spec(lines_per_node: int, rate: int, workdir: Path) -> Any:
    from ddptui.core.job.spec import make_spec

    apart = {NODES_APART: "1"} if os.environ.get(NODES_APART) else {}
    apart["CUDA_VISIBLE_DEVICES"] = ""  # the stand-ins need no GPU: runs on a GPU machine too
    from ddptui.core.job.spec import JobSpec

    # a tree from before metrics were read (a --baseline) has no such field
    read = {"read_metrics": os.environ.get(METRICS, "1") != "0"}
    return make_spec(
        **(read if "read_metrics" in JobSpec.model_fields else {}),
        env=apart,
        backend="local",
        nodes=NODES,
        nproc_per_node=1,
        script=str(SHIM),
        script_args=("--lines", str(lines_per_node), "--rate", str(rate / NODES)),
        launcher=f"{sys.executable} {SHIM}",
        workdir=str(workdir),
    )


def _on_disk(run_path: Path) -> int:
    return sum(p.read_bytes().count(b"step-ok\n") for p in (run_path / "nodes").glob("*.log"))


def headless_child(lines_per_node: int, rate: int, workdir: Path) -> dict[str, Any]:
    from ddptui.core.events import NodeLines

    try:
        from ddptui.core.session.session import Session
    except ImportError:  # a tree from before the session was a package (a --baseline)
        from ddptui.core.session import Session  # type: ignore[attr-defined,no-redef]

    ingest = Ingest()

    def emit(event: Any) -> None:
        if isinstance(event, NodeLines):
            ingest.saw(event)

    session = Session(_spec(lines_per_node, rate, workdir), emit)
    summary = asyncio.run(session.run_job())
    return {
        **ingest.result(),
        "ok": summary.ok,
        "on_disk": _on_disk(session.run.path),
        "rss_mb": peak_rss_mb(),
        "cpu_s": cpu_s(),
    }


async def _ui_child(lines_per_node: int, rate: int, workdir: Path) -> dict[str, Any]:
    from bench.flood.ui_tier import ui_run

    return await ui_run(_spec(lines_per_node, rate, workdir), Ingest(), _on_disk)


# -- the driver ---------------------------------------------------------------------------


def _child(*args: str, tree: str | None = None) -> dict[str, Any]:
    """One tier in a fresh process; `tree`: the ddptui it measures (another checkout)."""
    with tempfile.TemporaryDirectory(prefix="bench-flood-") as tmp:
        env = {**os.environ, "DDPTUI_STATE_DIR": str(Path(tmp) / "state"), "PYTHONPATH": str(ROOT)}
        where = ["--tree", tree] if tree else []
        cp = subprocess.run(
            [
                sys.executable,
                "-m",
                "bench.flood.log_flood",
                "--child",
                *args,
                "--workdir",
                tmp,
                *where,
            ],
            capture_output=True,
            text=True,
            # Not the repository: `python -m` puts its folder first on the path, so the
            # session process of a --baseline tree would import this tree's ddptui.
            cwd=tmp,
            env=env,
            timeout=900,
        )
    if cp.returncode != 0:
        raise RuntimeError(f"child {args} failed: {cp.stderr[-2000:]}")
    result: dict[str, Any] = json.loads(cp.stdout.strip().splitlines()[-1])
    return result


def main() -> None:
    parser = arg_parser(__doc__)
    parser.add_argument("--reps", type=int, default=2)
    parser.add_argument("--child", nargs="*", help=argparse.SUPPRESS)
    parser.add_argument("--workdir", help=argparse.SUPPRESS)
    parser.add_argument("--render", metavar="JSON", help="redo the report from raw results")
    parser.add_argument(
        "--baseline",
        metavar="TREE",
        help="also measure the ddptui of this checkout (e.g. a `git worktree` of an older "
        "commit), interleaved with this one: each tier runs base then this tree",
    )
    parser.add_argument(
        "--rates", nargs="+", choices=list(RATES), default=list(RATES), help="offered rates"
    )
    parser.add_argument(
        "--nodes-apart",
        action="store_true",
        help="run each pseudo-node's processes (its writer and node helper) in a scheduling "
        "group at the lowest priority (/proc/self/autogroup nice 19), standing for nodes "
        "that are other machines: they get the CPU the console leaves",
    )
    parser.add_argument("--tree", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.nodes_apart:
        os.environ[NODES_APART] = "1"  # the children's specs pass it to the nodes
    if args.child is not None:
        if args.tree:  # before anything imports ddptui: the tree's, with this bench
            sys.path.insert(0, str(Path(args.tree).resolve()))
        kind, *rest = args.child
        workdir = Path(args.workdir)
        if kind == "core":
            result = core_child(int(rest[0]))
        elif kind == "headless":
            result = headless_child(int(rest[0]), int(rest[1]), workdir)
        else:
            result = asyncio.run(_ui_child(int(rest[0]), int(rest[1]), workdir))
        print(json.dumps(result))
        return
    from bench.flood.report import render  # here: the children need none of it

    if args.render:
        render(json.loads(Path(args.render).read_text()), command_line(), __doc__)
        return
    reps = 1 if args.quick else args.reps
    core_lines = CORE_LINES_PER_NODE // (5 if args.quick else 1)
    data: dict[str, Any] = {
        "reps": reps,
        "core_lines": core_lines,
        "env": environment(),
        "cores": [],
        "sweeps": [],
        "baseline": args.baseline and describe_tree(args.baseline),
        "nodes_apart": args.nodes_apart,
        "command": command_line(),
        "loads": [],
    }
    if args.quick:  # a smoke run: its report beside the record, never over it
        data["name"] = f"{report_name(data)}_quick"
    trees: list[tuple[str, str | None]] = [("", None)]
    if args.baseline:
        data["cores_base"] = []
        trees.insert(0, (BASE, args.baseline))
    for rep in range(reps):
        for _, tree in trees:
            data["cores_base" if tree else "cores"].append(
                _child("core", str(core_lines), tree=tree)
            )
        data["sweeps"].append({})
        for name in args.rates:
            rate, seconds = RATES[name]
            lines = _lines_per_node(rate, seconds, args.quick)
            for tier in ("headless", "ui"):
                for suffix, tree in trees:
                    label = tier + suffix
                    data["loads"].append(os.getloadavg()[0])
                    print(f"  [{rep + 1}/{reps}] {label} at {name}: {lines * NODES:,} lines",
                          flush=True)  # fmt: skip
                    result = _child(tier, str(lines), str(rate), tree=tree)
                    data["sweeps"][-1][f"{label}|{name}"] = result
                    print(f"    {_brief(result)}", flush=True)
        raw = RESULTS / f"{report_name(data)}.json"  # each sweep: `--render` works on a cut run
        RESULTS.mkdir(parents=True, exist_ok=True)
        raw.write_text(json.dumps({**data, "reps": rep + 1}, indent=1))
    render(data, command_line(), __doc__)


def _brief(r: dict[str, Any]) -> str:
    text = f"ingested {r['ingested']:,} of {r['on_disk']:,} at {format_rate(r['ingest_per_s'])}"
    if "key_p50" in r:
        text += f", key p50 {fmt_ms(r['key_p50'])} p99 {fmt_ms(r['key_p99'])}"
    text += f", RSS {r['rss_mb']:.0f} MB"
    return text if r.get("ok", True) else f"{text}; THE RUN FAILED (its summary was not ok)"


if __name__ == "__main__":
    main()
