"""The launch-and-preflight half of GPU support, proven on a GPU machine in one go.

Runs, each through the real `ddptui` command (its own state directory under OUT_DIR):

1. `nvidia-smi --list-gpus` (what the console counts);
2. the DEFAULT job, `ddptui run --headless trainer/envcheck.py` (2 pseudo-nodes x 2
   processes): on 2 GPUs it must be refused before launch, with the counts (exit 2);
3. `--nodes 2 --nproc-per-node 1`: each pseudo-node its own GPU (CUDA_VISIBLE_DEVICES in the
   plan), every rank on a GPU of its own (envcheck's `gpu=` PCI address);
4. the same with `--no-gpu-split`: both pseudo-nodes' rank 0 on GPU 0, NCCL's duplicate GPU,
   explained in the root cause;
5. the default job on the CPU (`--env CUDA_VISIBLE_DEVICES=`: gloo, no split);
6. `ddptui preflight --headless` for 1 x 2 (the gang test across both GPUs, one node's own
   figure), 2 x 1 (two pseudo-nodes), and the default 2 x 2 (the gpu check refuses it).

Then writes OUT_DIR/results.json and tars OUT_DIR into TGZ when given:

    python3 bench/gpu/preflight.py OUT_DIR [--tar TGZ]
    python3 bench/gpu/preflight.py --report OUT_DIR RESULTS.md     # the table, here
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
ENVCHECK = "trainer/envcheck.py"
STEPS: list[tuple[str, list[str]]] = [
    ("default_refused", ["run", "--headless", "--lines", ENVCHECK]),
    ("split_2x1", ["run", "--headless", "--lines", "--nodes", "2", "--nproc-per-node", "1",
                   ENVCHECK]),
    ("duplicate_2x1", ["run", "--headless", "--lines", "--nodes", "2", "--nproc-per-node", "1",
                       "--no-gpu-split", ENVCHECK]),
    ("cpu_default", ["run", "--headless", "--lines", "--env", "CUDA_VISIBLE_DEVICES=",
                     ENVCHECK]),
    ("preflight_1x2", ["preflight", "--headless", "--nodes", "1", "--nproc-per-node", "2"]),
    ("preflight_2x1", ["preflight", "--headless", "--nodes", "2", "--nproc-per-node", "1"]),
    ("preflight_default", ["preflight", "--headless"]),
]  # fmt: skip
_GPU_WORDS = re.compile(r"envcheck host=\S+ local_rank=\d+ rank=(\d+) .*?device=(\S+)(.*)$")


def _events(text: str) -> list[dict[str, Any]]:
    found = []
    for line in text.splitlines():
        if line.startswith("{"):
            try:
                found.append(json.loads(line))
            except ValueError:
                continue
    return found


def step(out: Path, name: str, argv: list[str]) -> dict[str, Any]:
    env = {k: v for k, v in os.environ.items() if k != "CUDA_VISIBLE_DEVICES"}
    env["DDPTUI_STATE_DIR"] = str(out / "state" / name)
    begun = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-m", "ddptui.cli", *argv],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=env,
        timeout=400,
    )
    seconds = round(time.monotonic() - begun, 1)
    (out / f"{name}.jsonl").write_text(proc.stdout)
    (out / f"{name}.stderr").write_text(proc.stderr)
    events = _events(proc.stdout)
    result: dict[str, Any] = {
        "argv": ["ddptui", *argv],
        "exit": proc.returncode,
        "seconds": seconds,
        "stderr_tail": proc.stderr.strip().splitlines()[-3:],
    }
    plan = next((e for e in events if e["event"] == "plan"), None)
    if plan:
        result["commands"] = plan["commands"]
    summary = next((e for e in events if e["event"] == "summary"), None)
    if summary:
        result["summary"] = {k: summary.get(k) for k in ("ok", "detail", "world_size")}
        result["causes"] = [[r["rank"], r["cause"], r["culprit"]] for r in summary["ranks"]]
    ranks = {}
    for e in events:
        if e["event"] == "line" and (m := _GPU_WORDS.search(e["text"])):
            ranks[int(m[1])] = f"device={m[2]}{m[3]}"
    if ranks:
        result["ranks"] = {str(k): ranks[k] for k in sorted(ranks)}
    checks = [e for e in events if e["event"] == "check" and e["check"] in ("gpu", "gang")]
    if checks:
        result["checks"] = [[c["node"], c["check"], c["status"], c["detail"]] for c in checks]
    verdict = next((e for e in events if e["event"] == "preflight"), None)
    if verdict:
        result["preflight"] = {k: verdict[k] for k in ("ok", "failed", "detail")}
    return result


def gather(out: Path) -> dict[str, Any]:
    out.mkdir(parents=True, exist_ok=True)
    found: dict[str, Any] = {"started": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())}
    smi = shutil.which("nvidia-smi")
    if smi:
        listing = subprocess.run([smi, "--list-gpus"], capture_output=True, text=True)
        (out / "nvidia_smi_list_gpus.txt").write_text(listing.stdout)
        found["gpus"] = listing.stdout.strip().splitlines()
        query = "--query-gpu=name,driver_version,memory.total,pci.bus_id"
        done = subprocess.run([smi, query, "--format=csv,noheader"], capture_output=True, text=True)
        (out / "nvidia_smi_query_preflight.csv").write_text(done.stdout)
    else:
        found["gpus"] = []
    for name, argv in STEPS:
        found[name] = step(out, name, argv)
        print(name, found[name]["exit"], found[name]["seconds"], flush=True)
    (out / "results.json").write_text(json.dumps(found, indent=1))
    return found


def report(results: dict[str, Any]) -> str:
    """The results file: each step, what was expected on a 2-GPU machine, what came."""
    r = results
    lines = [
        "# GPU launch and preflight on 2 x H100 (`bench/gpu/preflight.py`)",
        "",
        f"Run {r['started']}, one device call; every step is the real `ddptui` command.",
        "GPUs (`nvidia-smi --list-gpus`):",
        "",
        *[f"    {g}" for g in r["gpus"]],
        "",
        "| step | command | exit | s | what it said |",
        "|---|---|---|---|---|",
    ]
    for name, _argv in STEPS:
        s = r[name]
        said = (s.get("summary") or {}).get("detail") or (s.get("preflight") or {}).get("detail")
        said = said or " ".join(s["stderr_tail"][-1:])
        lines.append(
            f"| {name} | `{' '.join(s['argv'])}` | {s['exit']} | {s['seconds']} | {said} |"
        )
    for name, _argv in STEPS:
        s = r[name]
        extra = []
        for node, line in s.get("commands", []):
            env = re.search(r"CUDA_VISIBLE_DEVICES=\S+", line)
            extra.append(f"- plan {node}: {env.group(0) if env else 'no CUDA_VISIBLE_DEVICES'}")
        extra += [f"- rank {k}: {v}" for k, v in (s.get("ranks") or {}).items()]
        extra += [f"- causes (rank, cause, culprit): {s['causes']}"] if s.get("causes") else []
        extra += [f"- {n} {c} {st}: {d}" for n, c, st, d in s.get("checks", [])]
        if extra:
            lines += ["", f"## {name}", "", *extra]
    return "\n".join(lines) + "\n"


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("out", type=Path)
    p.add_argument("results_md", nargs="?", type=Path)
    p.add_argument("--tar", type=Path)
    p.add_argument("--report", action="store_true", help="write the table from OUT/results.json")
    args = p.parse_args()
    if args.report:
        text = report(json.loads((args.out / "results.json").read_text()))
        args.results_md.write_text(text)
        print(text)
        return 0
    gather(args.out)
    if args.tar:
        with tarfile.open(args.tar, "w:gz") as tar:
            tar.add(args.out, arcname="gpu_preflight", filter=_no_state_sockets)
    return 0


def _no_state_sockets(info: tarfile.TarInfo) -> tarfile.TarInfo | None:
    return info if info.isfile() or info.isdir() else None


if __name__ == "__main__":
    sys.exit(main())
