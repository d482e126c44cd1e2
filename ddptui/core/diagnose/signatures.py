"""Provides the failure signatures: what a line (or a kind the monitor found) says went wrong.

Each signature names one failure a user would name (a missing file, NaN, an Xid on a GPU, a
Slurm time limit), says whose it is (the job's code or the infrastructure) and whether a
restart would likely help. Most are regular expressions over lines, from real output where
this machine can produce it (tests/data/verdicts/) and from the documented formats of NCCL,
the kernel and Slurm otherwise. Where `ddptui.core.monitor.patterns` already recognises a
line (CUDA OOM, collective timeouts, lost peers, two ranks on one GPU), the signature names
that kind instead of repeating its pattern: one place recognises each line.

Order matters: the first signature that fits a rank's evidence names its failure, so the
infrastructure comes before the job's own errors (an Xid explains the CUDA error a rank
raises after it), and the symptoms of another rank's failure come last.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from ddptui.core.monitor import causes, patterns


class Domain(enum.StrEnum):
    """Whose failure it is."""

    JOB = "job"  # the job's code, data or launch configuration
    INFRASTRUCTURE = "infrastructure"  # nodes, GPUs, network, scheduler
    OPERATOR = "operator"  # the operator's own hand: a teardown, a kill, a drill
    UNKNOWN = "unknown"


class Outlook(enum.StrEnum):
    """Whether running the job again would likely get past the failure."""

    RESTART_HELPS = "restart_helps"  # transient: the same job on the same nodes may pass
    RESTART_ELSEWHERE = "restart_elsewhere"  # helps without the failing node or GPU
    FIX_FIRST = "fix_first"  # the same job fails the same way: change it first
    UNKNOWN = "unknown"


class Source(enum.StrEnum):
    """Where a signature's lines come from."""

    RANK = "rank"  # the rank's own output, its error and traceback
    NODE = "node"  # the node's kernel log, the scheduler's and the connection's words


# The failure patterns' kinds and the failure story's causes, under the names this catalogue
# reads them by.
CUDA_OOM = patterns.CUDA_OOM
DUPLICATE_GPU = patterns.DUPLICATE_GPU
COLLECTIVE_TIMEOUT = patterns.COLLECTIVE_TIMEOUT
PEER_LOST = patterns.PEER_LOST
TRACEBACK = patterns.TRACEBACK
EXCEPTION_CAUSE = causes.EXCEPTION
WATCHDOG_CAUSE = causes.WATCHDOG
PEER_CAUSE = causes.PEER
STOPPED_CAUSE = causes.STOPPED
TEARDOWN_CAUSE = causes.TEARDOWN
KILLED_CAUSE = causes.KILLED
# The causes of a rank that failed because another did (less the teardown's own).
CASCADE_CAUSES = causes.VICTIM_CAUSES - {causes.TEARDOWN}
COLLECTIVE_MISMATCH = "collective_mismatch"  # the audit's word (diagnose.audit)
NODE_LOST = "node_lost"  # the session's word: a node's connection or agent was lost
# gloo's enforce in the rank that received more than it expected: a peer's collective differed
SIZE_RECEIVED = "Received data size doesn't match expected size"


@dataclass(frozen=True)
class Signature:
    """One failure: how it shows (`pattern` over lines, or `kinds` the monitor or the audit
    found), whose it is and whether a restart would help."""

    name: str
    domain: Domain
    outlook: Outlook
    summary: str
    pattern: re.Pattern[str] | None = None
    kinds: frozenset[str] = frozenset()
    source: Source = Source.RANK
    cascade: bool = False  # a symptom of another failure: names a failure only if none else

    def find(self, lines: Sequence[str], kinds: Iterable[str] = ()) -> str | None:
        """The line that shows this signature (a kind's name when only a kind does)."""
        if self.pattern is not None:
            for line in lines:
                if self.pattern.search(line):
                    return line.strip()
        shown = self.kinds.intersection(kinds)
        if shown:
            kind = sorted(shown)[0]
            return next((line.strip() for line in lines if kind in line), kind)
        return None


def _re(pattern: str) -> re.Pattern[str]:
    return re.compile(pattern)


CATALOGUE: tuple[Signature, ...] = (
    # -- the scheduler and the nodes ------------------------------------------------------
    Signature(
        "slurm_node_fail",
        Domain.INFRASTRUCTURE,
        Outlook.RESTART_ELSEWHERE,
        "Slurm lost a node of the job (NODE_FAIL)",
        _re(r"DUE TO NODE FAIL|srun: error: Node failure on \S+|\bNODE_FAIL\b"),
        source=Source.NODE,
    ),
    Signature(
        "slurm_preempted",
        Domain.INFRASTRUCTURE,
        Outlook.RESTART_HELPS,
        "Slurm preempted the job for another one",
        _re(r"DUE TO PREEMPTION|\bPREEMPTED\b"),
        source=Source.NODE,
    ),
    Signature(
        "slurm_time_limit",
        Domain.INFRASTRUCTURE,
        Outlook.RESTART_HELPS,
        "the job reached its Slurm time limit: resume from a checkpoint, or ask for more time",
        _re(r"DUE TO TIME LIMIT|\bJob \d+ exceeded (?:its )?time limit"),
        source=Source.NODE,
    ),
    Signature(
        NODE_LOST,
        Domain.INFRASTRUCTURE,
        Outlook.RESTART_ELSEWHERE,
        "a node was lost: its connection or its agent went away",
        _re(
            r"Connection to \S+ closed by remote host|client_loop: send disconnect"
            r"|Timeout, server \S+ not responding|ssh: connect to host \S+ port \d+: "
            r"(?:No route to host|Connection timed out|Network is unreachable)"
        ),
        frozenset({NODE_LOST}),
        source=Source.NODE,
    ),
    Signature(
        "rdzv_port_taken",
        Domain.INFRASTRUCTURE,
        Outlook.RESTART_HELPS,
        "another process on the rendezvous host holds the rendezvous port: without --rdzv-port "
        "ddptui picks a free one there (SSH); with it, choose another",
        _re(r"\bport \d+ on \S+ is in use by (?:PID \d+|a process of user)"),
        source=Source.NODE,
    ),
    Signature(
        "split_world",
        Domain.JOB,
        Outlook.FIX_FIRST,
        "a node rendezvoused apart from the others (pointed at itself, or at another "
        "rendezvous): fix its endpoint (a localhost fallback, a name resolving to the node)",
        _re(
            r"was started for another rendezvous|is alone in its own world"
            r"|serves a rendezvous of its own|formed separate worlds"
        ),
        source=Source.NODE,
    ),
    Signature(
        "small_world",
        Domain.JOB,
        Outlook.FIX_FIRST,
        "the rendezvous formed a world smaller than the job asked (--nnodes, nodes missing)",
        _re(
            r"joined a world of \d+ node\(s\) and \d+ worker\(s\); the job asked"
            r"|agent was told --nnodes \d+:\d+, the job has"
        ),
        source=Source.NODE,
    ),
    Signature(
        "never_joined",
        Domain.INFRASTRUCTURE,
        Outlook.RESTART_ELSEWHERE,
        "a node never joined the rendezvous: the others waited for it until their join "
        "timeout (it hangs before torchrun starts, or cannot reach the first node)",
        _re(r"never joined the rendezvous"),
        source=Source.NODE,
    ),
    Signature(
        "launch_timeout",
        Domain.INFRASTRUCTURE,
        Outlook.RESTART_HELPS,
        "a node took too long to start its part of the job (a loaded or slow node, a slow "
        "login): nothing was wrong with the job, and a relaunch may well start it",
        _re(r"^\S+: timed out\b"),
        source=Source.NODE,
    ),
    Signature(
        "gpu_ecc",
        Domain.INFRASTRUCTURE,
        Outlook.RESTART_ELSEWHERE,
        "an uncorrectable ECC error on a GPU: drain the node, reset or replace the GPU",
        _re(
            r"NVRM: Xid \([^)]*\): (?:48|63|64|92|94|95)\b"
            r"|(?:uncorrectable|double.bit|DBE).{0,20}ECC error|ECC error.{0,40}uncorrectable"
        ),
        source=Source.NODE,
    ),
    Signature(
        "gpu_xid",
        Domain.INFRASTRUCTURE,
        Outlook.RESTART_ELSEWHERE,
        "the GPU driver reported an Xid error (a GPU fault, or fallen off the bus)",
        _re(r"NVRM: Xid \([^)]*\): \d+|GPU has fallen off the bus"),
        source=Source.NODE,
    ),
    Signature(
        "host_oom_killer",
        Domain.INFRASTRUCTURE,
        Outlook.FIX_FIRST,
        "the node's kernel killed a process for memory (host OOM killer): less host memory",
        _re(r"Out of memory: Killed process \d+|invoked oom-killer|oom-kill:constraint="),
        source=Source.NODE,
    ),
    Signature(
        "nccl_network",
        Domain.INFRASTRUCTURE,
        Outlook.RESTART_HELPS,
        "NCCL's network transport failed (InfiniBand or sockets between the nodes)",
        _re(
            r"NET/IB\s*:.*(?:Got completion from peer|with error|failed|status=\d+)"
            r"|NET/(?:Socket|IB)\s*:.*(?:Connection (?:closed|reset)|unexpected|truncated)"
            r"|\bncclSystemError\b.*(?:socket|network|IB)"
            r"|IBV_WC_\w+_ERR|ibv_\w+ failed"
        ),
    ),
    # -- the job's own code --------------------------------------------------------------
    Signature(
        COLLECTIVE_MISMATCH,
        Domain.JOB,
        Outlook.FIX_FIRST,
        "the ranks disagree on a collective (op, size, dtype or who takes part)",
        _re(re.escape(SIZE_RECEIVED) + r"|Detected mismatch between collectives on ranks"),
        frozenset({COLLECTIVE_MISMATCH}),
    ),
    Signature(
        "cuda_oom",
        Domain.JOB,
        Outlook.FIX_FIRST,
        "CUDA out of memory: a smaller batch, or less held on the GPU",
        kinds=frozenset({CUDA_OOM}),
    ),
    Signature(
        "nan_inf",
        Domain.JOB,
        Outlook.FIX_FIRST,
        "NaN or Inf in the training (loss or gradients)",
        _re(
            r"returned nan values in its \d+\w* output"
            r"|gradients from `parameters` is non-finite"
            r"|\b[Ll]oss (?:is|became|=|:)\s*(?:nan|NaN|inf|Inf|-inf)\b"
            r"|(?:NaN|Inf) (?:loss|gradients?) (?:detected|found)"
        ),
        frozenset({"nan_or_inf"}),  # the metrics' wrong-number check (a loss read as NaN)
    ),
    Signature(
        "shape_mismatch",
        Domain.JOB,
        Outlook.FIX_FIRST,
        "tensor shapes do not fit (a model or data shape mismatch)",
        _re(
            r"shapes cannot be multiplied|The size of tensor a \(\d+\) must match"
            r"|size mismatch for \S+: copying a param|Expected input batch_size \(\d+\)"
            r"|shape '\[[^\]]*\]' is invalid for input of size"
        ),
    ),
    Signature(
        "missing_file",
        Domain.JOB,
        Outlook.FIX_FIRST,
        "a file the job needs is not there (its script, data or checkpoint)",
        _re(
            r"can't open file '[^']*': \[Errno 2\] No such file or directory"
            r"|(?:FileNotFoundError|No such file or directory): .*\[Errno 2\]"
            r"|FileNotFoundError: \[Errno 2\] No such file or directory"
        ),
    ),
    Signature(
        "duplicate_gpu",
        Domain.JOB,
        Outlook.FIX_FIRST,
        "two ranks on one GPU: at most one process per GPU",
        kinds=frozenset({DUPLICATE_GPU}),
    ),
    Signature(
        "exception",
        Domain.JOB,
        Outlook.FIX_FIRST,
        "the job's code raised an exception",
        kinds=frozenset({TRACEBACK, EXCEPTION_CAUSE}),
    ),
    # -- what another failure leaves behind ----------------------------------------------
    Signature(
        "collective_timeout",
        Domain.UNKNOWN,
        Outlook.UNKNOWN,
        "a collective timed out waiting for a peer: a rank stuck or gone",
        kinds=frozenset({COLLECTIVE_TIMEOUT, WATCHDOG_CAUSE}),
        cascade=True,
    ),
    Signature(
        "peer_lost",
        Domain.UNKNOWN,
        Outlook.UNKNOWN,
        "a peer closed the connection: another rank went first",
        kinds=frozenset({PEER_LOST, PEER_CAUSE, STOPPED_CAUSE}),
        cascade=True,
    ),
)

BY_NAME = {signature.name: signature for signature in CATALOGUE}


def identify(
    lines: Sequence[str], kinds: Iterable[str] = (), source: Source = Source.RANK
) -> tuple[Signature, str] | None:
    """The first signature of `source` that the lines (or kinds) show, with its line."""
    kinds = frozenset(kinds)
    for signature in CATALOGUE:
        if signature.source != source:
            continue
        line = signature.find(lines, kinds)
        if line is not None:
            return signature, line
    return None


# The scheduler's own ends of a job, which the run's summary names before anything else.
SCHEDULER_ENDS = ("slurm_preempted", "slurm_time_limit", "slurm_node_fail")


# srun's word on the node Slurm lost (the one it names, not the log the line is in)
_NODE_FAILURE = re.compile(r"\bNode failure on ([^\s)]+)")


def scheduler_end(node_lines: Mapping[str, Sequence[str]]) -> str | None:
    """Why the scheduler ended the job (preempted, its time limit, a node lost), in words
    with the line that shows it (and the log it is in, where the line names no node), when
    a node's own lines (srun's, slurmstepd's) say so."""
    for node, lines in node_lines.items():
        for name in SCHEDULER_ENDS:
            line = BY_NAME[name].find(lines)
            if line is not None:
                where = "" if lost_node(line) else f"{node}: "
                return f"{BY_NAME[name].summary} ({where}{line})"
    return None


def lost_node(text: str) -> str | None:
    """The node Slurm says it lost (`srun: error: Node failure on node3`), if the text names
    one."""
    found = _NODE_FAILURE.search(text)
    return found.group(1) if found else None
