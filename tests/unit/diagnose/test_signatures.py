"""The signature catalogue, each signature judged from a captured output (tests/data/verdicts/)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from ddptui.core.diagnose import signatures
from ddptui.core.diagnose.signatures import BY_NAME, CATALOGUE, Domain, Outlook, Source
from ddptui.core.diagnose.verdict import RankFacts, Role, judge
from ddptui.core.monitor import causes
from ddptui.core.monitor import patterns as diagnosis

CAPTURES = Path(__file__).parents[2] / "data" / "verdicts"
_ERROR = re.compile(r"\b[\w.]*(?:Error|Exception)\b: ")


def _captures() -> list[Path]:
    return sorted(CAPTURES.glob("*.log"))


def _expected(path: Path) -> str:
    return path.stem.split("--")[0]


def rank_facts(lines: list[str], node: str = "n1", rank: int = 0) -> RankFacts:
    """A failed rank as the monitor sees it: its lines' kinds and the story's cause."""
    kinds = {d.kind for line in lines if (d := diagnosis.recognise(line)) is not None}
    if any("Traceback (most recent call last)" in line for line in lines):
        kinds.add(diagnosis.TRACEBACK)
    errors = [line for line in lines if _ERROR.search(line)]
    error = errors[-1] if errors else ""
    cause = causes.cause_of(1, error, kinds)
    return RankFacts(node, rank, rank, cause, True, tuple(sorted(kinds)), tuple(lines), 1)


def test_the_catalogue_holds_a_dozen_signatures_each_with_a_capture() -> None:
    assert len(CATALOGUE) >= 12
    assert len(BY_NAME) == len(CATALOGUE)
    captured = {_expected(path) for path in _captures()}
    assert captured == set(BY_NAME)


@pytest.mark.parametrize("path", _captures(), ids=lambda p: p.stem)
def test_each_capture_is_judged_as_its_signature(path: Path) -> None:
    lines = path.read_text().splitlines()
    signature = BY_NAME[_expected(path)]
    if signature.source == Source.NODE:
        victim = RankFacts("n1", 0, 0, causes.KILLED, True, (), ("step 3",), -9)
        verdict = judge([victim], {"n0": ["all fine"], "n1": lines})
        assert verdict is not None and verdict.node == "n1" and verdict.rank == 0
        assert verdict.role == Role.INITIATING
    else:
        verdict = judge([rank_facts(lines)])
        assert verdict is not None
        assert verdict.role == (Role.CASCADE if signature.cascade else Role.INITIATING)
    assert (verdict.signature, verdict.domain, verdict.outlook) == (
        signature.name,
        signature.domain,
        signature.outlook,
    )
    assert verdict.evidence and verdict.evidence[0]


def test_the_kinds_and_causes_named_are_the_monitors_own() -> None:
    kinds = {s for sig in CATALOGUE for s in sig.kinds}
    known = (
        set(diagnosis.KINDS)
        | {causes.EXCEPTION, causes.WATCHDOG, causes.PEER, causes.STOPPED}
        | {signatures.COLLECTIVE_MISMATCH, signatures.NODE_LOST}
    )
    assert kinds <= known
    assert signatures.TEARDOWN_CAUSE == causes.TEARDOWN
    assert signatures.KILLED_CAUSE == causes.KILLED
    assert causes.VICTIM_CAUSES - {causes.TEARDOWN} == signatures.CASCADE_CAUSES


def test_infrastructure_and_job_domains_and_outlooks() -> None:
    infra = {s.name for s in CATALOGUE if s.domain == Domain.INFRASTRUCTURE}
    assert {"gpu_xid", "gpu_ecc", "host_oom_killer", "nccl_network", "node_lost"} <= infra
    assert {"slurm_node_fail", "slurm_time_limit", "slurm_preempted"} <= infra
    job = {s.name for s in CATALOGUE if s.domain == Domain.JOB}
    assert {"exception", "cuda_oom", "nan_inf", "shape_mismatch", "missing_file"} <= job
    assert "collective_mismatch" in job
    assert all(s.outlook == Outlook.FIX_FIRST for s in CATALOGUE if s.domain == Domain.JOB)


def test_an_ordinary_line_is_no_signature() -> None:
    lines = ["[ddptui:0:0]:step 10 loss 2.31", "Epoch 3 | Batchsize: 32 | Steps: 8"]
    assert signatures.identify(lines) is None
    assert signatures.identify(lines, source=Source.NODE) is None
