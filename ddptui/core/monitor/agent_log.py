"""Provides the parser of what a torchrun agent itself logs: rendezvous results and failures."""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field

from ddptui.core.events import Diagnosis
from ddptui.core.monitor.patterns import recognise

# glog style: `I1126 01:49:11.178000 27811 torch/.../api.py:553]   global_ranks=[2, 3]`
_GLOG = re.compile(r"^[IWEF]\d{4} [\d:.]+\s+\d+ \S+:\d+\] ?(.*)$")
_KV = re.compile(r"^\s+(\w+)=(.*)$")
_EARLY_FAIL = re.compile(r"failed \(exitcode: (-?\d+)\) local_rank: (\d+) \(pid: \d+\)")
# `[default] Worker group FAILED. 3/3 attempts left; will restart worker group`, or
# `[default] Detected 1 new nodes from group_rank=0; will restart worker group`
_RESTARTING = re.compile(
    r"\[\w+\] (?:Worker group \w+\. (\d+/\d+) attempts left|Detected \d+ new nodes from "
    r"group_rank=\d+); ?will restart worker group"
)
_SUMMARY_RANK = re.compile(r"^\s*rank\s*: (\d+) \(local_rank: (\d+)\)")
_SUMMARY_EXIT = re.compile(r"^\s*exitcode\s*: (-?\d+)(?: \(pid: (\d+)\))?")
_SUMMARY_FIELD = re.compile(r"^  (time|host|error_file|traceback)\s*: ?(.*)$")
_SUMMARY_ENTRY = re.compile(r"^\[\d+\]:\s*$")
_SUMMARY_RULE = re.compile(r"^(?:-{8,}|={8,})\s*$")
_RESULT_KEYS = {"group_rank", "local_ranks", "global_ranks", "restart_count", "master_addr"}
# `  run_id                   : x` in the table of launch configs the agent logs at its start
_CONFIG = re.compile(r"^\s+(min_nodes|max_nodes|run_id|rdzv_endpoint)\s+: (.*)$")
_NOT_AVAILABLE = "<N/A>"
MAX_SUMMARY_TRACEBACK = 80


@dataclass(frozen=True)
class Assigned:
    """The rendezvous gave this node its group rank and its workers their global ranks, in a
    world of `nodes` nodes and `world_size` workers (-1: not said) around `master_addr`."""

    group_rank: int
    local_ranks: tuple[int, ...]
    global_ranks: tuple[int, ...]
    restart_count: int
    nodes: int = field(default=-1, compare=False)  # group_world_size: nodes in this round
    world_size: int = field(default=-1, compare=False)
    master_addr: str = field(default="", compare=False)
    master_port: str = field(default="", compare=False)  # with master_addr: one round's


@dataclass(frozen=True)
class Configured:
    """The rendezvous the agent was started for (its `launch configs` table)."""

    run_id: str
    endpoint: str
    min_nodes: int
    max_nodes: int


@dataclass(frozen=True)
class WorkerFailed:
    """A worker failed. From torchrun's summary table, the details beyond the exit code too.

    The details do not take part in equality: the same failure seen in the early
    `failed (exitcode: ...)` line and in the summary is one failure.
    """

    local_rank: int
    exit_code: int
    rank: int | None = None
    root_cause: bool = False
    host: str = field(default="", compare=False)
    time: str = field(default="", compare=False)
    pid: int | None = field(default=None, compare=False)
    error_file: str = field(default="", compare=False)
    traceback: tuple[str, ...] = field(default=(), compare=False)
    from_summary: bool = field(default=False, compare=False)
    seq: int | None = field(default=None, compare=False)  # the agent's line that said so


@dataclass(frozen=True)
class GroupSucceeded:
    pass


@dataclass(frozen=True)
class GroupRestarting:
    """The agent restarts its worker group: after a failure (`attempts`: "3/3 attempts
    left") or because nodes wait to join (`attempts` ""): its ranks wait for a new round."""

    attempts: str = ""


@dataclass(frozen=True)
class AgentTrouble:
    """The agent itself reports a problem (rendezvous refused, timed out, port taken...)."""

    diagnosis: Diagnosis


AgentFact = Assigned | Configured | WorkerFailed | GroupSucceeded | GroupRestarting | AgentTrouble


class _SummaryEntry:
    """One `[i]:` entry of the ChildFailedError table, filled field by field."""

    def __init__(self, root_cause: bool) -> None:
        self.root_cause = root_cause
        self.fields: dict[str, str] = {}
        self.rank: tuple[int, int] | None = None
        self.exit: tuple[int, int | None] | None = None
        self.traceback: list[str] = []
        self.in_traceback = False

    def feed(self, line: str) -> None:
        rank = _SUMMARY_RANK.match(line)
        code = _SUMMARY_EXIT.match(line)
        other = _SUMMARY_FIELD.match(line)
        if rank:
            self.rank = (int(rank.group(1)), int(rank.group(2)))
        elif code:
            self.exit = (int(code.group(1)), int(code.group(2)) if code.group(2) else None)
        elif other and not self.in_traceback:
            name, value = other.group(1), other.group(2).strip()
            self.fields[name] = "" if value == _NOT_AVAILABLE else value
            if name == "traceback":
                self.in_traceback = True
                self.traceback = [value] if value else []
        elif self.in_traceback and len(self.traceback) < MAX_SUMMARY_TRACEBACK:
            # torchrun indents the worker's traceback by two more spaces than its own fields
            self.traceback.append(line[2:] if line.startswith("  ") else line)

    def fact(self) -> WorkerFailed | None:
        if self.rank is None or self.exit is None:
            return None
        while self.traceback and not self.traceback[-1].strip():
            self.traceback.pop()
        (global_rank, local_rank), (code, pid) = self.rank, self.exit
        return WorkerFailed(
            local_rank,
            code,
            global_rank,
            self.root_cause,
            host=self.fields.get("host", ""),
            time=self.fields.get("time", ""),
            pid=pid,
            error_file=self.fields.get("error_file", ""),
            traceback=tuple(self.traceback),
            from_summary=True,
        )


class AgentLogParser:
    """Reads one node's unprefixed lines and reports what the agent says about its workers."""

    def __init__(self) -> None:
        self._result: dict[str, str] | None = None
        self._root_cause_next = False
        self._entry: _SummaryEntry | None = None
        self._in_summary = False  # inside torchrun's failure report: its text is no news
        self._summary_table = False
        self._config: dict[str, str] | None = None

    def feed(self, line: str, seq: int | None = None) -> list[AgentFact]:
        glog = _GLOG.match(line)
        body = glog.group(1) if glog else line
        facts: list[AgentFact] = []
        if self._result is not None:
            kv = _KV.match(body) if glog else None
            if kv:
                self._result[kv.group(1)] = kv.group(2).strip()
                return []
            facts = self._finish_result()
        return facts + self._plain(line, body, seq)

    def _plain(self, line: str, body: str, seq: int | None) -> list[AgentFact]:
        if "Starting elastic_operator with launch configs:" in body:
            self._config = {}
            return []
        if self._config is not None:
            return self._config_line(body)
        if "Rendezvous complete for workers. Result:" in body:
            self._result = {}
            return []
        if "worker group successfully finished" in body:
            return [GroupSucceeded()]
        restarting = _RESTARTING.search(body)
        if restarting:
            return [GroupRestarting(restarting.group(1) or "")]
        early = _EARLY_FAIL.search(body)
        if early:
            local_rank, code = int(early.group(2)), int(early.group(1))
            return [WorkerFailed(local_rank=local_rank, exit_code=code, seq=seq)]
        facts = self._summary(line)
        if not facts and not self._in_summary:
            trouble = recognise(body, seq)
            if trouble is not None:
                facts.append(AgentTrouble(trouble))
        return facts

    def _config_line(self, body: str) -> list[AgentFact]:
        """A line of the launch configs: the fact once the endpoint (their last asked) is."""
        config = self._config
        assert config is not None
        found = _CONFIG.match(body)
        if found:
            config[found.group(1)] = found.group(2).strip()
        if found is None and body.strip() and not body.startswith("  "):
            self._config = None  # the table ended without an endpoint: not torchrun's
        if "rdzv_endpoint" not in config:
            return []
        self._config = None
        try:
            low, high = int(config.get("min_nodes", "-1")), int(config.get("max_nodes", "-1"))
        except ValueError:
            low = high = -1
        return [Configured(config.get("run_id", ""), config["rdzv_endpoint"], low, high)]

    def _finish_result(self) -> list[AgentFact]:
        result, self._result = self._result or {}, None
        if not _RESULT_KEYS & result.keys() or "global_ranks" not in result:
            return []
        try:
            sizes = ast.literal_eval(result.get("global_world_sizes", "[]"))
            return [
                Assigned(
                    group_rank=int(result.get("group_rank", "-1")),
                    local_ranks=tuple(ast.literal_eval(result["local_ranks"])),
                    global_ranks=tuple(ast.literal_eval(result["global_ranks"])),
                    restart_count=int(result.get("restart_count", "0")),
                    nodes=int(result.get("group_world_size", "-1")),
                    world_size=int(sizes[0]) if sizes else -1,
                    master_addr=result.get("master_addr", ""),
                    master_port=result.get("master_port", ""),
                )
            ]
        except (ValueError, SyntaxError, KeyError):
            return []

    def _summary(self, line: str) -> list[AgentFact]:
        """torchrun's ChildFailedError table (see torch.distributed.elastic's errors module).

        Each `[i]:` entry has time, host, `rank : 3 (local_rank: 1)`, `exitcode : 1 (pid: N)`,
        error_file and a traceback that may run over many indented lines; the entry after
        `Root Cause (first observed failure):` is the node's first failure.
        """
        if "ChildFailedError" in line and not line.startswith(" "):
            self._in_summary = True
        if line.startswith("Failures:"):
            self._in_summary = self._summary_table = True
            return self._end_entry()
        if line.startswith("Root Cause (first observed failure)"):
            facts = self._end_entry()
            self._root_cause_next = True
            return facts
        if _SUMMARY_ENTRY.match(line):
            facts = self._end_entry()
            self._entry = _SummaryEntry(self._root_cause_next)
            self._root_cause_next = False
            return facts
        if _SUMMARY_RULE.match(line):
            if line.startswith("=") and self._summary_table:  # the table's closing rule
                self._in_summary = self._summary_table = False
            return self._end_entry()
        if self._entry is not None:
            if line.startswith("  ") or not line.strip():
                self._entry.feed(line)
                return []
            return self._end_entry()
        return []

    def _end_entry(self) -> list[AgentFact]:
        entry, self._entry = self._entry, None
        fact = entry.fact() if entry is not None else None
        return [fact] if fact is not None else []

    def flush(self) -> list[AgentFact]:
        facts = self._finish_result() if self._result is not None else []
        return facts + self._end_entry()
