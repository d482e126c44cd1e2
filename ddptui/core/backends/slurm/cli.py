"""Provides the Slurm CLI as async calls, parsers of what it prints, and CliQuery.

CliQuery answers SlurmQuery (query.py), the read-only questions the backend asks, with
`scontrol -o show job`, `squeue -s`, `scontrol -o show node`: the path this project tests
against Slurm 22.05. Every question names its job or nodes, so the controller answers with
those alone, whatever else is queued (`squeue --json` sends every job it knows: in 22.05 it
ignores -j).
`choose_query()` picks the pyslurm adapter instead only where `import pyslurm` works and
pyslurm was built for the Slurm that `scontrol --version` reports (pyslurm binds exactly one
Slurm release and fails on any other).
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
import ipaddress
import os
import re
import socket
import subprocess
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass

import hostlist

from ddptui.core.backends.slurm.query import (
    JobInfo,
    SlurmQuery,
    StepInfo,
    job_states,
)
from ddptui.core.backends.transport import CommandResult, LocalTransport, TransportError

_SALLOC = re.compile(r"^salloc: (?:(error): )?(.*)$")
_PENDING = re.compile(r"Pending job allocation (\d+)")
_GRANTED = re.compile(r"Granted job allocation (\d+)")
_QUEUED = re.compile(r"job (\d+) queued and waiting for resources")
_NODE_ADDR = re.compile(r"\bNodeAddr=(\S+)")
_NODE_NAME = re.compile(r"^NodeName=(\S+)")
_VERSION = re.compile(r"(\d+)\.(\d+)")
# `scontrol -o show job`: KEY=VALUE words; a job's name and its pending reason may hold spaces
_JOB_WORD = re.compile(
    r"(?:^|\s)(JobId|JobName|JobState|Reason|Restarts|ExitCode|NodeList|NumNodes|NumCPUs)=(\S*)"
)
_JOB_NAME = re.compile(r"(?:^|\s)JobName=(.*?) UserId=")
_JOB_REASON = re.compile(r"(?:^|\s)Reason=(.*?) Dependency=")
_LEADING_INT = re.compile(r"\d+")
JOB_GONE = "Invalid job id specified"  # scontrol, once the controller has forgotten the job
CLI_TIMEOUT_S = 30.0


class SlurmError(RuntimeError):
    """A Slurm command failed; the message is Slurm's own, on one line."""


@dataclass(frozen=True)
class SallocLine:
    """What one line of salloc's stderr says: pending/queued/granted (with the job id),
    an error, or information for the operator."""

    kind: str
    job_id: str | None
    text: str


# -- parsers (pure) -------------------------------------------------------------------------------


def job_argv(job_id: str) -> list[str]:
    """The question for one job's record (CliQuery.job, and early_alloc asks it ahead).

    Not `squeue --json`: in 22.05 it ignores -j and sends every job the controller knows,
    finished ones too. With 2,000 jobs queued that is 6 MB and 0.3 s a question, against
    1 KiB and 10 ms for this (bench/results/slurm_busy_queue.md), and the console asks
    while a run is quiet, every second or two, for the whole run."""
    return ["scontrol", "-o", "show", "job", str(job_id)]


def _leading_int(value: str) -> int:
    """`4`, and `1-1` (a pending job's node count: a range) -> its first number; else 0."""
    found = _LEADING_INT.match(value)
    return int(found.group()) if found else 0


def _exit_code(value: str) -> int | None:
    """ExitCode `CODE:SIGNAL` -> the code, or 128 + the signal as a shell reports it."""
    code, _, signal_number = value.partition(":")
    if not code.isdigit():
        return None
    return 128 + int(signal_number) if signal_number.isdigit() and int(signal_number) else int(code)


def parse_scontrol_job(text: str, job_id: str) -> JobInfo | None:
    """`scontrol -o show job ID` (a line per job record) -> that job; None without its line."""
    for line in text.splitlines():
        words = dict(_JOB_WORD.findall(line))
        if words.get("JobId") != str(job_id):
            continue
        # whole where the next key is the usual one, else its first word
        name, reason = _JOB_NAME.search(line), _JOB_REASON.search(line)
        said = reason.group(1) if reason else words.get("Reason", "")
        nodes = words.get("NodeList", "")
        return JobInfo(
            job_id=str(job_id),
            name=name.group(1) if name else words.get("JobName", ""),
            states=job_states(words.get("JobState", "")),
            reason="" if said in ("None", "(null)") else said,
            nodes="" if nodes == "(null)" else nodes,
            cpus=_leading_int(words.get("NumCPUs", "")),
            node_count=_leading_int(words.get("NumNodes", "")),
            exit_code=_exit_code(words.get("ExitCode", "")),
            restarts=_leading_int(words.get("Restarts", "")),
        )
    return None


def parse_salloc_line(line: str) -> SallocLine:
    match = _SALLOC.match(line.strip())
    if not match:
        return SallocLine("info", None, line.strip())
    is_error, text = match.group(1), match.group(2).strip()
    if is_error:
        return SallocLine("error", None, text)
    for kind, pattern in (("granted", _GRANTED), ("pending", _PENDING), ("queued", _QUEUED)):
        found = pattern.search(text)
        if found:
            return SallocLine(kind, found.group(1), text)
    if "revoked" in text or "cancelled" in text.lower() or "aborted" in text:
        return SallocLine("error", None, text)
    return SallocLine("info", None, text)


def parse_hostnames(text: str) -> list[str]:
    return [line.strip() for line in text.splitlines() if line.strip()]


def parse_node_addresses(text: str) -> dict[str, str]:
    """`scontrol -o show node LIST` (one node a line) -> node name -> NodeAddr."""
    addresses: dict[str, str] = {}
    for line in text.splitlines():
        name, addr = _NODE_NAME.match(line), _NODE_ADDR.search(line)
        if name and addr:
            addresses[name.group(1)] = addr.group(1)
    return addresses


def parse_steps(text: str) -> list[StepInfo]:
    """`squeue -s -h -o '%i|%j|%N'` -> the job's steps."""
    steps = []
    for line in text.splitlines():
        parts = line.strip().split("|")
        if len(parts) >= 2 and parts[0]:
            steps.append(StepInfo(parts[0], parts[1], parts[2] if len(parts) > 2 else ""))
    return steps


def parse_sbatch_parsable(text: str) -> str:
    """`sbatch --parsable` prints `JOBID` or `JOBID;CLUSTER`."""
    first = text.strip().splitlines()[0] if text.strip() else ""
    job_id = first.split(";")[0].strip()
    if not job_id.isdigit():
        raise SlurmError(f"sbatch printed no job id: {text.strip()!r}")
    return job_id


def parse_version(text: str) -> tuple[int, int] | None:
    """`slurm 22.05.8` -> (22, 5)."""
    found = _VERSION.search(text)
    return (int(found.group(1)), int(found.group(2))) if found else None


def ipv4_of(address: str) -> str:
    """NodeAddr may be a name: resolve it on the console's host once, so no node has to
    (blocking: call it in a thread)."""
    with contextlib.suppress(ValueError):
        return str(ipaddress.IPv4Address(address))
    try:
        return str(socket.getaddrinfo(address, None, socket.AF_INET)[0][4][0])
    except OSError:
        return address


def last_error(text: str) -> str:
    """The line of Slurm's stderr worth showing: its last error, else its last line."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    errors = [line for line in lines if "error" in line.lower() or "unrecognized" in line]
    return (errors or lines or [""])[-1]


# -- running the CLI ------------------------------------------------------------------------------


AnswersAhead = Callable[[Sequence[str]], "Future[CommandResult] | None"]
_answers_ahead: list[AnswersAhead] = []


def answer_ahead(answers: AnswersAhead) -> None:
    """Let `answers` answer Slurm commands asked ahead (early_alloc.py): each answer is
    taken once, by `slurm()` running exactly that command."""
    _answers_ahead[:] = [answers]


async def slurm(
    argv: Sequence[str],
    *,
    stdin: bytes | None = None,
    limit_s: float = CLI_TIMEOUT_S,
    check: bool = True,
) -> CommandResult:
    """Run a Slurm command on this machine (SLURM_CONF etc. come from our environment)."""
    ahead = _answers_ahead[0](argv) if _answers_ahead and stdin is None else None
    try:
        if ahead is not None:
            result = await asyncio.wrap_future(ahead)
        else:
            result = await LocalTransport().run(argv, stdin=stdin, timeout=limit_s)
    except TransportError as exc:
        raise SlurmError(str(exc)) from None
    except (OSError, subprocess.SubprocessError) as exc:  # asked ahead, and that failed
        raise SlurmError(f"{argv[0]}: {exc}") from None
    if check and result.exit_code != 0:
        raise failed(argv, result)
    return result


def failed(argv: Sequence[str], result: CommandResult) -> SlurmError:
    """The error of a Slurm command that exited non-zero, in Slurm's words."""
    return SlurmError(f"{argv[0]}: {last_error(result.stderr) or f'exit {result.exit_code}'}")


class CliQuery:
    """SlurmQuery through the Slurm CLI (scontrol, squeue -s)."""

    name = "cli"

    async def job(self, job_id: str) -> JobInfo | None:
        argv = job_argv(job_id)
        result = await slurm(argv, check=False)
        if result.exit_code != 0:
            if JOB_GONE in result.stderr:
                return None
            raise failed(argv, result)
        return parse_scontrol_job(result.stdout, job_id)

    async def steps(self, job_id: str) -> list[StepInfo]:
        result = await slurm(
            ["squeue", "-s", "-h", "-j", str(job_id), "-o", "%i|%j|%N"], check=False
        )
        return parse_steps(result.stdout) if result.exit_code == 0 else []

    async def hostnames(self, nodelist: str) -> list[str]:
        """Expanded here (python-hostlist reads Slurm's syntax): one controller round trip
        fewer between the grant and the launch; `scontrol show hostnames` where it cannot."""
        try:
            names: list[str] = hostlist.expand_hostlist(nodelist)
            return names
        except hostlist.BadHostlist:
            result = await slurm(["scontrol", "show", "hostnames", nodelist])
            return parse_hostnames(result.stdout)

    async def node_addresses(self, nodes: Sequence[str]) -> dict[str, str]:
        result = await slurm(["scontrol", "-o", "show", "node", ",".join(nodes)])
        return parse_node_addresses(result.stdout)


def scontrol_version() -> tuple[int, int] | None:
    try:
        out = subprocess.run(
            ["scontrol", "--version"], capture_output=True, text=True, timeout=CLI_TIMEOUT_S
        ).stdout
    except (OSError, subprocess.TimeoutExpired):
        return None
    return parse_version(out)


def choose_query() -> SlurmQuery:
    """pyslurm where it can work here (importable, and built for this Slurm), else the CLI.

    `DDPTUI_SLURM_QUERY=cli` forces the CLI.
    """
    if os.environ.get("DDPTUI_SLURM_QUERY") == "cli" or importlib.util.find_spec("pyslurm") is None:
        return CliQuery()
    from ddptui.core.backends.slurm.pyslurm_query import PyslurmQuery, pyslurm_version

    built_for = pyslurm_version()
    if built_for is None or built_for != scontrol_version():
        return CliQuery()
    return PyslurmQuery()
