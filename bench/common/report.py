"""Provides the benchmarks' reports: the machine and versions a run had, figures formatted,
tables, and the Markdown written to bench/results/<name>.md; and the command line every
benchmark shares (`--quick`, the "Reproduce" line).

Each benchmark prints its tables and writes the same content as Markdown, headed by the
machine and the versions it ran with.
"""

from __future__ import annotations

import argparse
import datetime as dt
import importlib.metadata
import os
import platform
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.common.trees import RESULTS, ROOT


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


def load_average() -> str:
    """This machine's load averages (1, 5, 15 minutes), as the reports print them."""
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def environment() -> dict[str, str]:
    """What a reader needs to weigh the numbers: machine, load, and every version involved."""
    return {
        "date": dt.datetime.now().astimezone().isoformat(timespec="seconds"),
        "nproc": str(os.cpu_count()),
        "cpu": _cpu_model(),
        "kernel": platform.release(),
        "load average at start": load_average(),
        "python": platform.python_version(),
        "torch": _version("torch"),
        "textual": _version("textual"),
        "asyncssh": _version("asyncssh"),
        "paramiko": _version("paramiko"),
        "OpenSSH": _tool_version(["ssh", "-V"]),
        "pdsh": _tool_version(["pdsh", "-V"]),
        "clustershell": _tool_version(["clush", "--version"]),
    }


def ratio(ours: float, theirs: float) -> str:
    return f"{ours / theirs:.2f}x" if theirs else "n/a"


def fmt_s(seconds: float) -> str:
    return f"{seconds:.3f} s" if seconds == seconds else "n/a"


def fmt_ms(seconds: float) -> str:
    return f"{seconds * 1000:.1f} ms" if seconds == seconds else "n/a"


def verdict(ok: bool, how_far: str = "") -> str:
    return "met" if ok else f"**missed**{' (' + how_far + ')' if how_far else ''}"


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
    script = Path(sys.argv[0]).resolve()
    try:
        module = ".".join(script.relative_to(ROOT).with_suffix("").parts)
    except ValueError:  # not a file of this tree
        module = f"bench.{script.stem}"
    return " ".join(["python", "-m", module, *sys.argv[1:]])
