"""Provides the fleet benchmark's report (bench/fleet/fleet.py): the tables, the verdicts
against the targets, and the notes on where the time goes."""

from __future__ import annotations

from typing import Any

from bench.common.report import Report, Table, fmt_ms, fmt_s, ratio, verdict
from bench.common.stats import median

Sample = dict[str, Any]  # one run's figures
BASE = "ddptui (base)"  # the baseline tree's runs, when `--baseline` is given

NOTES = """\
Per host, pdsh runs one `ssh` process (the key exchange in C, the processes spread over both
cores) and one remote shell. ddptui runs, from one Python process, one asyncssh connection and
one remote command, the node helper's `launch` (`python3 -S -c`, its program read whole from
stdin: it checks the rendezvous port on the first host, picks GLOO/NCCL_SOCKET_IFNAME for the
address it was reached at, starts the agent detached and streams its log, all in one
process). Each host is started as soon as its own connection and the first host's are up
(the first host's address is the rendezvous endpoint), not once every host is connected, so
"all connected" and "all started" in the steps table overlap: their difference is what the
last hosts' launches add after the last handshake. On this testbed every host's sshd and
helper run on the same 2 cores as the console, so the launches that overlap the handshakes
also take CPU from them ("all connected" comes later than when nothing else runs beside
them); on a real cluster the helpers run on the nodes' own CPUs and the overlap is free. The
helper costs ~26 ms of CPU per command here (python3 -S alone ~8 ms, compiling its 37 KB
~8 ms, json ~5 ms), down from ~52 ms: CPython parses a program given as `python3 -` from the
pipe one character at a time (~20 ms for this one), and contextlib, shutil, threading and
signal were imported for every verb. What is left beyond pdsh's work: the console's start-up
(imports, 0.4-0.5 s of CPU idle) and every handshake in one Python process, where pdsh's
`ssh` processes spread over both cores. Teardown is faster than pdsh's because ddptui's reap
runs over the connections it already holds, where `pdsh pkill` opens a new one per host.

Teardown, per host: one command over the held connection runs the reaper (`python3 -S -c`,
the reaper alone on stdin: 27 KB to compile, not the whole 52 KB helper), which looks at every
process's environment for the job's tag once to find the job and once more, after it is gone,
as the proof. This testbed's 512 hosts share one /proc, so each look reads the environment of
every process of every host (sshd, sessions, helpers, stand-ins: thousands), twice a host; it
reads each with bare os.open/os.read (a Python file object adds an fstat and a second read per
process). On a real cluster each host reads its own few hundred. All hosts are reaped at once
(a reap mostly waits for the job's processes to end), so on 2 shared cores their proofs come
at nearly the same moment; each goes out as it comes.

Scale on this machine: the kernel's ARP table is one for all namespaces and holds 1,024
entries by default; a 512-host testbed overflows it, so the testbed raises gc_thresh1-3 for its
size, and gives the head and every host permanent ARP entries for each other: 512 connects
at once flood the one bridge with ARP broadcasts copied to every port, and a host whose
requests were dropped failed with "No route to host". Two costs grew with the square of the
number of hosts and are gone: asyncssh parsed the whole ssh_config (a block per host) for
every connection, twice (now each host gets its own slice of it:
ddptui/core/backends/ssh/config_slice.py), and every host's known_hosts lookup tested every
line's patterns (now plain names are indexed, and the files read once)."""


def summarize(
    report: Report, n: int, reps: int, runs: dict[str, list[Sample]], cut: Sample | None
) -> None:
    extra = len(runs["ddptui"]) - reps
    more = f", then {extra} more ddptui runs" if extra else ""
    report.section(f"Launch and teardown, {n} hosts (N={reps} interleaved{more})")
    table = Table(
        ["tool", "launch median", "min", "max", "teardown median", "min", "max", "dirty hosts"]
    )
    for tool, samples in runs.items():
        launch = [s["launch"] for s in samples]
        down = [s["teardown"] for s in samples]
        table.add(
            tool,
            fmt_s(median(launch)),
            fmt_s(min(launch)),
            fmt_s(max(launch)),
            fmt_s(median(down)),
            fmt_s(min(down)),
            fmt_s(max(down)),
            " ".join(str(s["dirty hosts"]) for s in samples),
        )
    report.table(table)
    ours = runs["ddptui"]
    steps = Table(["ddptui step (median, s since its start)", "seconds"])
    for key in ("first event", "first connect", "all connected", "all started", "launch"):
        name = key if key != "launch" else "all ranks running"
        steps.add(name, fmt_s(median([s[key] for s in ours])))
    report.table(steps)
    trees = [t for t in ("ddptui", BASE) if t in runs]
    proofs = Table(["teardown step (median, s since SIGTERM)", *trees])
    for key, name in (
        ("first proof", "first host's proof"),
        ("all proofs", "every host's proof"),
        ("teardown", "process ended"),
    ):
        medians = [median([s.get(key, float("nan")) for s in runs[t]]) for t in trees]
        proofs.add(name, *map(fmt_s, medians))
    report.table(proofs)
    if BASE in runs:
        base = runs[BASE]
        for what in ("launch", "teardown"):
            mine, theirs = median([s[what] for s in ours]), median([s[what] for s in base])
            report.para(
                f"{what.capitalize()}: this tree / the baseline = {ratio(mine, theirs)}; the "
                f"baseline / pdsh = {ratio(theirs, median([s[what] for s in runs['pdsh']]))}."
            )
    our_launch = median([s["launch"] for s in ours])
    launch_r = our_launch / median([s["launch"] for s in runs["pdsh"]])
    down_r = median([s["teardown"] for s in ours]) / median([s["teardown"] for s in runs["pdsh"]])
    clush = [s["launch"] for s in runs.get("clush", [])]
    clush_ratio = ratio(our_launch, median(clush)) if clush else "not run"
    rss = max(s["peak rss MB"] for s in ours)
    dirty = sum(s["dirty hosts"] for s in ours)
    unclean = [s["reported not clean"] for s in ours]
    report.para(
        f"ddptui launch / pdsh = {launch_r:.2f}x (target <= 1.0x: "
        f"{verdict(launch_r <= 1.0, f'{launch_r - 1:+.0%}')}); teardown / pdsh = {down_r:.2f}x "
        f"(target <= 1.0x: {verdict(down_r <= 1.0, f'{down_r - 1:+.0%}')}); launch / clush = "
        f"{clush_ratio}; peak RSS {rss:.0f} MB (target < 500 MB: "
        f"{verdict(rss < 500)}); hosts left dirty in {len(ours)} runs: {dirty} (target 0: "
        f"{verdict(dirty == 0)}); hosts ddptui itself reported not clean: {unclean}."
    )
    if cut is not None:
        reported = set(cut["reported not clean"])
        expected = set(cut["cut"])
        which = "exactly the cut ones" if reported == expected else sorted(reported ^ expected)
        report.section(f"Link cut to {len(expected)} of {n} hosts once every rank runs")
        report.para(
            f"Teardown took {fmt_s(cut['teardown'])}; hosts reported not clean: "
            f"{len(reported)} ({which}); healthy hosts left dirty: {cut['dirty hosts']} "
            f"({verdict(reported == expected and cut['dirty hosts'] == 0)})."
        )


KEYS_NOTES = """\
Where a key's time went at 512 hosts. With the app idle and no job, `]` alone took 39-165 ms
at 512 nodes (16-31 ms at 16; `]` 20 times, FrameProbe). The log deck was Textual's
TabbedContent: a Tab widget per log in one row, so each switch laid out 513 tab widgets, and
TabbedContent's `_watch_active` queried them twice. The deck now has one tab bar widget
(ddptui/ui/widgets/logs/log_tabs.py) that draws, in one row, only the tabs in sight around
the one showing, with `‹N` and `N›` for how many lie either side, and a ContentSwitcher that
shows one log view and hides the last: a switch lays out no tabs and queries none, and a
node's new state mark redraws one row. Idle `]` at 512 nodes now takes 15-20 ms (11-21 ms at
16). The console also leaves more of the CPU it shares with the hosts on this testbed: with
the previous deck its launch took 57-74 s and its teardown 86-96 s, with this one 34-41 s and
58-63 s (two sweeps of 2 runs per tree). At the lowest weight under a load of 300-500 the
hosts' sshd can starve: in 3 of those 8 runs the console could not prove every host (both
base runs of the first sweep, ~500 hosts each, their reaps timed out or their connections
stopped answering keepalives; this tree's first run of the second, 8 hosts whose held
connections were lost to unanswered keepalives, their jobs left running and reported as not
checked). A reap whose held connection was lost is now tried once more over a new one (a
reap that ran out of time is not: the teardown would wait as long again)."""


def summarize_ui(report: Report, n: int, uis: dict[str, list[Sample]]) -> None:
    """The console runs with keys probed: each tree's runs, in the order they ran."""
    report.section(f"Keys in the console while it launches on and tears down {n} hosts")
    table = Table(["tree", "run", "phase", "presses", "lost", "p50", "p99"])
    for label, samples in uis.items():
        for i, ui in enumerate(samples, 1):
            for phase, name in (("keys_launch", "launch"), ("keys_teardown", "teardown")):
                k = ui[phase]
                table.add(
                    label, str(i), name, str(k["n"]), str(k["lost"]),
                    fmt_ms(k["p50"]), fmt_ms(k["p99"]),
                )  # fmt: skip
            k = ui["keys"]
            table.add(label, str(i), "all", str(k["n"]), str(k["lost"]), fmt_ms(k["p50"]),
                      f"**{fmt_ms(k['p99'])}**")  # fmt: skip
    report.table(table)
    report.para(
        "The real DdpApp under Pilot (160x45), `l` to launch, then `]`, `up`, `end` in turn "
        "until every rank runs, then teardown with keys still pressed."
    )
    report.para(KEYS_NOTES)
    for label, samples in uis.items():
        for i, ui in enumerate(samples, 1):
            keys = ui["keys"]
            ok = keys["p99"] < 0.1 and keys["lost"] == 0
            keys_over = f"{(keys['p99'] - 0.1) * 1000:+.0f}"
            report.para(
                f"{label}, run {i} (console of {ui.get('tree', '?')}): launch took "
                f"{fmt_s(ui['launch_s'])} in the console (all running: {ui['all_running']}), "
                f"teardown {fmt_s(ui['teardown_s'])} (every host proven clean: {ui['clean']}"
                f"{_not_clean(ui.get('not_clean') or {})}; dirty from outside: "
                f"{ui['dirty hosts']}{_left(ui.get('left') or {})}); "
                f"frame p99 {fmt_ms(ui['frame_p99'])}; peak RSS "
                f"{ui['rss_mb']:.0f} MB. Key p99 {fmt_ms(keys['p99'])} with {keys['lost']} lost "
                f"(target < 100 ms, none lost: {verdict(ok, f'{keys_over} ms over')})."
            )


def _left(hosts: dict[str, list[str]]) -> str:
    """What the check from outside found left on the first few dirty hosts."""
    if not hosts:
        return ""
    return " (" + "; ".join(f"{host}: {', '.join(procs)}" for host, procs in hosts.items()) + ")"


def _not_clean(hosts: dict[str, str]) -> str:
    """The hosts the console did not prove clean, and why, for the report (at most 5)."""
    if not hosts:
        return ""
    said = "; ".join(f"{node}: {detail}" for node, detail in list(hosts.items())[:5])
    return f", not proven: {len(hosts)} ({said})"
