"""Fan-out: one short command on 8, 16 and 32 hosts, ddptui's SSH layer vs pdsh and clush.

ddptui's side is its own transports (AsyncsshTransport, ParamikoTransport) in a fresh process
(bench/launch/fanout_worker.py): early sockets for the first wave (asyncssh), then connect to every
host and run the command concurrently, at most `ssh.fanout` (32) at a time, as SshBackend does
when it connects and probes. Every tool runs as a fresh process in the testbed's head
namespace with the testbed's ssh_config, and its output is checked (each host must answer
with its own hostname). Wall time is from spawn to exit; for ddptui the time inside the
process (connect + run, no interpreter start-up or imports) is reported too, since a
console pays its start-up once, not per fan-out.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any

from bench.common.report import Report, Table, arg_parser, command_line, fmt_s, ratio, verdict
from bench.common.stats import interleaved, median
from bench.common.trees import ROOT, compile_bytecode

COMMAND = "hostname"
TARGET = 1.0
TOOLS = ("ddptui asyncssh", "ddptui paramiko", "pdsh -R ssh", "clush")


# -- the driver ---------------------------------------------------------------------------


def _run(argv: list[str], env: dict[str, str] | None = None) -> tuple[float, str]:
    t0 = time.monotonic()
    cp = subprocess.run(argv, capture_output=True, text=True, timeout=300, env=env, cwd=ROOT)
    wall = time.monotonic() - t0
    if cp.returncode != 0:
        raise RuntimeError(f"{argv[:8]} -> {cp.returncode}: {cp.stderr[-800:]}")
    return wall, cp.stdout


def _check(answers: dict[str, str], hosts: Sequence[str], tool: str) -> None:
    wrong = {h: answers.get(h) for h in hosts if answers.get(h) != h}
    if wrong:
        raise RuntimeError(f"{tool}: hosts answered wrongly or not at all: {wrong}")


def _prefixed(stdout: str) -> dict[str, str]:
    """pdsh and clush print `host: output` lines."""
    pairs = (line.split(": ", 1) for line in stdout.splitlines() if ": " in line)
    return {host.strip(): text.strip() for host, text in pairs}


def runners(tb: Any, hosts: list[str]) -> dict[str, Callable[[int], dict[str, float]]]:
    cfg = str(tb.ssh.ssh_config)
    head = tb.head
    hostlist = f"node[1-{len(hosts)}]"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}

    def ddptui(engine: str) -> Callable[[int], dict[str, float]]:
        def run(_: int) -> dict[str, float]:
            wall, out = _run(
                tb.ns_argv(
                    head,
                    [
                        sys.executable,
                        "-m",
                        "bench.launch.fanout_worker",
                        engine,
                        cfg,
                        ",".join(hosts),
                        COMMAND,
                    ],
                ),
                env,
            )
            data = json.loads(out.strip().splitlines()[-1])
            _check(data["answers"], hosts, engine)
            return {"wall": wall, "in process": data["in_process_s"]}

        return run

    def pdsh(_: int) -> dict[str, float]:
        pdsh_env = {**env, "PDSH_SSH_ARGS_APPEND": f"-F {cfg}"}
        wall, out = _run(
            tb.ns_argv(head, ["pdsh", "-R", "ssh", "-f", "32", "-w", hostlist, COMMAND]), pdsh_env
        )
        _check(_prefixed(out), hosts, "pdsh")
        return {"wall": wall}

    def clush(_: int) -> dict[str, float]:
        wall, out = _run(
            tb.ns_argv(head, ["clush", "-f", "32", "-o", f"-F {cfg}", "-w", hostlist, COMMAND]), env
        )
        _check(_prefixed(out), hosts, "clush")
        return {"wall": wall}

    return {
        TOOLS[0]: ddptui("asyncssh"),
        TOOLS[1]: ddptui("paramiko"),
        TOOLS[2]: pdsh,
        TOOLS[3]: clush,
    }


def single_host_costs(tb: Any, reps: int) -> dict[str, float]:
    """What one command costs on one host: root's .bashrc (pyenv init) vs a bare shell."""
    cfg = str(tb.ssh.ssh_config)
    commands = {
        "ssh node1 true (from the head namespace)": tb.ns_argv(
            tb.head, ["ssh", "-F", cfg, "node1", "true"]
        ),
        "bash -ic true (root's .bashrc, locally)": ["bash", "-ic", "true"],
        "bash --norc -ic true (no .bashrc, locally)": ["bash", "--norc", "-ic", "true"],
    }
    out: dict[str, list[float]] = {what: [] for what in commands}
    for _ in range(reps):
        for what, argv in commands.items():
            out[what].append(_run(argv)[0])
    return {k: median(v) for k, v in out.items()}


def main() -> None:
    parser = arg_parser(__doc__)
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--sizes", default="8,16,32")
    args = parser.parse_args()
    from bench.common.hosts import open_testbed

    sizes = [int(s) for s in args.sizes.split(",")]
    reps = 2 if args.quick else args.reps
    report = Report("fanout", "Fan-out: one command on many hosts", command_line())
    report.para(__doc__.split("\n\n", 1)[1].strip() if __doc__ else "")
    report.para(compile_bytecode())
    t0 = time.monotonic()
    tb = open_testbed(max(sizes))
    report.para(
        f"Testbed of {max(sizes)} hosts (namespaces + sshd each) built in "
        f"{time.monotonic() - t0:.1f} s. Command: `{COMMAND}`. N={reps} interleaved "
        f"repetitions per tool and size (after one warm-up each); fan-out width 32 "
        f"for every tool (pdsh/clush `-f 32`, ddptui's default `ssh.fanout`)."
    )
    try:
        for n in sizes:
            hosts = tb.hosts[:n]
            report.section(f"{n} hosts")
            tools = runners(tb, hosts)
            for run in tools.values():
                run(-1)
            results = interleaved(reps, tools)
            _summarize(report, results)
        report.section("Cost of one remote command (why every tool needs ~0.1 s per host)")
        costs = single_host_costs(tb, reps)
        table = Table(["what", "median wall"])
        for what, value in costs.items():
            table.add(what, fmt_s(value))
        report.table(table)
        report.para(
            "Root's `.bashrc` runs `pyenv init` for every ssh command (bash sources it when "
            "started by sshd): the table shows its cost against `bash --norc`. On 2 cores, N "
            "hosts cost about N times that in CPU whatever the tool, so it dominates at 16 and "
            "32 hosts and affects every tool alike."
        )
    finally:
        tb.close()
    report.write()


def _summarize(report: Report, results: dict[str, list[dict[str, float]]]) -> None:
    walls = {tool: median([r["wall"] for r in runs]) for tool, runs in results.items()}
    table = Table(
        ["tool", "median wall", "min", "max", "in process (median)", "vs pdsh", "vs clush"]
    )
    for tool, runs in results.items():
        values = [r["wall"] for r in runs]
        inner = [r["in process"] for r in runs if "in process" in r]
        table.add(
            tool,
            fmt_s(walls[tool]),
            fmt_s(min(values)),
            fmt_s(max(values)),
            fmt_s(median(inner)) if inner else "-",
            ratio(walls[tool], walls[TOOLS[2]]),
            ratio(walls[tool], walls[TOOLS[3]]),
        )
    report.table(table)
    for tool in TOOLS[:2]:
        worst = max(walls[tool] / walls[TOOLS[2]], walls[tool] / walls[TOOLS[3]])
        in_process = median([r["in process"] for r in results[tool]])
        worst_inner = max(in_process / walls[TOOLS[2]], in_process / walls[TOOLS[3]])
        report.para(
            f"{tool}: target <= {TARGET:.1f}x pdsh and clush: as a fresh process "
            f"{verdict(worst <= TARGET, f'worst {worst:.2f}x')}; inside a running "
            f"console (no start-up) {worst_inner:.2f}x worst: "
            f"{verdict(worst_inner <= TARGET)}."
        )


if __name__ == "__main__":
    main()
