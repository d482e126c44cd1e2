"""Provides SlurmAllocator: get an allocation (salloc, sbatch, or the one we are inside),
show Slurm's pending reason while waiting, and give the allocation back provably.

Every wait here may be cancelled (the operator tears down while the job is pending): the
request is then scancelled and waited out of squeue before the cancellation goes on, so a
cancelled console never leaves a pending job behind.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import signal
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Protocol

from ddptui.core.backends.base import BackendError
from ddptui.core.backends.slurm import early_alloc
from ddptui.core.backends.slurm.cli import (
    JobInfo,
    SlurmError,
    SlurmQuery,
    parse_salloc_line,
    parse_sbatch_parsable,
    slurm,
)
from ddptui.core.events import AllocationChanged, Event, Notice

PR_SET_PDEATHSIG = 1
POLL_S = 1.0
# Between two looks at squeue for a job or steps to be gone: short at first (after scancel or
# a step's end, a job usually leaves squeue within a tenth of a second; a fixed 0.25 s cost a
# teardown up to that on every look), then doubling up to GONE_POLL_S.
GONE_FIRST_POLL_S = 0.05
GONE_POLL_S = 0.25
GONE_TIMEOUT_S = 120.0


def gone_pauses() -> Iterator[float]:
    """The pauses between the looks of one wait: 0.05 s, doubling up to GONE_POLL_S."""
    pause = GONE_FIRST_POLL_S
    while True:
        yield pause
        pause = min(pause * 2, GONE_POLL_S)


def _term_with_parent() -> None:
    """In salloc, before exec: SIGTERM when the console dies, so a console killed while
    its request pends withdraws the request instead of leaving a job nobody will use."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)


class _Salloc(Protocol):
    """A salloc under way, as `SlurmAllocator.salloc` reads it."""

    @property
    def returncode(self) -> int | None: ...

    async def readline(self) -> bytes: ...

    async def wait(self) -> int: ...

    def terminate(self) -> None: ...


class _OwnSalloc:
    """salloc started by the allocator."""

    def __init__(self, proc: asyncio.subprocess.Process) -> None:
        self._proc = proc

    @property
    def returncode(self) -> int | None:
        return self._proc.returncode

    async def readline(self) -> bytes:
        assert self._proc.stderr is not None
        return await self._proc.stderr.readline()

    async def wait(self) -> int:
        return await self._proc.wait()

    def terminate(self) -> None:
        self._proc.terminate()


async def _salloc(argv: Sequence[str]) -> _OwnSalloc:
    proc = await asyncio.create_subprocess_exec(
        *argv,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.PIPE,
        start_new_session=True,
        preexec_fn=_term_with_parent,
    )
    return _OwnSalloc(proc)


class _EarlySalloc:
    """salloc started early, its stderr read by its own thread (early_alloc.EarlySalloc)."""

    def __init__(self, early: early_alloc.EarlySalloc) -> None:
        self._early = early

    @property
    def returncode(self) -> int | None:
        return self._early.proc.returncode

    async def readline(self) -> bytes:
        line = await asyncio.to_thread(self._early.lines.get)
        if line is None:
            self._early.lines.put(None)  # the end, for whoever asks again
        return line or b""

    async def wait(self) -> int:
        return await asyncio.to_thread(self._early.proc.wait)

    def terminate(self) -> None:
        self._early.proc.terminate()


class SlurmAllocator:
    """Asks Slurm for nodes and reports every state of the request as AllocationChanged."""

    def __init__(self, query: SlurmQuery, emit: Callable[[Event], None], job_name: str) -> None:
        self.query = query
        self.emit = emit
        self.job_name = job_name
        self.released: set[str] = set()

    # -- salloc -----------------------------------------------------------------------------------

    async def salloc(self, argv: Sequence[str]) -> JobInfo:
        """`salloc --no-shell ...`: returns once granted; salloc's own error if refused. The
        same salloc started early (early_alloc.py) is taken over rather than run again."""
        self.emit(AllocationChanged("requested", None, (), " ".join(argv)))
        early = early_alloc.claim(argv)
        if early is None:
            await asyncio.to_thread(early_alloc.discard)  # one for another job: given back
        proc: _Salloc = _EarlySalloc(early) if early is not None else await _salloc(argv)
        job_id: str | None = None
        granted = False
        errors: list[str] = []
        info = [""]  # salloc's latest word on why it waits, read by the pending watcher
        watcher: asyncio.Task[None] | None = None
        try:
            while raw := await proc.readline():
                line = parse_salloc_line(raw.decode(errors="replace"))
                if line.kind == "error":
                    errors.append(line.text)
                elif line.kind == "info":
                    info[0] = line.text
                elif line.kind == "pending" and job_id is None and line.job_id:
                    job_id = line.job_id
                    self.emit(AllocationChanged("pending", job_id, (), info[0] or "queued"))
                    watcher = asyncio.ensure_future(self._watch_pending(job_id, info))
                elif line.kind == "granted":
                    job_id, granted = line.job_id, True
            await proc.wait()
            if not granted or job_id is None or proc.returncode != 0:
                reason = "; ".join(errors) or info[0] or f"salloc exited {proc.returncode}"
                raise BackendError(f"Slurm refused the allocation: {reason}")
            return await self._granted(job_id)
        except asyncio.CancelledError:
            await self._abandon(proc, job_id)
            raise
        except BaseException:
            if granted and job_id:
                await self.release(job_id)
            raise
        finally:
            if watcher is not None:
                watcher.cancel()

    async def _watch_pending(self, job_id: str, info: list[str]) -> None:
        """Slurm's pending reason, live: a new AllocationChanged each time it changes."""
        shown = ""
        while True:
            await asyncio.sleep(POLL_S)
            with contextlib.suppress(SlurmError):
                job = await self.query.job(job_id)
                if job is not None and job.pending and job.reason and job.reason != shown:
                    shown = job.reason
                    extra = info[0]
                    self.emit(
                        AllocationChanged(
                            "pending", job_id, (), f"{shown}: {extra}" if extra else shown
                        )
                    )

    async def _abandon(self, proc: _Salloc, job_id: str | None) -> None:
        """The operator gave up waiting: withdraw the request and show it is gone."""
        if proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                proc.terminate()  # salloc withdraws its own request on SIGTERM
        with contextlib.suppress(SlurmError):
            if job_id:
                await slurm(["scancel", job_id], check=False)
            else:
                await slurm(["scancel", f"--name={self.job_name}"], check=False)
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(proc.wait(), 10)
        if job_id:
            gone = await self.wait_gone(job_id)
            self.released.add(job_id)
            self.emit(
                AllocationChanged(
                    "released",
                    job_id,
                    (),
                    "request cancelled; gone from squeue"
                    if gone
                    else "request cancelled; still listed by squeue",
                )
            )

    async def _granted(self, job_id: str) -> JobInfo:
        job = await self.query.job(job_id)
        if job is None or not job.nodes:
            raise BackendError(f"job {job_id} was granted but squeue shows no nodes for it")
        return job

    # -- an allocation we are inside --------------------------------------------------------------

    async def existing(self, job_id: str) -> JobInfo:
        job = await self.query.job(job_id)
        if job is None or not job.running:
            state = job.state if job else "unknown to squeue"
            raise BackendError(f"SLURM_JOB_ID={job_id} is not a running allocation ({state})")
        return job

    # -- sbatch -----------------------------------------------------------------------------------

    async def submit(self, script: str) -> str:
        try:
            result = await slurm(["sbatch", "--parsable", script])
            job_id = parse_sbatch_parsable(result.stdout)
        except SlurmError as exc:
            raise BackendError(f"sbatch refused the job: {exc}") from None
        self.emit(AllocationChanged("submitted", job_id, (), script))
        return job_id

    async def wait_running(self, job_id: str) -> JobInfo:
        """Wait for a submitted job to start, showing why it pends; cancelled -> scancel."""
        shown = None
        try:
            while True:
                job = await self.query.job(job_id)
                if job is None or job.ended:
                    state = f"{job.state} {job.reason}".strip() if job else "gone from squeue"
                    raise BackendError(f"job {job_id} ended before it started ({state})")
                if job.running and job.nodes:
                    return job
                if job.pending and job.reason != shown:
                    shown = job.reason
                    self.emit(AllocationChanged("pending", job_id, (), job.reason or "queued"))
                await asyncio.sleep(POLL_S)
        except asyncio.CancelledError:
            await self.release(job_id, "request cancelled; ")
            raise

    # -- giving it back ---------------------------------------------------------------------------

    async def cancel(self, target: str) -> None:
        """scancel a job or a step (`J.S`); Slurm's complaint about one already gone is fine."""
        with contextlib.suppress(SlurmError):
            await slurm(["scancel", target], check=False)

    async def signal(self, target: str, name: str) -> None:
        """Send a signal to a job's or step's tasks without cancelling it (`scancel -s`)."""
        with contextlib.suppress(SlurmError):
            await slurm(["scancel", f"--signal={name}", target], check=False)

    async def wait_gone(self, job_id: str) -> bool:
        """Until squeue no longer lists the job as pending, running or completing."""
        deadline = time.monotonic() + GONE_TIMEOUT_S
        pauses = gone_pauses()
        while time.monotonic() < deadline:
            with contextlib.suppress(SlurmError):
                job = await self.query.job(job_id)
                if job is None or job.ended:
                    return True
            await asyncio.sleep(next(pauses))
        return False

    async def release(self, job_id: str, why: str = "") -> bool:
        """scancel the job and wait until squeue no longer lists it (once per job)."""
        if job_id in self.released:
            return True
        self.released.add(job_id)
        await self.cancel(job_id)
        gone = await self.wait_gone(job_id)
        if gone:
            self.emit(AllocationChanged("released", job_id, (), f"{why}gone from squeue"))
        else:
            self.emit(Notice("error", f"job {job_id} is still listed by squeue after scancel"))
        return gone

    async def wait_steps_gone(
        self, job_id: str, names: Sequence[str], timeout: float = GONE_TIMEOUT_S
    ) -> bool:
        deadline = time.monotonic() + timeout
        pauses = gone_pauses()
        while time.monotonic() < deadline:
            with contextlib.suppress(SlurmError):
                if not [s for s in await self.query.steps(job_id) if s.name in names]:
                    return True
            await asyncio.sleep(next(pauses))
        return False
