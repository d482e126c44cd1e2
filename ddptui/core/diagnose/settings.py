"""Provides the settings check: every rank's versions and distributed environment, compared.

Each rank reports what it sees (the worker hook's `ddptui/core/node/rank_settings.py`, once
at its start and once its process group exists): torch, its CUDA build, NCCL, the GPU
driver, the group's backend and timeout, and its `NCCL_*`, `TORCH_NCCL_*`,
`TORCH_DISTRIBUTED_*` and `GLOO_*` environment. Ranks that disagree on any of them, or an NCCL
release with a known hang or corruption (KNOWN_BAD_NCCL, each entry with its source), are
said before the job's first step, when the reports come before it: a setting one node lacks
is a hang later, or a slow job nobody can explain. The same comparison serves `preflight`,
on what each node's python sees (ddptui/core/preflight/settings_rule.py).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from ddptui.core.events import Event, plain
from ddptui.core.node.rank_settings import SECRET_WORDS, SETTINGS_KEY

__all__ = ["SETTINGS_KEY", "SettingsReport", "SettingsWatch", "compare", "bad_nccl"]

SETTLE_S = 10.0  # the reports of a job whose ranks never all report are compared this late
COMPARE_EVERY_S = 1.0  # once said, compared again at most this often (the session's tick)
SECRET_SHOWN = "***"  # a secret variable's value: its presence is compared, never its value
# The settings that are versions, in the order they are said, and their words.
VERSIONS = (("torch", "torch"), ("cuda", "CUDA"), ("nccl", "NCCL"), ("driver", "driver"))
TIMEOUT_WORDS = "process group timeout"
BACKEND_WORDS = "backend"
MAX_SAID = 3  # differences in an incident's words; the rest are counted
MAX_NODES_SAID = 3


@dataclass(frozen=True)
class NcclAdvisory:
    """An NCCL release with a hang or a corruption its maintainers or PyTorch's acknowledged."""

    versions: tuple[str, ...]  # the releases it names, as X.Y.Z
    what: str
    fixed_in: str  # the release its source names as free of it; "": the source names none
    sources: tuple[str, ...]


# Only entries whose source says it: the release notes, or the maintainers' own thread.
KNOWN_BAD_NCCL = (
    NcclAdvisory(
        ("2.17.1",),
        "ncclCommAbort hangs, so destroying a process group hangs (found in that release only)",
        "2.18.1",
        ("https://github.com/pytorch/pytorch/issues/119215",),
    ),
    NcclAdvisory(
        ("2.18.1",),
        "Tree with LL128 can corrupt data where a NIC shares a PCI switch with one GPU (HGX "
        "H100; NCCL_PROTO=^LL128 avoids it), and bfloat16 reductions over IB SHARP hang with "
        "fewer NICs than GPUs (known issues of the release)",
        "",
        ("https://docs.nvidia.com/deeplearning/nccl/release-notes/rel_2-18-1.html",),
    ),
    NcclAdvisory(
        ("2.25.1",),
        "ncclCommAbort hangs, so ProcessGroupNCCL's abort and shutdown hang",
        "2.26.2",
        ("https://github.com/pytorch/pytorch/issues/149153",),
    ),
    NcclAdvisory(
        ("2.29.2",),
        "a regression hangs collectives (a compare-and-swap on ARM, built with gcc before 10)",
        "2.29.3",
        (
            "https://github.com/pytorch/pytorch/pull/174338",
            "https://github.com/NVIDIA/nccl/releases/tag/v2.29.3-1",
        ),
    ),
)


def release(version: str | None) -> str | None:
    """X.Y.Z of a version as torch, pip or NCCL write it (`2.21.5`, `(2, 21, 5)`, `2.25.1-1`)."""
    if not version:
        return None
    found = re.match(r"\D*(\d+)\D+(\d+)\D+(\d+)", version)
    return ".".join(found.groups()) if found else None


def advisory_for(version: str | None) -> NcclAdvisory | None:
    wanted = release(version)
    return next((a for a in KNOWN_BAD_NCCL if wanted in a.versions), None)


def is_secret(name: str) -> bool:
    return any(word in name.upper() for word in SECRET_WORDS)


@dataclass(frozen=True)
class RankSettings:
    """What one rank (or, in preflight, one node's python) reported."""

    node: str
    rank: int
    local_rank: int = 0
    host: str = ""
    stage: str = "start"
    torch: str | None = None
    cuda: str | None = None
    nccl: str | None = None
    driver: str | None = None
    backend: str | None = None
    pg_timeout_s: float | None = None
    env: Mapping[str, str] = field(default_factory=dict)

    @classmethod
    def from_report(
        cls, node: str, report: Mapping[str, Any], secret: Iterable[str] = ()
    ) -> RankSettings | None:
        """A rank's report line as the hook wrote it; None if it is no such report. `secret`
        names more variables whose values are not kept (--secret-env)."""
        try:
            rank, local_rank = int(report["rank"]), int(report.get("local_rank", 0))
        except (KeyError, TypeError, ValueError):
            return None
        named = set(secret)
        env = {
            str(k): SECRET_SHOWN if k in named or is_secret(str(k)) else str(v)
            for k, v in dict(report.get("env") or {}).items()
        }
        env.update((str(k), SECRET_SHOWN) for k in report.get("hidden") or ())
        timeout = report.get("pg_timeout_s")
        return cls(
            node,
            rank,
            local_rank,
            str(report.get("host") or ""),
            str(report.get("stage") or "start"),
            _text(report.get("torch")),
            _text(report.get("cuda")),
            release(_text(report.get("nccl"))),
            _text(report.get("driver")),
            _text(report.get("backend")),
            float(timeout) if isinstance(timeout, int | float) else None,
            dict(sorted(env.items())),
        )

    def merged(self, later: RankSettings) -> RankSettings:
        """A later report of the same rank over this one: its environment is what the rank
        sees now; a version it could not read keeps the earlier one's."""
        return RankSettings(
            later.node,
            later.rank,
            later.local_rank,
            later.host or self.host,
            later.stage,
            later.torch or self.torch,
            later.cuda or self.cuda,
            later.nccl or self.nccl,
            later.driver or self.driver,
            later.backend or self.backend,
            later.pg_timeout_s if later.pg_timeout_s is not None else self.pg_timeout_s,
            later.env,
        )

    def known(self) -> dict[str, str]:
        """The versions and group settings this rank knows (an unknown one is not compared)."""
        out = {words: str(getattr(self, name)) for name, words in VERSIONS if getattr(self, name)}
        if self.backend:
            out[BACKEND_WORDS] = self.backend
        if self.pg_timeout_s is not None:
            out[TIMEOUT_WORDS] = f"{self.pg_timeout_s:g} s"
        return out


def _compared(report: RankSettings) -> tuple[Any, ...]:
    """What of a report the comparison reads (not its stage, host or node)."""
    return (report.rank, report.nccl, tuple(report.known().items()), tuple(report.env.items()))


def _text(value: Any) -> str | None:
    return str(value) if value not in (None, "") else None


@dataclass(frozen=True)
class SettingGroup:
    """The ranks that share one value of a setting (None: unset)."""

    value: str | None
    ranks: tuple[int, ...]
    nodes: tuple[str, ...]

    def where(self) -> str:
        """`node2 (ranks 2, 3)`, `node2, node3 (ranks 2-5)`, `node2 and 4 other nodes (...)`."""
        nodes = ", ".join(self.nodes[:MAX_NODES_SAID])
        if len(self.nodes) > MAX_NODES_SAID:
            nodes += f" and {len(self.nodes) - MAX_NODES_SAID} other nodes"
        word = "rank" if len(self.ranks) == 1 else "ranks"
        return f"{nodes} ({word} {rank_ranges(self.ranks)})"


def rank_ranges(ranks: Sequence[int]) -> str:
    """`0-3, 8, 10, 11`: runs of three or more consecutive ranks as ranges."""
    runs: list[list[int]] = []
    for rank in sorted(set(ranks)):
        if runs and rank == runs[-1][-1] + 1:
            runs[-1].append(rank)
        else:
            runs.append([rank])
    words = [f"{r[0]}-{r[-1]}" if len(r) > 2 else ", ".join(map(str, r)) for r in runs]
    return ", ".join(words)


@dataclass(frozen=True)
class SettingDifference:
    """Ranks that disagree on one setting: most share `reference`; `odd` are the others."""

    name: str
    reference: SettingGroup
    odd: tuple[SettingGroup, ...]
    env: bool = True  # an environment variable (else a version or a group setting)

    @property
    def ranks(self) -> tuple[int, ...]:
        return tuple(sorted({r for g in self.odd for r in g.ranks}))

    @property
    def nodes(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(n for g in self.odd for n in g.nodes))

    def describe_value(self, value: str | None) -> str:
        """`NCCL_IB_DISABLE=1`, `NCCL_IB_DISABLE unset`, `NCCL 2.21.5`."""
        if value is None:
            return f"{self.name} unset" if self.env else f"{self.name} unknown"
        return f"{self.name}={value}" if self.env else f"{self.name} {value}"

    def describe(self, there: bool = False) -> str:
        """`NCCL_IB_DISABLE=1 on node2 (ranks 2, 3), unset elsewhere`; `there`: the odd ranks
        are named already (`NCCL_IB_DISABLE=1 there, unset elsewhere`)."""
        if there and len(self.odd) == 1:
            said = [f"{self.describe_value(self.odd[0].value)} there"]
        else:
            said = [f"{self.describe_value(g.value)} on {g.where()}" for g in self.odd]
        ref = self.reference.value
        said.append(f"{'unset' if ref is None else ref} elsewhere")
        return ", ".join(said)

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = plain(self)
        data["text"] = self.describe()
        return data


@dataclass(frozen=True)
class BadNccl:
    """Ranks that run an NCCL release on the known-bad list."""

    version: str
    advisory: NcclAdvisory
    group: SettingGroup
    everywhere: bool

    def describe(self, sources: bool = True) -> str:
        """`NCCL 2.25.1 on every rank: ncclCommAbort hangs ...; fixed in 2.26.2 (URL)`."""
        where = "every rank" if self.everywhere else self.group.where()
        said = f"NCCL {self.version} on {where}: {self.advisory.what}"
        if self.advisory.fixed_in:
            said += f"; fixed in {self.advisory.fixed_in}"
        return said + (f" ({' '.join(self.advisory.sources)})" if sources else "")

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = plain(self)
        data["text"] = self.describe()
        return data


def _groups(
    values: Mapping[tuple[str, int], str | None], order: Sequence[tuple[str, int]]
) -> list[SettingGroup]:
    """The ranks by value, the reference first: most ranks, a tie to the lowest rank's."""
    by_value: dict[str | None, list[tuple[str, int]]] = {}
    for key in order:
        by_value.setdefault(values[key], []).append(key)
    groups = [
        SettingGroup(
            value, tuple(sorted(r for _, r in keys)), tuple(dict.fromkeys(n for n, _ in keys))
        )
        for value, keys in by_value.items()
    ]
    groups.sort(key=lambda g: (-len(g.ranks), min(g.ranks)))
    return groups


def compare(reports: Sequence[RankSettings]) -> tuple[SettingDifference, ...]:
    """Every setting the ranks disagree on: versions first, then the group's, then the
    environment by name. A version a rank could not read is not a difference; a variable one
    rank lacks is."""
    ordered = sorted(reports, key=lambda s: (s.rank, s.node))
    keys = [(s.node, s.rank) for s in ordered]
    out: list[SettingDifference] = []
    known = {(s.node, s.rank): s.known() for s in ordered}
    names = [words for _, words in VERSIONS] + [BACKEND_WORDS, TIMEOUT_WORDS]
    for name in names:
        have = [k for k in keys if name in known[k]]
        versions: dict[tuple[str, int], str | None] = {k: known[k][name] for k in have}
        if len(set(versions.values())) > 1:
            ref, *odd = _groups(versions, have)
            out.append(SettingDifference(name, ref, tuple(odd), env=False))
    env = {(s.node, s.rank): s.env for s in ordered}
    for name in sorted({n for e in env.values() for n in e}):
        values = {k: env[k].get(name) for k in keys}
        if len(set(values.values())) > 1:
            ref, *odd = _groups(values, keys)
            out.append(SettingDifference(name, ref, tuple(odd)))
    return tuple(out)


def bad_nccl(reports: Sequence[RankSettings]) -> tuple[BadNccl, ...]:
    """The known-bad NCCL releases the ranks run, each with who runs it."""
    ordered = sorted(reports, key=lambda s: (s.rank, s.node))
    out = []
    for version in dict.fromkeys(s.nccl for s in ordered if s.nccl):
        advisory = advisory_for(version)
        if advisory is None or version is None:
            continue
        who = [s for s in ordered if s.nccl == version]
        group = SettingGroup(
            version, tuple(s.rank for s in who), tuple(dict.fromkeys(s.node for s in who))
        )
        out.append(BadNccl(version, advisory, group, len(who) == len(ordered)))
    return tuple(out)


def common(reports: Sequence[RankSettings]) -> dict[str, str]:
    """What every rank that knows it agrees on: the versions and the environment set."""
    if not reports:
        return {}
    known = [s.known() for s in reports]
    out = {k: v for k, v in known[0].items() if all(d.get(k, v) == v for d in known)}
    env = dict(reports[0].env)
    out.update({k: v for k, v in env.items() if all(s.env.get(k) == v for s in reports)})
    return out


def differences_words(differences: Sequence[SettingDifference], there: bool = False) -> str:
    """The differences as an incident says them, MAX_SAID at most and the rest counted."""
    said = "; ".join(d.describe(there) for d in differences[:MAX_SAID])
    rest = len(differences) - MAX_SAID
    return said + (f"; and {rest} more" if rest > 0 else "")


@dataclass(frozen=True)
class SettingsReport(Event):
    """The ranks' settings compared: `{"event": "settings", "ranks", "expected", "complete",
    "common", "differences": [{"name", "reference", "odd", "env", "text"}], "bad_nccl":
    [{"version", "advisory", "group", "everywhere", "text"}]}` (a group: {"value", "ranks",
    "nodes"}; an advisory: {"versions", "what", "fixed_in", "sources"}). Said when the
    ranks' first reports are in (all of them, or SETTLE_S after the first), then whenever
    what differs changes, and once every rank's process group exists (its backend and
    timeout known). `common` is what they agree on (versions, the group's settings, the
    environment set)."""

    ranks: int
    expected: int | None
    differences: tuple[SettingDifference, ...] = ()
    bad_nccl: tuple[BadNccl, ...] = ()
    common: Mapping[str, str] = field(default_factory=dict)

    kind = "settings"
    recorded = True  # events.jsonl keeps it: the nodes' logs do not carry the reports
    followed = True  # a console following the run reads it back

    @property
    def complete(self) -> bool:
        return self.expected is not None and self.ranks >= self.expected

    def to_dict(self) -> dict[str, Any]:
        return {
            "event": self.kind,
            "ts": self.ts,
            "ranks": self.ranks,
            "expected": self.expected,
            "complete": self.complete,
            "common": dict(self.common),
            "differences": [d.to_dict() for d in self.differences],
            "bad_nccl": [b.to_dict() for b in self.bad_nccl],
        }


class SettingsWatch:
    """The ranks' reports as they come, compared once all are in (or SETTLE_S after the
    first), then again, at most once a COMPARE_EVERY_S, when a report changed what is
    compared: a thousand ranks' reports of their group cost a few comparisons, not one each."""

    def __init__(
        self,
        expected: int | None,
        secret: Iterable[str] = (),
        settle_s: float = SETTLE_S,
        offsets: Mapping[str, int] | None = None,
    ) -> None:
        """`offsets`: a node's first rank in the job where its ranks number from 0 on their
        own (torchft's replica groups), so that ranks are named as the console names them."""
        self.expected = expected
        self.secret = tuple(secret)
        self.settle_s = settle_s
        self.offsets = dict(offsets or {})
        self.reports: dict[tuple[str, int], RankSettings] = {}
        self.first: float | None = None
        self.said: tuple[tuple[str, ...], tuple[str, ...], bool, bool] | None = None
        self._initialised: set[tuple[str, int]] = set()  # ranks whose group exists
        self._dirty = False  # a report changed what is compared since the last comparison
        self._compared_at = 0.0
        self.last: SettingsReport | None = None

    def seen(self, node: str, line: Mapping[str, Any], now: float) -> list[Event]:
        """One report line from a node's stream."""
        report = RankSettings.from_report(node, line, self.secret)
        if report is None:
            return []
        if self.offsets.get(node):
            report = replace(report, rank=report.rank + self.offsets[node])
        key = (node, report.local_rank)
        old = self.reports.get(key)
        new = old.merged(report) if old is not None else report
        self.reports[key] = new
        self.first = now if self.first is None else self.first
        if new.stage == "init":
            self._initialised.add(key)
        if self.said is None:
            return self._judged(now)
        flips = not self.said[3] and len(self._initialised) >= len(self.reports)
        if old is None or _compared(old) != _compared(new) or flips:
            self._dirty = True  # compared at most once a COMPARE_EVERY_S (tick or here)
        return self._judged(now) if now - self._compared_at >= COMPARE_EVERY_S else []

    def tick(self, now: float) -> list[Event]:
        """The first comparison of a job whose ranks did not all report within SETTLE_S, and
        the one a report held back (COMPARE_EVERY_S)."""
        if self.first is None:
            return []
        return self._judged(now) if self.said is None or self._dirty else []

    def _judged(self, now: float) -> list[Event]:
        reports = list(self.reports.values())
        complete = self.expected is not None and len(reports) >= self.expected
        if self.said is None and not complete and now - (self.first or now) < self.settle_s:
            return []
        if self.said is not None and not self._dirty:
            return []
        self._dirty, self._compared_at = False, now
        differences, bad = compare(reports), bad_nccl(reports)
        initialised = complete and len(self._initialised) >= len(reports)
        key = (
            tuple(d.describe() for d in differences),
            tuple(b.describe() for b in bad),
            complete,
            initialised,  # every group's backend and timeout known: said once more
        )
        if key == self.said:
            return []
        self.said = key
        self.last = SettingsReport(
            len(reports), self.expected, differences, bad, common(reports), ts=now
        )
        return [self.last]
