"""Fleet: a stand-in agent started on, and torn down from, hundreds of hosts; ddptui vs pdsh, clush.

The testbed is the project's own (testbed/): one network namespace and one real sshd per
host on a /16, plain root logins (no .bashrc: see `Testbed(plain_login=True)`). On every host
the same stand-in for torchrun (testbed/standins/fleet_standin.sh) reports its rank the way
torchrun's `--tee` does with ddptui's prefix, then holds until killed.

- ddptui: `ddptui run --headless --backend ssh --hosts node[1-N] --nproc-per-node 1
  --launcher 'bash fleet_standin.sh'`; launched = every rank shown running (its `rank`
  events); teardown = SIGTERM (what `q` does in the console) to the process's exit, its own
  proof of every host included.
- pdsh / clush: `pdsh -R ssh -f N -w node[1-N] 'bash fleet_standin.sh'` (clush alike), launched
  = every host's ready line printed; teardown = `pdsh -f 32 ... pkill -f` of the stand-in until
  both commands have returned.
Every teardown is then checked from outside: no process other than sshd left in any host's
namespace. Runs are interleaved (ddptui, pdsh, clush, ddptui, ...); ddptui's peak RSS is its
process's VmHWM. A last ddptui run cuts the link of every tenth host once all ranks run, then
tears down: the cut hosts must be reported, the others proven clean.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from contextlib import nullcontext
from pathlib import Path
from typing import Any

from bench.common.hosts import (
    TimedStream,
    all_ranks_running,
    bench_env,
    ddptui_ssh_argv,
    hosts_apart,
    wait_clean,
)
from bench.common.report import Report, arg_parser, command_line, load_average
from bench.common.stats import interleaved
from bench.common.trees import ROOT, compile_bytecode, describe_tree
from bench.fleet.report import BASE, NOTES, Sample, summarize, summarize_ui
from testbed import Testbed, cleanup_stale
from testbed.standins import FLEET_STANDIN

STANDIN = str(FLEET_STANDIN)
MARK = "[d]dptui-fleet-standin"  # pkill -f pattern that does not match the shell running it


class PeakRss:
    """Samples a process's VmHWM (its own peak RSS) until it exits."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.mb = 0.0
        self._stop = threading.Event()
        threading.Thread(target=self._watch, daemon=True).start()

    def _watch(self) -> None:
        while not self._stop.wait(0.2):
            try:
                for line in Path(f"/proc/{self.pid}/status").read_text().splitlines():
                    if line.startswith("VmHWM:"):
                        self.mb = max(self.mb, int(line.split()[1]) / 1024)
            except OSError:
                return

    def stop(self) -> float:
        self._stop.set()
        return self.mb


def _ready_hosts(n: int) -> Callable[[str], bool]:
    seen: set[str] = set()

    def check(line: str) -> bool:
        if "fleet stand-in ready" in line:
            seen.add(line.split("host=")[-1].strip())
        return len(seen) == n

    return check


def _phases(events: list[dict[str, Any]], wall0: float) -> dict[str, float]:
    """When ddptui reached each step of the launch, in seconds since its process started."""

    def last(kind: str, state: str) -> float:
        stamps = [e["ts"] for e in events if e["event"] == kind and e.get("state") == state]
        return max(stamps) - wall0 if stamps else float("nan")

    def first(kind: str, state: str) -> float:
        stamps = [e["ts"] for e in events if e["event"] == kind and e.get("state") == state]
        return min(stamps) - wall0 if stamps else float("nan")

    return {
        "first event": min(e["ts"] for e in events) - wall0,
        "first connect": first("node", "connecting"),
        "all connected": last("node", "authenticated"),
        "all started": last("node", "launched"),
    }


def ddptui_run(
    tb: Testbed, n: int, tmp: Path, cut: list[str] | None = None, tree: Path = ROOT
) -> Sample:
    hosts = tb.hosts[:n]
    argv = ddptui_ssh_argv(
        tb,
        *("--hosts", f"node[1-{n}]", "--nproc-per-node", "1", "--hang-timeout", "3600"),
        *("--launcher", f"bash {STANDIN}", "fleet.py"),
    )
    stream = TimedStream(argv, env=bench_env(tmp / "state", tree), cwd=tmp)
    rss = PeakRss(stream.proc.pid)
    green = stream.until(all_ranks_running(n), timeout=600)
    ended = [e for e in stream.events() if e["event"] in ("summary", "notice")]
    if green is None or (ended and ended[-1]["event"] == "summary"):
        stream.proc.kill()
        stream.finish(timeout=600)
        raise RuntimeError(f"ddptui: not all running: {ended[-4:]}")
    for host in cut or ():
        tb.cut_link(host)
    t0, asked = time.monotonic(), time.time()
    stream.proc.send_signal(signal.SIGTERM)
    stream.finish(timeout=600)
    teardown = time.monotonic() - t0
    events = stream.events()
    reports = {e["node"]: e for e in events if e["event"] == "teardown"}
    phases = _phases(events, stream.wall0)
    proofs = [e["ts"] - asked for e in events if e["event"] == "teardown"]
    phases["first proof"] = min(proofs, default=float("nan"))
    phases["all proofs"] = max(proofs, default=float("nan"))
    healthy = [h for h in hosts if h not in (cut or ())]
    left = wait_clean(tb, healthy, 30)[1]
    sample: Sample = {
        "launch": green,
        "teardown": teardown,
        "peak rss MB": rss.stop(),
        "dirty hosts": len(left),
        "reported not clean": sorted(h for h, e in reports.items() if not e.get("clean")),
        **phases,
    }
    if cut is not None:
        sample["cut"] = sorted(cut)
    return sample


def ui_run(tb: Testbed, n: int, tmp: Path, tree: Path = ROOT) -> Sample:
    """The console of `tree` (bench/fleet/console_run.py) launching on every host, keys probed. The
    probe is this tree's; the console, and the session process it starts, are `tree`'s."""
    assert tb.ssh is not None
    args = [str(n), str(tb.ssh.ssh_config), STANDIN, str(tmp)]
    start = (
        f"import sys; sys.path[:0] = [{str(tree)!r}]; import ddptui; "  # the console: tree's
        f"sys.path.insert(0, {str(ROOT)!r}); from bench.fleet.console_run import main; "
        f"sys.argv[1:] = {args!r}; main()"
    )
    done = tb.run(
        tb.head,
        [sys.executable, "-c", start],
        env=bench_env(tmp / "state-ui", tree),
        cwd=tmp,
        check=True,
        timeout=1200,
    )
    sample: Sample = json.loads(done.stdout.strip().splitlines()[-1])
    left = wait_clean(tb, tb.hosts[:n], 30)[1]
    sample["dirty hosts"] = len(left)
    sample["left"] = {host: procs[:3] for host, procs in list(left.items())[:5]}
    print(f"  console run ({tree}): {sample}", flush=True)
    if left:  # the next run starts from clean hosts: its count is its own
        print(f"  reset: {len(tb.reset())} process(es) killed", flush=True)
    return sample


def by_hand_run(tb: Testbed, n: int, tool: str) -> Sample:
    assert tb.ssh is not None
    cfg = str(tb.ssh.ssh_config)
    hostlist = f"node[1-{n}]"
    env = {**os.environ, "PDSH_SSH_ARGS_APPEND": f"-F {cfg}"}

    def command(fanout: int, remote: str) -> list[str]:
        if tool == "pdsh":
            return ["pdsh", "-R", "ssh", "-f", str(fanout), "-w", hostlist, remote]
        return ["clush", "-f", str(fanout), "-o", f"-F {cfg}", "-w", hostlist, remote]

    start = TimedStream(
        tb.ns_argv(tb.head, command(n, f"bash {STANDIN}")), env=env, merge_stderr=True
    )
    green = start.until(_ready_hosts(n), timeout=600)
    if green is None:
        start.proc.kill()
        raise RuntimeError(f"{tool}: not all ready: {start.seen[-3:]}")
    t0 = time.monotonic()
    tb.run(tb.head, command(32, f"pkill -f '{MARK}'"), env=env, check=False, timeout=600)
    start.finish(timeout=600)
    teardown = time.monotonic() - t0
    left = wait_clean(tb, tb.hosts[:n], 30)[1]
    return {"launch": green, "teardown": teardown, "dirty hosts": len(left)}


def main() -> None:
    parser = arg_parser(__doc__)
    parser.add_argument("--hosts", type=int, default=512)
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--no-cut", action="store_true", help="skip the link-cut run")
    parser.add_argument("--tools", default="ddptui,pdsh,clush", help="which of ddptui,pdsh,clush")
    parser.add_argument(
        "--ui", action="store_true", help="one more run in the console, keys probed (p99)"
    )
    parser.add_argument(
        "--hosts-apart",
        action="store_true",
        help="every host's sshd and all it starts in a CPU cgroup of the lowest weight, "
        "standing for hosts that are other machines (root; writes fleet_N_hosts_apart.md)",
    )
    parser.add_argument(
        "--ddptui-only-reps",
        type=int,
        default=0,
        help="extra ddptui runs after the interleaved ones (for the dirty-host count)",
    )
    parser.add_argument(
        "--ui-only",
        action="store_true",
        help="only the console run with keys probed (no by-hand tools, no headless runs)",
    )
    parser.add_argument(
        "--baseline",
        type=Path,
        help="a tree of ddptui (a git worktree) to run as `ddptui (base)`, interleaved",
    )
    args = parser.parse_args()
    n = 16 if args.quick else args.hosts
    reps = 1 if args.quick else args.reps
    apart = " (hosts apart)" if args.hosts_apart else ""
    report = Report(
        f"fleet_{n}" + ("_hosts_apart" if apart else ""), f"Fleet: {n} hosts{apart}", command_line()
    )
    report.para(__doc__.split("\n\n", 1)[1].strip() if __doc__ else "")
    report.para(compile_bytecode(*([args.baseline] if args.baseline else [])))
    if args.baseline:
        report.para(f"Baseline `ddptui (base)`: {describe_tree(args.baseline)}.")
    cleanup_stale()
    t0 = time.monotonic()
    tb = Testbed(n, sshd=True, plain_login=True).start()
    built = time.monotonic() - t0
    report.para(f"Testbed of {n} hosts on {tb.subnet} built in {built:.1f} s.")
    if args.hosts_apart:
        report.para(
            "Hosts apart (bench/common/hosts.py `hosts_apart`): "
            + " ".join((hosts_apart.__doc__ or "").split())
        )
    try:
        with (
            hosts_apart(tb, tb.hosts[:n]) if args.hosts_apart else nullcontext(),
            tempfile.TemporaryDirectory(prefix="bench-fleet-") as tmp_name,
        ):
            tmp = Path(tmp_name)
            base = args.baseline
            tools: dict[str, Callable[[int], Sample]] = {
                BASE: lambda _: ddptui_run(tb, n, tmp, tree=base),
                "ddptui": lambda _: ddptui_run(tb, n, tmp),
                "pdsh": lambda _: by_hand_run(tb, n, "pdsh"),
                "clush": lambda _: by_hand_run(tb, n, "clush"),
            }
            wanted = args.tools.split(",") + ([BASE] if base else [])
            tools = {k: v for k, v in tools.items() if k in wanted}
            runs = {} if args.ui_only else interleaved(reps, tools)
            for i in range(0 if args.ui_only else args.ddptui_only_reps):
                runs["ddptui"].append(ddptui_run(tb, n, tmp))
                print(f"  [extra {i + 1}] ddptui: {runs['ddptui'][-1]}", flush=True)
            uis: dict[str, list[Sample]] = {}
            for _ in range(reps if args.ui or args.ui_only else 0):  # base first, as above
                for label, tree in ([(BASE, base)] if base else []) + [("ddptui", ROOT)]:
                    uis.setdefault(label, []).append(ui_run(tb, n, tmp, tree))
            cut_sample = None
            if not (args.no_cut or args.ui_only):
                cut = tb.hosts[:n][9::10]
                cut_sample = ddptui_run(tb, n, tmp, cut=cut)
                print(f"  cut run: {cut_sample}", flush=True)
                tb.reset()
        if runs:
            summarize(report, n, reps, runs, cut_sample)
        if uis:
            summarize_ui(report, n, uis)
    finally:
        tb.close()
    report.para(f"Load average at the end: {load_average()}.")
    report.section("Where the launch time goes, and what would close the gap")
    report.para(NOTES)
    report.write()


if __name__ == "__main__":
    main()
