"""SlurmAllocator's waits for a job or its steps to leave squeue (pure logic: a fake query)."""

from __future__ import annotations

import asyncio
import itertools

import pytest

from ddptui.core.backends.slurm import allocator
from ddptui.core.backends.slurm.allocator import GONE_POLL_S, SlurmAllocator, gone_pauses
from ddptui.core.backends.slurm.query import JobInfo, StepInfo


def test_the_pauses_start_short_and_double_up_to_the_longest() -> None:
    pauses = list(itertools.islice(gone_pauses(), 6))
    assert pauses[0] <= 0.05
    assert all(b == min(2 * a, GONE_POLL_S) for a, b in itertools.pairwise(pauses))
    assert pauses[-1] == GONE_POLL_S


class _Query:
    """squeue as a list of answers, one per look (the last one repeated)."""

    name = "fake"

    def __init__(self, jobs: list[JobInfo | None], steps: list[list[StepInfo]]) -> None:
        self.jobs, self.steps_seen, self.looks = jobs, steps, 0

    async def job(self, job_id: str) -> JobInfo | None:
        self.looks += 1
        return self.jobs[min(self.looks, len(self.jobs)) - 1]

    async def steps(self, job_id: str) -> list[StepInfo]:
        self.looks += 1
        return self.steps_seen[min(self.looks, len(self.steps_seen)) - 1]


@pytest.fixture
def slept(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    pauses: list[float] = []
    real_sleep = asyncio.sleep

    async def sleep(seconds: float) -> None:
        pauses.append(seconds)
        await real_sleep(0)

    monkeypatch.setattr(allocator.asyncio, "sleep", sleep)
    return pauses


async def test_a_job_completing_for_three_looks_is_looked_at_soon_after(
    slept: list[float],
) -> None:
    completing = JobInfo("7", "ddptui-r", ("CANCELLED", "COMPLETING"))
    query = _Query([completing] * 3 + [JobInfo("7", "ddptui-r", ("CANCELLED",))], [])
    events: list[object] = []
    alloc = SlurmAllocator(query, events.append, "ddptui-r")  # type: ignore[arg-type]
    assert await alloc.wait_gone("7")
    assert query.looks == 4
    assert slept == list(itertools.islice(gone_pauses(), 3))
    assert sum(slept) < 3 * GONE_POLL_S  # each look sooner than a fixed pause would allow


async def test_steps_listed_twice_then_gone(slept: list[float]) -> None:
    step = StepInfo("7.0", "ddptui-r-step")
    query = _Query([], [[step], [step], []])
    alloc = SlurmAllocator(query, lambda _: None, "ddptui-r")  # type: ignore[arg-type]
    assert await alloc.wait_steps_gone("7", ["ddptui-r-step"], timeout=60)
    assert query.looks == 3
    assert slept == list(itertools.islice(gone_pauses(), 2))


async def test_a_job_that_never_leaves_is_given_up_at_the_timeout(
    slept: list[float], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(allocator, "GONE_TIMEOUT_S", 0.0)
    query = _Query([JobInfo("7", "ddptui-r", ("RUNNING",))], [])
    alloc = SlurmAllocator(query, lambda _: None, "ddptui-r")  # type: ignore[arg-type]
    assert not await alloc.wait_gone("7")
