"""The long run: a job of quiet checkpoints followed for half an hour, as operators leave them.

A local job (2 pseudo-nodes x 2 ranks, gloo on CPU) of `trainer/checkpoint_ddp.py`: one step
a second, and every `--every` steps rank 0 goes quiet for `--checkpoint-s` seconds (150 by
default, over the `--hang-timeout 60` given) while the others wait for it in a barrier. On
the way, as the operator would: the console detaches (SIGUSR1 to headless) and attaches
again (`ddptui attach RUN --headless`) twice, and one worker is SIGKILLed with restarts
allowed. The console's RSS is sampled every 10 s in each of its stretches.

It reports what the issue of long runs asks: no stall said for a checkpoint, the quiet
phases seen, one run in `ddptui history --json` with its attempts, the goodput parts adding
up to the wall time, and the console's memory (each stretch's first and last samples).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, TextIO

from bench.common.report import Report, Table, arg_parser, command_line
from bench.common.trees import ROOT

TRAINER = ROOT / "trainer" / "checkpoint_ddp.py"
SAMPLE_S = 10.0


def rss_mb(pid: int) -> float | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        return None
    return None


def tagged(run_id: str) -> list[tuple[int, dict[str, str]]]:
    """The job's processes on this machine (DDPTUI_TAG starts with the run id) and their
    environments."""
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            raw = Path(f"/proc/{name}/environ").read_bytes().split(b"\0")
            cmd = Path(f"/proc/{name}/cmdline").read_bytes()
        except OSError:
            continue
        env = dict(item.decode(errors="replace").split("=", 1) for item in raw if b"=" in item)
        if env.get("DDPTUI_TAG", "").startswith(run_id) and b"torchrun" not in cmd:
            found.append((int(name), env))
    return found


class Stretch:
    """One console process following the run, its events into a file, its RSS sampled."""

    def __init__(self, argv: list[str], env: dict[str, str], out: Path) -> None:
        self.out_path = out
        self.out: TextIO = out.open("w")
        self.proc = subprocess.Popen(argv, stdout=self.out, stderr=subprocess.PIPE, env=env)
        self.samples: list[tuple[float, float]] = []
        self.began = time.monotonic()

    def sample(self) -> None:
        mb = rss_mb(self.proc.pid)
        if mb is not None:
            self.samples.append((time.monotonic() - self.began, mb))

    def events(self) -> list[dict[str, Any]]:
        if not self.out.closed:
            self.out.flush()
        text = self.out_path.read_text()
        return [json.loads(line) for line in text.splitlines() if line.strip()]

    def wait(self, timeout: float) -> int:
        code = self.proc.wait(timeout)
        self.out.close()
        return code


def main() -> int:
    parser = arg_parser(__doc__)
    parser.add_argument("--minutes", type=float, default=30.0, help="the run's length, about")
    parser.add_argument("--every", type=int, default=60, help="steps between checkpoints")
    parser.add_argument("--checkpoint-s", type=float, default=150.0)
    parser.add_argument("--hang-timeout", type=float, default=60.0)
    args = parser.parse_args()
    if args.quick:
        args.minutes, args.every, args.checkpoint_s, args.hang_timeout = 6, 30, 40, 15
    # one step a second: `every` steps then a checkpoint, to fill the minutes asked
    cycle_s = args.every + args.checkpoint_s
    steps = max(args.every, int(args.minutes * 60 / cycle_s * args.every))
    state = Path(tempfile.mkdtemp(prefix="ddptui-long-"))
    env = {**os.environ, "DDPTUI_STATE_DIR": str(state), "PYTHONUNBUFFERED": "1"}
    cli = [sys.executable, "-m", "ddptui.cli"]
    job = [
        *cli, "run", "--headless", "--nodes", "2", "--nproc-per-node", "2",
        "--max-restarts", "3", "--hang-timeout", str(args.hang_timeout),
        str(TRAINER), "--steps", str(steps), "--step-s", "1", "--every", str(args.every),
        "--checkpoint-s", str(args.checkpoint_s),
    ]  # fmt: skip
    total_s = args.minutes * 60
    # when: detach and attach again at 1/6 and 1/2 of the run, a worker killed at 1/3
    plan = [(total_s / 6, "reattach"), (total_s / 3, "kill"), (total_s / 2, "reattach")]
    stretches = [Stretch(job, env, state / "stretch0.jsonl")]
    run_id = ""
    began = time.monotonic()
    killed: dict[str, Any] = {}
    deadline = began + total_s * 2 + 600
    while time.monotonic() < deadline:
        current = stretches[-1]
        current.sample()
        if not run_id:
            run_id = next((e["run_id"] for e in current.events() if e["event"] == "plan"), "")
        elapsed = time.monotonic() - began
        if plan and elapsed >= plan[0][0] and run_id:
            _, what = plan.pop(0)
            if what == "kill":
                victim = next((pid for pid, e in tagged(run_id) if e.get("RANK") == "1"), None)
                if victim is not None:
                    os.kill(victim, signal.SIGKILL)
                    killed = {"pid": victim, "at_s": round(elapsed)}
            else:
                current.proc.send_signal(signal.SIGUSR1)  # detach: the job goes on
                current.wait(120)
                attach = [*cli, "attach", run_id, "--headless"]
                stretches.append(Stretch(attach, env, state / f"stretch{len(stretches)}.jsonl"))
        if current.proc.poll() is not None and current is stretches[-1]:
            break
        time.sleep(SAMPLE_S)
    last = stretches[-1]
    if last.proc.poll() is None:  # the job outlived its time: stop it, for the record
        last.proc.send_signal(signal.SIGTERM)
    last.wait(300)
    wall = time.monotonic() - began

    events = [e for s in stretches for e in s.events()]
    summary = next((e for e in reversed(events) if e["event"] == "summary"), {})
    stalls = [e for e in events if e["event"] == "stall" and e.get("suspects")]
    phases = {(e.get("began"), e.get("label")) for e in events if e["event"] == "quiet_phase"}
    history = subprocess.run(
        [*cli, "history", "--json"], capture_output=True, text=True, env=env, timeout=120
    )
    rows = [json.loads(line) for line in history.stdout.splitlines() if line.strip()]
    mine = [r for r in rows if r.get("id") == run_id]
    goodput = summary.get("goodput") or {}
    parts = goodput.get("parts") or {}
    parts_s = sum(float(v) for v in parts.values()) if isinstance(parts, dict) else 0.0
    wall_s = float(goodput.get("wall_s") or 0.0)

    report = Report("endurance_long_run", "The long run: quiet checkpoints, restarts, re-attaches",
                    command_line())  # fmt: skip
    report.para(
        f"{args.minutes:g} min asked, {wall / 60:.1f} min run: {steps} steps, a "
        f"{args.checkpoint_s:g} s checkpoint every {args.every} steps, --hang-timeout "
        f"{args.hang_timeout:g}; run {run_id}; {len(stretches)} console stretch(es); worker "
        f"killed: {killed or 'none'}."
    )
    table = Table(["check", "result"])
    table.add("stalls said (with suspects)", str(len(stalls)))
    table.add("quiet phases seen", str(len(phases)))
    first = str(summary.get("detail", "")).splitlines()[:1]
    table.add("summary ok / first line", f"{summary.get('ok')} / {first}")
    table.add("history rows for the run", str(len(mine)))
    attempts = mine[0].get("attempts") if mine else None
    told = [a.get("why", a) if isinstance(a, dict) else a for a in attempts or []]
    table.add("attempts in history", f"{len(told)}: {told}" if attempts else "-")
    table.add("goodput wall_s / parts sum", f"{wall_s:.1f} / {parts_s:.1f}")
    table.add("run's wall by this bench's clock (launch to the last summary)", f"{wall:.1f}")
    per_attempt = [
        round(sum(float(v) for v in a.get("parts", {}).values()), 1)
        for a in goodput.get("attempts") or []
    ]
    table.add("goodput attempts: parts sum each / total", f"{per_attempt} / {sum(per_attempt):.1f}")
    table.add("goodput parts", json.dumps(parts))
    report.table(table)
    memory = Table(["stretch", "samples", "first RSS MB", "last RSS MB", "max RSS MB"])
    for index, stretch in enumerate(stretches):
        mbs = [mb for _, mb in stretch.samples]
        if mbs:
            memory.add(index, len(mbs), f"{mbs[0]:.0f}", f"{mbs[-1]:.0f}", f"{max(mbs):.0f}")
    report.table(memory)
    if not args.quick:
        report.write()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
