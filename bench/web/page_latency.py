"""Time from a rank's state change on a node to a browser page of `ddptui serve` showing it,
with 1 and with 10 concurrent viewers; each served console's CPU and memory.

The run is a run directory as the local backend writes it (plan, spec, events, one log per
node written by the node as torchrun's `--tee` writes it), with the nodes stood in for by
this process: each step, one more rank prints its first line (pending -> running, the
change the grid shows), every running rank prints a heartbeat every 0.25 s meanwhile. The
pages are real Chromium tabs (Debian's package, Playwright); each tab times, in the page,
when its terminal first shows `running K` in the Ranks panel (xterm's onWriteParsed, the
page's clock: the same machine's). Latency = that time - the time the node wrote the line.
Viewers' CPU is read from /proc (utime + stime over the stepping), memory as VmRSS.

With `--remote N`, N viewers are measured as a team has them: one tab here (it times) and
N-1 viewers whose browsers are elsewhere, each a websocket of the page's own protocol read
to its end, so the server runs a console for each and streams its screen, and no browser
but the one tab competes for this machine's cores.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
from playwright.sync_api import sync_playwright

from bench.common.report import Report, Table, arg_parser, command_line, fmt_ms
from bench.common.stats import median, percentile
from bench.common.trees import TRAINER
from ddptui.core.events import NodeChanged, NodeState, PhaseChanged, RunPhase
from ddptui.core.job.plan import NodeTarget, build_plan
from ddptui.core.job.spec import make_spec
from ddptui.core.runs.run_dir import RunDir, new_run_id, open_private
from testbed.browser import TERMINAL_HOOK, alive, launch_browser, serve, wait_for_text

HEARTBEAT_S = 0.25
UNTHROTTLED = [
    "--disable-background-timer-throttling",
    "--disable-backgrounding-occluded-windows",
    "--disable-renderer-backgrounding",
]
CLK_TCK = os.sysconf("SC_CLK_TCK")

WATCH_JS = """() => {
  const t = window.ddptuiTerminals[0];
  window.ddptuiSeen = {};
  const look = () => {
    const b = t.buffer.active, now = Date.now();
    for (let i = 0; i < b.length; i++) {
      const line = b.getLine(i);
      const m = line ? line.translateToString(true).match(/running (\\d+)/) : null;
      if (!m) continue;
      for (let k = 1; k <= +m[1]; k++) if (!(k in window.ddptuiSeen)) window.ddptuiSeen[k] = now;
      return;
    }
  };
  t.onWriteParsed(look);
  look();
}"""


@dataclass
class Nodes:
    """The nodes of the run, stood in for: each writes its log as torchrun's tee does."""

    run: RunDir
    names: list[str]
    nproc: int
    running: int = 0
    stop: bool = False

    def path(self, index: int) -> Path:
        return self.run.node_log(index, self.names[index])

    def write(self, rank: int, text: str) -> None:
        index, local = divmod(rank, self.nproc)
        with open(self.path(index), "ab") as f:
            f.write(f"[ddptui:{rank}:{local}]:{text}\n".encode())

    def start_rank(self, rank: int) -> float:
        """Rank `rank` prints its first line: its state changes, now."""
        now = time.time()
        self.write(rank, f"rank={rank} joined")
        self.running = rank + 1
        return now

    def heartbeats(self) -> None:
        beat = 0
        while not self.stop:
            beat += 1
            for rank in range(self.running):
                self.write(rank, f"rank={rank} step={beat} loss=0.{beat % 97:02d}")
            time.sleep(HEARTBEAT_S)


def make_run(state: Path, nodes: int, nproc: int) -> Nodes:
    """A run directory as a local run's session leaves it once the nodes run."""
    spec = make_spec(
        backend="local", nodes=nodes, nproc_per_node=nproc, script=str(TRAINER / "envcheck.py")
    )
    run_id = new_run_id()
    names = [f"local{i}" for i in range(nodes)]
    plan = build_plan(spec, [NodeTarget(n, "127.0.0.1") for n in names], run_id, 29400)
    run = RunDir.create(run_id, root=state / "runs")
    run.write_spec(spec)
    run.write_plan(plan, {})
    for index, name in enumerate(names):
        open_private(run.node_log(index, name), "ab").close()
    run.record(PhaseChanged(RunPhase.RUNNING))
    for name in names:
        run.record(NodeChanged(name, NodeState.RUNNING))
    run.close()
    return Nodes(run, names, nproc)


def cpu_ticks(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return int(fields[11]) + int(fields[12])
    except OSError:
        return 0


def chromium_pids() -> list[int]:
    found = []
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                exe = Path(f"/proc/{name}/cmdline").read_bytes().split(b"\0", 1)[0]
            except OSError:
                continue
            if exe.startswith(b"/usr/lib/chromium/"):
                found.append(int(name))
    return found


def rss_mib(pid: int) -> float:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return float("nan")


@dataclass
class Round:
    viewers: int
    latencies: list[float]  # every page, every change
    worst: list[float]  # per change, the slowest page
    missed: int
    cpu_per_viewer: list[float]  # percent of one core over the stepping
    rss_per_viewer: list[float]
    serve_cpu: float
    serve_rss: float
    left: int  # consoles still running after their tabs closed
    browser_cpu: float  # every Chromium process (on a real team's laptops, not here)
    load: float  # the machine's 1-minute load average as the stepping began
    remote: bool = False  # one tab here, the other viewers' browsers elsewhere

    @property
    def label(self) -> str:
        return (
            f"{self.viewers} (1 tab here, {self.viewers - 1} remote)"
            if self.remote
            else (str(self.viewers))
        )


class RemoteViewers:
    """Viewers whose browsers are elsewhere (a team's laptops): each a websocket of the
    served page's own protocol, read to its end as a page reads it, so the server starts a
    console for each and streams its screen; nothing of a browser runs on this machine."""

    def __init__(self, base: str, token: str, count: int) -> None:
        self.url = f"{base.replace('http', 'ws', 1)}/ws?token={token}&width=140&height=45"
        self.count = count
        self.received = [0] * count
        self.loop = asyncio.new_event_loop()
        self.stopped = asyncio.Event()
        self.thread = threading.Thread(target=self.loop.run_until_complete, args=(self._run(),))
        self.thread.start()

    async def _run(self) -> None:
        async with aiohttp.ClientSession() as session:
            await asyncio.gather(*(self._view(session, i) for i in range(self.count)))

    async def _view(self, session: aiohttp.ClientSession, index: int) -> None:
        async with session.ws_connect(self.url) as ws:
            reading = asyncio.ensure_future(self._read(ws, index))
            await self.stopped.wait()
            await ws.close()
            reading.cancel()

    async def _read(self, ws: aiohttp.ClientWebSocketResponse, index: int) -> None:
        async for message in ws:
            self.received[index] += len(message.data or b"")

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.stopped.set)
        self.thread.join(timeout=60)


def measure(
    browser: Any,
    state: Path,
    viewers: int,
    nodes: int,
    nproc: int,
    step_s: float,
    remote: bool = False,
) -> Round:
    """`viewers` tabs in Chromium here; with `remote`, one tab here (it times) and the
    others `RemoteViewers`."""
    run = make_run(state, nodes, nproc)
    ranks = nodes * nproc
    tabs = 1 if remote else viewers
    with serve(state, run.run.run_id) as served:
        token = served.url.split("token=", 1)[1]
        others = RemoteViewers(served.base, token, viewers - 1) if remote else None
        pages = []
        for _ in range(tabs):  # all opened at once, each its own browser (context)
            context = browser.new_context(viewport={"width": 1200, "height": 800})
            page = context.new_page()
            page.add_init_script(TERMINAL_HOOK)
            page.goto(served.url)
            pages.append(page)
        for page in pages:
            wait_for_text(page, f"pending {ranks}", timeout_s=300)
            page.evaluate(WATCH_JS)
        pids = served.viewer_pids()[0]
        beats = threading.Thread(target=run.heartbeats, daemon=True)
        beats.start()
        time.sleep(2.0)  # the tabs settle
        browser_pids = chromium_pids()
        load = os.getloadavg()[0]
        before = {pid: cpu_ticks(pid) for pid in [*pids, served.process.pid, *browser_pids]}
        t0 = time.monotonic()
        written: dict[int, float] = {}
        for rank in range(ranks):
            written[rank + 1] = run.start_rank(rank)
            time.sleep(step_s)
        deadline = time.monotonic() + 30
        seen: list[dict[str, float]] = []
        while time.monotonic() < deadline:
            seen = [page.evaluate("() => window.ddptuiSeen") for page in pages]
            if all(str(ranks) in s for s in seen):
                break
            time.sleep(0.2)
        wall = time.monotonic() - t0
        after = {pid: cpu_ticks(pid) for pid in before}
        run.stop = True
        rss = [rss_mib(pid) for pid in pids]
        serve_rss = rss_mib(served.process.pid)
        for page in pages:
            page.context.close()
        if others is not None:
            others.close()
            assert all(others.received), "a remote viewer got nothing"
        for pid in pids:
            with contextlib.suppress(AssertionError):
                served.wait_for(rf"viewer ended: pid {pid}\b", timeout_s=30)
        left = sum(1 for pid in pids if alive(pid))
    latencies, worst, missed = [], [], 0
    for k, at in written.items():
        times = [s[str(k)] / 1000 - at for s in seen if str(k) in s]
        missed += tabs - len(times)
        latencies += times
        if times:
            worst.append(max(times))
    cpu = [100 * (after[p] - before[p]) / CLK_TCK / wall for p in pids]
    serve_cpu = 100 * (after[served.process.pid] - before[served.process.pid]) / CLK_TCK / wall
    browser_cpu = sum(100 * (after[p] - before[p]) / CLK_TCK / wall for p in browser_pids)
    return Round(
        viewers, latencies, worst, missed, cpu, rss, serve_cpu, serve_rss, left, browser_cpu, load,
        remote,
    )  # fmt: skip


def main() -> None:
    parser = arg_parser(__doc__)
    parser.add_argument("--viewers", default="1,10", help="viewer counts, comma-separated")
    parser.add_argument("--nodes", type=int, default=6)
    parser.add_argument("--nproc", type=int, default=8)
    parser.add_argument("--step-s", type=float, default=0.5, help="between two rank changes")
    parser.add_argument(
        "--remote",
        default="",
        help="viewer counts measured with one tab here and the others remote (websockets)",
    )
    args = parser.parse_args()
    if args.quick:
        args.nodes, args.nproc, args.viewers = 2, 2, "1,2"
    counts = [int(v) for v in args.viewers.split(",")]
    report = Report(
        "web_page_latency",
        "ddptui serve: rank change on a node to the browser page, 1 and 10 viewers",
        command_line(),
    )
    report.para(__doc__.strip().split("\n\n", 1)[1].replace("\n", " "))
    rounds = []
    with tempfile.TemporaryDirectory() as tmp, sync_playwright() as playwright:
        # Every page is some user's page in sight: no tab is throttled as a hidden one.
        browser = launch_browser(playwright, extra_args=UNTHROTTLED)
        plan = [(v, False) for v in counts]
        plan += [(int(v), True) for v in args.remote.split(",") if v]
        for viewers, remote in plan:
            print(f"-- {viewers} viewer(s){' (remote)' if remote else ''} --", flush=True)
            rounds.append(
                measure(browser, Path(tmp), viewers, args.nodes, args.nproc, args.step_s, remote)
            )
        browser.close()
    ranks = args.nodes * args.nproc
    report.section(f"Latency: {ranks} rank changes ({args.nodes} nodes x {args.nproc})")
    table = Table(["viewers", "load", "samples", "p50", "p99", "max", "slowest page p50", "missed"])
    for r in rounds:
        table.add(
            r.label,
            f"{r.load:.0f}",
            len(r.latencies),
            fmt_ms(median(r.latencies)),
            fmt_ms(percentile(r.latencies, 99)),
            fmt_ms(max(r.latencies, default=float("nan"))),
            fmt_ms(median(r.worst)),
            r.missed,
        )
    report.table(table)
    report.section("Cost per viewer (while the ranks change and print heartbeats)")
    table = Table(
        ["viewers", "CPU per viewer (median, % of a core)", "CPU all viewers",
         "RSS per viewer (median)", "server CPU", "server RSS", "Chromium CPU (all tabs)",
         "consoles left after tabs closed"]
    )  # fmt: skip
    for r in rounds:
        table.add(
            r.label,
            f"{median(r.cpu_per_viewer):.1f}%",
            f"{sum(r.cpu_per_viewer):.1f}%",
            f"{median(r.rss_per_viewer):.0f} MiB",
            f"{r.serve_cpu:.1f}%",
            f"{r.serve_rss:.0f} MiB",
            f"{r.browser_cpu:.0f}%",
            r.left,
        )
    report.table(table)
    report.write()


if __name__ == "__main__":
    main()
