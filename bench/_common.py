"""Provides what every benchmark shares: the machine's description, statistics, tables, reports.

Each benchmark prints its tables and writes the same content as Markdown to
bench/results/<name>.md, headed by the machine and the versions it ran with. The machine is a
shared 2-core box, so figures are medians of repeated runs and every comparison is a ratio
against the alternative measured in the same run (interleaved A, B, A, B ...).
"""

from __future__ import annotations

import argparse
import datetime as dt
import importlib.metadata
import os
import platform
import resource
import statistics
import subprocess
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

ROOT = Path(__file__).resolve().parents[1]
BENCH = ROOT / "bench"
RESULTS = BENCH / "results"
TRAINER = ROOT / "trainer"

T = TypeVar("T")


# -- the machine --------------------------------------------------------------------------


def describe_tree(tree: str | Path) -> str:
    """A tree of ddptui (a baseline) as `path @ commit subject`, for a report."""
    cp = subprocess.run(
        ["git", "-C", str(tree), "log", "-1", "--format=%h %s"], capture_output=True, text=True
    )
    return f"{tree} @ {cp.stdout.strip()[:100]}"


def compile_bytecode(*trees: Path) -> str:
    """Compile the console's sources (and the benchmarks', and those of other `trees` of
    ddptui run beside it) to bytecode in their __pycache__.

    Why: an installed console runs from bytecode (pip compiles it at install), but this
    machine sets PYTHONDONTWRITEBYTECODE=1 and runs the sources in place, so every fresh
    `ddptui` would compile its own modules again (0.4-0.8 s of CPU at a load of 10-15). The
    __pycache__ directories are git-ignored; Python recompiles any module changed since.
    Returns the sentence the results files say it with.
    """
    subprocess.run(
        [sys.executable, "-m", "compileall", "-q", str(ROOT / "ddptui"), str(BENCH)]
        + [str(Path(tree) / "ddptui") for tree in trees],
        check=True,
        stdout=subprocess.DEVNULL,
        env={k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"},
    )
    return (
        "ddptui runs from its bytecode, as an installed package does (compiled first: this "
        "machine sets PYTHONDONTWRITEBYTECODE=1, which would make every fresh process compile "
        "the console's sources again)."
    )


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "?"


def _version(package: str) -> str:
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


def _tool_version(argv: Sequence[str]) -> str:
    try:
        cp = subprocess.run(list(argv), capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return "not installed"
    text = (cp.stdout + cp.stderr).strip().splitlines()
    return text[0].strip() if text else "?"


def environment() -> dict[str, str]:
    """What a reader needs to weigh the numbers: machine, load, and every version involved."""
    load = os.getloadavg()
    return {
        "date": dt.datetime.now().astimezone().isoformat(timespec="seconds"),
        "nproc": str(os.cpu_count()),
        "cpu": _cpu_model(),
        "kernel": platform.release(),
        "load average at start": " ".join(f"{x:.2f}" for x in load),
        "python": platform.python_version(),
        "torch": _version("torch"),
        "textual": _version("textual"),
        "asyncssh": _version("asyncssh"),
        "paramiko": _version("paramiko"),
        "OpenSSH": _tool_version(["ssh", "-V"]),
        "pdsh": _tool_version(["pdsh", "-V"]),
        "clustershell": _tool_version(["clush", "--version"]),
    }


def peak_rss_mb() -> float:
    """This process's peak resident set size (Linux reports KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def cpu_s() -> float:
    """This process's CPU time so far (user + system, all its threads; not its children)."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


# -- statistics ---------------------------------------------------------------------------


def median(values: Sequence[float]) -> float:
    return statistics.median(values) if values else float("nan")


def percentile(values: Sequence[float], p: float) -> float:
    """Nearest-rank percentile (p in 0..100); nan for no values."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    k = max(0, min(len(ordered) - 1, round(p / 100 * len(ordered) + 0.5) - 1))
    return ordered[k]


def interleaved(reps: int, runners: dict[str, Callable[[int], T]]) -> dict[str, list[T]]:
    """Run each runner `reps` times, alternating A, B, A, B ... so drift hits all alike."""
    out: dict[str, list[T]] = {name: [] for name in runners}
    for i in range(reps):
        for name, run in runners.items():
            out[name].append(run(i))
            print(f"  [{i + 1}/{reps}] {name}: {_short(out[name][-1])}", flush=True)
    return out


def _short(value: object) -> str:
    if isinstance(value, float):
        return f"{value:.3f}"
    if isinstance(value, dict):
        return ", ".join(f"{k}={_short(v)}" for k, v in list(value.items())[:6])
    return str(value)


def ratio(ours: float, theirs: float) -> str:
    return f"{ours / theirs:.2f}x" if theirs else "n/a"


def fmt_s(seconds: float) -> str:
    return f"{seconds:.3f} s" if seconds == seconds else "n/a"


def fmt_ms(seconds: float) -> str:
    return f"{seconds * 1000:.1f} ms" if seconds == seconds else "n/a"


def verdict(ok: bool, how_far: str = "") -> str:
    return "met" if ok else f"**missed**{' (' + how_far + ')' if how_far else ''}"


# -- tables and reports -------------------------------------------------------------------


@dataclass
class Table:
    headers: list[str]
    rows: list[list[str]] = field(default_factory=list)

    def add(self, *cells: object) -> None:
        self.rows.append([str(c) for c in cells])

    def text(self) -> str:
        columns = zip(self.headers, *self.rows, strict=True)
        widths = [max(len(str(x)) for x in col) for col in columns]
        line = "  ".join(h.ljust(w) for h, w in zip(self.headers, widths, strict=True))
        rule = "  ".join("-" * w for w in widths)
        body = ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)) for r in self.rows]
        return "\n".join([line, rule, *body])

    def markdown(self) -> str:
        rows = [self.headers, ["---"] * len(self.headers), *self.rows]
        return "\n".join("| " + " | ".join(c.replace("|", "\\|") for c in r) + " |" for r in rows)


@dataclass
class Report:
    """One benchmark's results: printed as it goes, written as Markdown at the end."""

    name: str
    title: str
    command: str
    env: dict[str, str] = field(default_factory=environment)
    parts: list[tuple[str, Any]] = field(default_factory=list)

    def section(self, heading: str) -> None:
        self.parts.append(("h", heading))
        print(f"\n== {heading} ==")

    def para(self, text: str) -> None:
        self.parts.append(("p", text))
        print(text)

    def table(self, table: Table) -> None:
        self.parts.append(("t", table))
        print(table.text())

    def markdown(self) -> str:
        out = [f"# {self.title}", "", f"Reproduce: `{self.command}`", ""]
        out += ["| machine / version | |", "| --- | --- |"]
        out += [f"| {k} | {v} |" for k, v in self.env.items()]
        for kind, item in self.parts:
            out.append("")
            if kind == "h":
                out.append(f"## {item}")
            elif kind == "p":
                out.append(item)
            else:
                out.append(item.markdown())
        return "\n".join(out) + "\n"

    def write(self) -> Path:
        RESULTS.mkdir(parents=True, exist_ok=True)
        path = RESULTS / f"{self.name}.md"
        path.write_text(self.markdown())
        print(f"\nwritten: {path.relative_to(ROOT)}")
        return path


def arg_parser(doc: str | None) -> argparse.ArgumentParser:
    """Every benchmark takes --reps and --quick (a smoke run: fewer, shorter repetitions)."""
    parser = argparse.ArgumentParser(description=(doc or "").strip().splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smoke run, not for the record")
    return parser


def command_line() -> str:
    """How this benchmark was started, for the report's "Reproduce" line."""
    module = Path(sys.argv[0]).stem
    return " ".join(["python", "-m", f"bench.{module}", *sys.argv[1:]])
