"""Provides where the tree under test lies (the repository, its benchmarks, their results, the
trainers), how a tree of ddptui is named in a report, and its bytecode compiled ahead."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
BENCH = ROOT / "bench"
RESULTS = BENCH / "results"
TRAINER = ROOT / "trainer"


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
