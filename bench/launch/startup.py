"""Start-up: from process start to the first connection attempt, ddptui vs ssh, pdsh and clush.

A TCP listener on 127.0.0.1 stands in for the first host (the ssh_config points the host
there); the clock runs from spawning the tool to the listener accepting its connection, then
the tool is stopped. ddptui is `ddptui run --headless --backend ssh` with early sockets (the
command line's first wave of TCP connects goes out before the job's models and the SSH engine
are imported: ddptui/cli/early.py) and without them (`DDPTUI_EARLY_CONNECT=0`: the first
connect is then the engine's, after every import), beside a bare `python3 -c` that only
connects (the interpreter's floor), `ssh`, `pdsh -R ssh` and `clush`. All interleaved. Then
`python -X importtime` of the same ddptui command says where the import time goes, by package.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path

from bench.common.report import (
    Report,
    Table,
    arg_parser,
    command_line,
    fmt_ms,
    load_average,
    ratio,
    verdict,
)
from bench.common.stats import interleaved, median, percentile
from bench.common.trees import ROOT, compile_bytecode

TARGET_S = 0.3


class Listener:
    """The stand-in first host: accepts, notes when, closes."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.sock.settimeout(30)
        self.port = self.sock.getsockname()[1]

    def time_to_connect(self, argv: list[str], env: dict[str, str], cwd: str) -> float:
        t0 = time.monotonic()
        proc = subprocess.Popen(
            argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env, cwd=cwd
        )
        try:
            conn, _ = self.sock.accept()
            took = time.monotonic() - t0
            conn.close()
        finally:
            proc.kill()
            proc.wait()
        return took


def runners(listener: Listener, work: Path) -> dict[str, Callable[[int], float]]:
    cfg = work / "ssh_config"
    cfg.write_text(
        f"Host node1\n  HostName 127.0.0.1\n  Port {listener.port}\n"
        "  StrictHostKeyChecking yes\n  BatchMode yes\n"
    )
    (work / "x.py").write_text("")
    base = {**os.environ, "PYTHONPATH": str(ROOT)}
    ddptui = [
        *(sys.executable, "-m", "ddptui.cli", "run", "--headless", "--backend", "ssh"),
        *("--hosts", "node1", "--ssh-config", str(cfg), "--workdir", str(work), "x.py"),
    ]
    floor = [
        sys.executable,
        "-c",
        f"import socket; socket.create_connection(('127.0.0.1', {listener.port})).recv(1)",
    ]
    tools: dict[str, tuple[list[str], dict[str, str]]] = {
        "ddptui run --headless (early sockets)": (ddptui, {**base, "DDPTUI_EARLY_CONNECT": "1"}),
        "ddptui run --headless (engine first)": (ddptui, {**base, "DDPTUI_EARLY_CONNECT": "0"}),
        "python3 -c connect (floor)": (floor, base),
        "ssh": (["ssh", "-F", str(cfg), "node1", "true"], base),
        "pdsh -R ssh": (
            ["pdsh", "-R", "ssh", "-w", "node1", "true"],
            {**base, "PDSH_SSH_ARGS_APPEND": f"-F {cfg}"},
        ),
        "clush": (["clush", "-o", f"-F {cfg}", "-w", "node1", "true"], base),
    }

    def one(argv: list[str], env: dict[str, str]) -> Callable[[int], float]:
        return lambda _: listener.time_to_connect(argv, env, str(work))

    return {name: one(argv, env) for name, (argv, env) in tools.items()}


def import_breakdown(listener: Listener, work: Path) -> list[tuple[str, float]]:
    """Self import time by top-level package for the ddptui command, until it connects."""
    log = work / "importtime.txt"
    argv = [
        *(sys.executable, "-X", "importtime", "-m", "ddptui.cli", "run", "--headless"),
        *("--backend", "ssh", "--hosts", "node1", "--ssh-config", str(work / "ssh_config")),
        *("--workdir", str(work), "x.py"),
    ]
    with log.open("w") as err:
        proc = subprocess.Popen(
            argv,
            stdout=subprocess.DEVNULL,
            stderr=err,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
            cwd=work,
        )
        conn, _ = listener.sock.accept()
        time.sleep(0.5)  # the engine's import finishes after the early connect
        conn.close()
        proc.kill()
        proc.wait()
    by_package: dict[str, float] = defaultdict(float)
    for line in log.read_text().splitlines():
        if not line.startswith("import time:") or "self [us]" in line:
            continue
        self_us, _, name = (part.strip() for part in line[12:].split("|"))
        top = name.split(".")[0]
        by_package[top] += int(self_us) / 1e6
    return sorted(by_package.items(), key=lambda kv: -kv[1])


def main() -> None:
    parser = arg_parser(__doc__)
    parser.add_argument("--reps", type=int, default=15)
    args = parser.parse_args()
    reps = 3 if args.quick else args.reps
    report = Report(
        "startup", "Start-up: process start to first connection attempt", command_line()
    )
    report.para(__doc__.split("\n\n", 1)[1].strip() if __doc__ else "")
    report.para(compile_bytecode())
    listener = Listener()
    with tempfile.TemporaryDirectory(prefix="ddptui-startup-") as tmp:
        work = Path(tmp)
        tools = runners(listener, work)
        for run in tools.values():  # warm the page cache
            run(0)
        times = interleaved(reps, tools)
        breakdown = import_breakdown(listener, work)
    report.section(f"Process start to first connection attempt (N={reps} interleaved)")
    table = Table(["tool", "median", "p10", "p90", "min", "max", "vs ssh", "vs python floor"])
    ssh_median = median(times["ssh"])
    floor = median(times["python3 -c connect (floor)"])
    for name, values in times.items():
        table.add(
            name,
            fmt_ms(median(values)),
            fmt_ms(percentile(values, 10)),
            fmt_ms(percentile(values, 90)),
            fmt_ms(min(values)),
            fmt_ms(max(values)),
            ratio(median(values), ssh_median),
            ratio(median(values), floor),
        )
    report.table(table)
    ours = median(times["ddptui run --headless (early sockets)"])
    report.para(
        f"ddptui run --headless to its first connection attempt: {fmt_ms(ours)} "
        f"(target < {TARGET_S * 1000:.0f} ms: "
        f"{verdict(ours < TARGET_S, f'+{(ours - TARGET_S) * 1000:.0f} ms')}); "
        f"without early sockets {fmt_ms(median(times['ddptui run --headless (engine first)']))}. "
        f"Load average at the end: {load_average()}. "
        "On a shared machine every process start stretches with the load: the bare "
        f"interpreter's floor was {fmt_ms(floor)} here (about 40 ms on an idle core), so "
        f"the ratio to it ({ratio(ours, floor)}) is the figure to compare between runs."
    )
    report.section("Where the import time goes (-X importtime, self time by package, one run)")
    imports = Table(["package", "self import time"])
    total = sum(s for _, s in breakdown)
    for name, seconds in breakdown[:12]:
        imports.add(name, fmt_ms(seconds))
    imports.add("all", fmt_ms(total))
    report.table(imports)
    report.write()


if __name__ == "__main__":
    main()
