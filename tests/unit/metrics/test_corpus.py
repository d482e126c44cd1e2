"""The line readers against the corpus of metric lines as public training code prints them.

`tests/data/metrics/corpus.toml` holds each line with the step and values a reader sees in
it; `noise.log`, lines with numbers that are no metric. The score is printed (`-s`), with the
lines read wrong.
"""

from __future__ import annotations

import math
import tomllib
from dataclasses import dataclass
from typing import Any

import pytest

from ddptui.core.metrics.formats import LineMetrics, parse_line
from ddptui.core.metrics.reader import MetricReader
from tests.cases import DATA

CORPUS = tomllib.loads((DATA / "metrics" / "corpus.toml").read_text(encoding="utf-8"))["metric"]
NOISE = (DATA / "metrics" / "noise.log").read_text(encoding="utf-8").splitlines()
PASS_MARK = 0.95


@dataclass(frozen=True)
class Miss:
    source: str
    line: str
    wanted: tuple[int | None, dict[str, float]]
    read: LineMetrics | None

    def __str__(self) -> str:
        return f"{self.source}\n    {self.line}\n    wanted {self.wanted}\n    read   {self.read}"


def _same(wanted: dict[str, float], read: dict[str, float]) -> bool:
    if wanted.keys() != read.keys():
        return False
    return all(
        (math.isnan(w) and math.isnan(read[k])) or math.isclose(w, read[k], rel_tol=1e-9)
        for k, w in wanted.items()
    )


def read_entry(entry: dict[str, Any]) -> LineMetrics | None:
    """The line as a rank's reader takes it: after its table's header, if it has one."""
    reader = MetricReader()
    if "header" in entry:
        assert reader.read(0, entry["header"]) is None  # a header is no metric
    return reader.read_text(entry["line"], rank=0)


def misses() -> list[Miss]:
    found = []
    for entry in CORPUS:
        read = read_entry(entry)
        wanted = (entry.get("step"), entry["values"])
        if read is None or read.step != wanted[0] or not _same(wanted[1], dict(read.values)):
            found.append(Miss(entry["source"], entry["line"], wanted, read))
    return found


def test_the_corpus_is_wide() -> None:
    projects = {entry["source"].split()[0] for entry in CORPUS if "/" in entry["source"]}
    assert len(CORPUS) >= 60 and len(projects) >= 25
    assert all(entry["values"] for entry in CORPUS)


def test_the_corpus_reads_right() -> None:
    missed = misses()
    score = 1 - len(missed) / len(CORPUS)
    report = "\n".join(str(miss) for miss in missed)
    print(f"\nmetric corpus: {len(CORPUS) - len(missed)}/{len(CORPUS)} read right ({score:.1%})")
    print(report)
    assert score >= PASS_MARK, report


def test_lines_without_a_header_are_read_alone() -> None:
    """Every line but a table's rows reads with no state at all (`parse_line`)."""
    for entry in CORPUS:
        if "header" not in entry:
            alone, by_reader = parse_line(entry["line"]), read_entry(entry)
            assert alone is not None and by_reader is not None and alone.step == by_reader.step
            assert _same(dict(alone.values), dict(by_reader.values))


@pytest.mark.parametrize("line", NOISE)
def test_real_noise_is_no_metric(line: str) -> None:
    assert parse_line(line) is None
    reader = MetricReader()
    assert reader.read(0, line) is None and reader.read_text(line, rank=0) is None
