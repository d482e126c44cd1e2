"""Provides the early allocation: `ddptui run --headless` on Slurm asks for its nodes as soon
as the job is known, while the rest of the console is still being imported.

Why: from the job's spec to the allocator's salloc the headless console imports its session,
monitor and diagnosis (0.1-0.2 s at 64 nodes on a shared host), and after the grant it asks
scontrol for the job and for the nodes' addresses before the step can start. salloc
and those two questions take about that long, so they are made here, in a thread, meanwhile:
`request` starts salloc (the very command the allocator would run, with the run's id in its
job name), and the thread reads what salloc says and, once it is granted, asks the same two
questions the backend asks next.

The allocator `claim`s the salloc when it would run exactly that command, and reads its lines
as its own (pending reasons, errors, the grant); `slurm()` (cli.py) then takes each early
answer once, for exactly the command it answers (one still under way is waited for). What
nobody claims is given back by `discard` (salloc stopped, the job scancelled), which
`ddptui`'s exit always runs.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import queue
import signal
import subprocess
import sys
import threading
from collections.abc import Sequence
from concurrent.futures import Future
from typing import TYPE_CHECKING

import hostlist

from ddptui.core.backends.slurm.cli import (
    CLI_TIMEOUT_S,
    answer_ahead,
    job_argv,
    parse_salloc_line,
    parse_scontrol_job,
)
from ddptui.core.backends.transport import CommandResult

if TYPE_CHECKING:
    from ddptui.core.job.spec import JobSpec

PR_SET_PDEATHSIG = 1
DISCARD_WAIT_S = 10.0


def _term_with_parent() -> None:
    """In salloc, before exec: SIGTERM when the console dies (allocator._term_with_parent)."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)


def _run(argv: Sequence[str]) -> CommandResult:
    done = subprocess.run(
        list(argv), stdin=subprocess.DEVNULL, capture_output=True, timeout=CLI_TIMEOUT_S
    )
    return CommandResult(
        done.returncode,
        done.stdout.decode(errors="replace"),
        done.stderr.decode(errors="replace"),
    )


class EarlySalloc:
    """salloc started ahead: its stderr lines as they come (`lines`, None at the end), and
    once granted, the answers to the backend's next questions (`answers`, by command)."""

    def __init__(self, argv: Sequence[str], nodes: int) -> None:
        self.argv = list(argv)
        self.lines: queue.Queue[bytes | None] = queue.Queue()
        self.answers: dict[tuple[str, ...], Future[CommandResult]] = {}
        self.job_id: str | None = None
        self._nodes = nodes
        self._lock = threading.Lock()
        self._claimed: bool | None = False  # None: discarded
        self.proc = subprocess.Popen(
            self.argv,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            start_new_session=True,
            preexec_fn=_term_with_parent,  # in this (the main) thread: it outlives salloc
        )
        self.thread = threading.Thread(target=self._read, name="early salloc", daemon=True)
        self.thread.start()

    def _read(self) -> None:
        assert self.proc.stderr is not None
        granted = False
        for raw in iter(self.proc.stderr.readline, b""):
            line = parse_salloc_line(raw.decode(errors="replace"))
            if line.job_id and line.kind in ("pending", "granted"):
                self.job_id = line.job_id
            granted = granted or line.kind == "granted"
            self.lines.put(raw)
        self.proc.wait()
        granted = granted and self.proc.returncode == 0 and self.job_id is not None
        question = tuple(job_argv(self.job_id or ""))
        asked = self._expect(question) if granted else None
        self.lines.put(None)
        if asked is not None:
            self._ask_ahead(question, asked)

    def _expect(self, argv: tuple[str, ...]) -> Future[CommandResult] | None:
        """An answer to come, registered before anyone may ask for it."""
        with self._lock:
            if self._claimed is None:  # discarded meanwhile
                return None
            asked: Future[CommandResult] = Future()
            self.answers[argv] = asked
            return asked

    def _ask_ahead(self, job: tuple[str, ...], asked: Future[CommandResult]) -> None:
        """The job's record (`job`), then its nodes' addresses, as the backend asks next
        (CliQuery.job, .node_addresses); each answer is registered before the one before
        it is told, so no question of the backend's comes in between."""
        try:
            answer = _run(job)
        except (OSError, subprocess.SubprocessError) as exc:
            asked.set_exception(exc)
            return
        command = self._nodes_command(answer)
        nodes = self._expect(command) if command is not None else None
        asked.set_result(answer)
        if command is None or nodes is None:
            return
        try:
            nodes.set_result(_run(command))
        except (OSError, subprocess.SubprocessError) as exc:
            nodes.set_exception(exc)

    def _nodes_command(self, answer: CommandResult) -> tuple[str, ...] | None:
        """`scontrol -o show node` of the job's first nodes, as CliQuery.node_addresses."""
        if answer.exit_code != 0:
            return None
        try:
            job = parse_scontrol_job(answer.stdout, self.job_id or "")
            if job is None or not job.nodes:
                return None
            names: list[str] = hostlist.expand_hostlist(job.nodes)[: self._nodes]
        except (ValueError, hostlist.BadHostlist):
            return None
        return ("scontrol", "-o", "show", "node", ",".join(names))

    def claim(self, argv: Sequence[str]) -> bool:
        with self._lock:
            if self._claimed is not False or list(argv) != self.argv:
                return False
            self._claimed = True
            return True

    def answer(self, argv: Sequence[str]) -> Future[CommandResult] | None:
        """The early answer to exactly this command, once; None when there is none."""
        with self._lock:
            if self._claimed is not True:
                return None
            return self.answers.pop(tuple(argv), None)

    def discard(self) -> None:
        """Unclaimed: stop salloc (it withdraws a pending request) and scancel its job."""
        with self._lock:
            if self._claimed is not False:
                return
            self._claimed = None
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                self.proc.terminate()
        self.thread.join(DISCARD_WAIT_S)
        names = [a for a in self.argv if a.startswith("--job-name=")]
        # the job's id once salloc said it; else its name (stopped before it said anything)
        target = [self.job_id] if self.job_id else [f"--name={n.partition('=')[2]}" for n in names]
        if target:
            with contextlib.suppress(OSError, subprocess.SubprocessError):
                _run(["scancel", *target])


_early: EarlySalloc | None = None


def request(argv: Sequence[str], nodes: int) -> None:
    """Start salloc `argv` now (a job of `nodes` nodes), for the allocator to claim."""
    global _early
    discard()
    with contextlib.suppress(OSError):
        _early = EarlySalloc(argv, nodes)


def claim(argv: Sequence[str]) -> EarlySalloc | None:
    """The early salloc, if it runs exactly `argv` and nobody claimed it yet; its answers
    to the questions after the grant go to `slurm()` from now on."""
    if _early is None or not _early.claim(argv):
        return None
    answer_ahead(_early.answer)
    return _early


def discard() -> None:
    """Give back an early salloc nobody claimed."""
    global _early
    early, _early = _early, None
    if early is not None:
        early.discard()


def allocate_ahead(spec: JobSpec) -> str | None:
    """A headless run on a new Slurm allocation: salloc goes out now, named after the run's
    id (returned), for the backend's allocator to take over. DDPTUI_EARLY_SALLOC=0 turns it
    off. None when there is none."""
    if os.environ.get("DDPTUI_EARLY_SALLOC") == "0":
        return None
    from ddptui.core.backends.slurm.commands import resolve_mode, salloc_argv
    from ddptui.core.job.spec import SpecError
    from ddptui.core.runs.run_dir import new_run_id

    try:
        if resolve_mode(spec) != "salloc":
            return None
    except SpecError:
        return None  # the backend says it in its own words
    run_id = new_run_id()
    # Until headless mode takes the signals over, TERM and HUP end ddptui through its exit
    # (which gives the allocation back), not at once as by default.
    for number in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(number, _exit_on_signal)
    request(salloc_argv(spec, run_id), spec.nodes)
    if spec.slurm.launch != "srun":  # the one step's supervisor too (supervisor.py)
        from ddptui.core.backends.slurm import supervisor
        from ddptui.core.node import job_helper_source

        supervisor.start_ahead(sys.executable, job_helper_source(), "launch")
    return run_id


def _exit_on_signal(number: int, _frame: object) -> None:
    raise SystemExit(128 + number)
