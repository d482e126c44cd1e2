"""Provides the parser of what a torchrun agent itself logs: rendezvous results and failures."""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass

# glog style: `I1126 01:49:11.178000 27811 torch/.../api.py:553]   global_ranks=[2, 3]`
_GLOG = re.compile(r"^[IWEF]\d{4} [\d:.]+\s+\d+ \S+:\d+\] ?(.*)$")
_KV = re.compile(r"^\s+(\w+)=(.*)$")
_EARLY_FAIL = re.compile(r"failed \(exitcode: (-?\d+)\) local_rank: (\d+) \(pid: \d+\)")
_SUMMARY_RANK = re.compile(r"^\s*rank\s*: (\d+) \(local_rank: (\d+)\)")
_SUMMARY_EXIT = re.compile(r"^\s*exitcode\s*: (-?\d+)")
_RESULT_KEYS = {"group_rank", "local_ranks", "global_ranks", "restart_count", "master_addr"}


@dataclass(frozen=True)
class Assigned:
    """The rendezvous gave this node its group rank and its workers their global ranks."""

    group_rank: int
    local_ranks: tuple[int, ...]
    global_ranks: tuple[int, ...]
    restart_count: int


@dataclass(frozen=True)
class WorkerFailed:
    local_rank: int
    exit_code: int
    rank: int | None = None
    root_cause: bool = False


@dataclass(frozen=True)
class GroupSucceeded:
    pass


AgentFact = Assigned | WorkerFailed | GroupSucceeded


class AgentLogParser:
    """Reads one node's unprefixed lines and reports what the agent says about its workers."""

    def __init__(self) -> None:
        self._result: dict[str, str] | None = None
        self._summary_rank: tuple[int, int] | None = None
        self._root_cause_next = False

    def feed(self, line: str) -> list[AgentFact]:
        glog = _GLOG.match(line)
        body = glog.group(1) if glog else line
        facts: list[AgentFact] = []
        if self._result is not None:
            kv = _KV.match(body) if glog else None
            if kv:
                self._result[kv.group(1)] = kv.group(2).strip()
                return []
            facts = self._finish_result()
        return facts + self._plain(line, body)

    def _plain(self, line: str, body: str) -> list[AgentFact]:
        if "Rendezvous complete for workers. Result:" in body:
            self._result = {}
            return []
        if "worker group successfully finished" in body:
            return [GroupSucceeded()]
        early = _EARLY_FAIL.search(body)
        if early:
            return [WorkerFailed(local_rank=int(early.group(2)), exit_code=int(early.group(1)))]
        return self._summary(line)

    def _finish_result(self) -> list[AgentFact]:
        result, self._result = self._result or {}, None
        if not _RESULT_KEYS & result.keys() or "global_ranks" not in result:
            return []
        try:
            return [
                Assigned(
                    group_rank=int(result.get("group_rank", "-1")),
                    local_ranks=tuple(ast.literal_eval(result["local_ranks"])),
                    global_ranks=tuple(ast.literal_eval(result["global_ranks"])),
                    restart_count=int(result.get("restart_count", "0")),
                )
            ]
        except (ValueError, SyntaxError, KeyError):
            return []

    def _summary(self, line: str) -> list[AgentFact]:
        """torchrun's ChildFailedError table: `rank : 3 (local_rank: 1)` then `exitcode : 1`."""
        if line.startswith("Root Cause (first observed failure)"):
            self._root_cause_next = True
            return []
        rank = _SUMMARY_RANK.match(line)
        if rank:
            self._summary_rank = (int(rank.group(1)), int(rank.group(2)))
            return []
        code = _SUMMARY_EXIT.match(line)
        if code and self._summary_rank:
            (global_rank, local_rank), self._summary_rank = self._summary_rank, None
            root, self._root_cause_next = self._root_cause_next, False
            return [WorkerFailed(local_rank, int(code.group(1)), global_rank, root)]
        return []

    def flush(self) -> list[AgentFact]:
        return self._finish_result() if self._result is not None else []
