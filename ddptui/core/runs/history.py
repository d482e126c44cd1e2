"""Provides run history: every run in a SQLite database in the state dir, written as it goes.

A run is recorded as `running` when it starts, with the console's PID, and gets its outcome
when it ends. A console killed with SIGKILL never writes that end: whoever opens the history
next sees a `running` run whose console is gone and marks it `interrupted` (its events and
node logs are in its run directory, written as the run went).

Each row keeps its run's attempts (core/runs/attempts.py); a relaunch has a row of its own
that names the run it is an attempt of, and `RunHistory.listing` shows them as one run.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import sqlite3
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from ddptui.core.events import (
    AllocationChanged,
    Event,
    NodeChanged,
    NodeState,
    PlanReady,
    RankChanged,
    RankState,
    StopReason,
    plain_number,
)
from ddptui.core.job.hosts import host_range
from ddptui.core.job.spec import JobSpec
from ddptui.core.runs.attempts import (
    RELAUNCHED,
    Attempt,
    AttemptBook,
    AttemptCause,
    AttemptStarted,
    attempts_of_row,
    renumbered,
)
from ddptui.core.runs.history_schema import SCHEMA_VERSION, migrate
from ddptui.core.runs.run_dir import PRIVATE_FILE, RunDir, private_dir, state_dir
from ddptui.core.runs.summary import RunSummary
from ddptui.core.story.goodput import Goodput

DB_NAME = "history.sqlite3"
RUNNING, INTERRUPTED = "running", "interrupted"
OUTCOMES = ("ok", "failed", "torn down", "detached", "error", RUNNING, INTERRUPTED)


def history_path() -> Path:
    return state_dir() / DB_NAME


@dataclass(frozen=True)
class RankOutcome:
    rank: int | None
    node: str
    local_rank: int
    state: str
    exit_code: int | None = None
    culprit: bool = False  # the rank the run's summary names as its failure's culprit


@dataclass(frozen=True)
class RunRecord:
    """One row of the history."""

    id: str
    profile: str
    backend: str
    hosts: tuple[str, ...]
    slurm_job: str | None
    nodes: int
    nproc_per_node: int
    script: str
    started: float
    ended: float | None
    status: str
    detail: str
    ranks: tuple[RankOutcome, ...]
    run_dir: str
    console_pid: int | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    verdict: dict[str, Any] = field(default_factory=dict)  # the failure's one verdict
    # The run's metrics in a few numbers (MetricStore.summary): `loss.last`, `loss.best`,
    # `samples/s.mean`, ...; NaN where the run ended on one.
    metrics: dict[str, float] = field(default_factory=dict)
    # Its attempts, in order (one at least); `attempt_of`: the run this row relaunched.
    attempts: tuple[Attempt, ...] = ()
    attempt_of: str | None = None
    goodput: Goodput | None = None  # where its wall time went (None: it recorded no end)

    def where_text(self, short: bool = False) -> str:
        """The Slurm job, or the hosts, the run used; `short`: the hosts as one range
        (`node[001-040]`), for a narrow table."""
        names = host_range(self.hosts) if short else ",".join(self.hosts)
        job = f"job {self.slurm_job}" + (f" ({names})" if names else "") if self.slurm_job else ""
        return job or names or "-"

    @property
    def duration(self) -> float | None:
        if self.ended is not None:
            return self.ended - self.started
        return time.time() - self.started if self.status == RUNNING else None

    def ranks_text(self) -> str:
        """`4/4 done`, or the culprit (else the first failed rank) and how many are done; how
        many the operator's teardown stopped, and a stall's lone suspect among them."""
        if not self.ranks:
            return "-"
        done = sum(r.state == "done" for r in self.ranks)
        failed = [r for r in self.ranks if r.state == "failed"]
        text = f"{done}/{len(self.ranks)} done"
        if failed:
            first = next((r for r in failed if r.culprit), failed[0])
            name = (
                f"r{first.rank}" if first.rank is not None else f"{first.node}:L{first.local_rank}"
            )
            code = f" (exit {first.exit_code})" if first.exit_code is not None else ""
            text += f", {name} failed{code}" + (f" +{len(failed) - 1}" if len(failed) > 1 else "")
        stopped = [r for r in self.ranks if r.state == "stopped"]  # by the operator's teardown
        if stopped:
            text += f", {len(stopped)} stopped"
            odd = next((r for r in stopped if r.culprit and r.rank is not None), None)
            text += f" (r{odd.rank} the stall's suspect)" if odd and not failed else ""
        return text

    def to_dict(self) -> dict[str, Any]:
        data = {k: v for k, v in self.__dict__.items() if k != "extra"}
        data["metrics"] = {k: plain_number(v) for k, v in self.metrics.items()}
        data["hosts"] = list(self.hosts)
        data["ranks"] = [r.__dict__ for r in self.ranks]
        data["attempts"] = [a.to_dict() for a in self.attempts]
        data["goodput"] = self.goodput.to_dict() if self.goodput else None
        return data

    def goodput_text(self) -> str:
        """`62%`: the share of its wall time the ranks stepped; `-` where it is not known."""
        if self.goodput is None or self.goodput.wall_s <= 0:
            return "-"
        return f"{self.goodput.fraction:.0%}"

    def run(self) -> RunDir:
        return RunDir(Path(self.run_dir))

    def spec(self) -> JobSpec:
        """The job as it ran, for a relaunch (FileNotFoundError if its directory is gone)."""
        return self.run().read_spec()


def proc_start(pid: int) -> str | None:
    """The process's start time in clock ticks since boot: a PID reused later differs."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return None if fields[0] == "Z" else fields[19]


def console_alive(pid: int | None, start: str | None, host: str | None) -> bool:
    """Whether the console that recorded a run still runs (only knowable on its own host)."""
    if host and host != socket.gethostname():
        return True
    if pid is None:
        return False
    now = proc_start(pid)
    return now is not None and (start is None or now == start)


def ranks_from_events(run_dir: Path) -> list[RankOutcome]:
    """Each rank's last recorded state, from the run's event log (for runs cut short)."""
    last: dict[tuple[str, int], RankOutcome] = {}
    try:
        lines = (run_dir / "events.jsonl").read_text(errors="replace").splitlines()
    except OSError:
        lines = []
    for line in lines:
        with contextlib.suppress(ValueError, KeyError, TypeError):
            e = json.loads(line)
            if e.get("event") != "rank":
                continue
            key = (e["node"], e["local_rank"])
            known = last.get(key)
            rank = e["rank"] if e["rank"] is not None else (known.rank if known else None)
            last[key] = RankOutcome(rank, key[0], key[1], e["state"], e["exit_code"])
    return sorted(last.values(), key=lambda r: (r.node, r.local_rank))


def recorded_events(run_dir: Path) -> list[RankChanged | NodeChanged]:
    """The rank and node changes a run recorded, as events again (to redraw its grid)."""
    out: list[RankChanged | NodeChanged] = []
    try:
        lines = (run_dir / "events.jsonl").read_text(errors="replace").splitlines()
    except OSError:
        return out
    for line in lines:
        with contextlib.suppress(ValueError, KeyError, TypeError):
            e = json.loads(line)
            if e.get("event") == "rank":
                state = RankState(e["state"])
                out.append(
                    RankChanged(
                        e["rank"],
                        e["node"],
                        e["local_rank"],
                        state,
                        e["exit_code"],
                        e["detail"],
                        ts=e["ts"],
                    )
                )
            elif e.get("event") == "node":
                state_n = NodeState(e["state"])
                out.append(NodeChanged(e["node"], state_n, e["exit_code"], e["detail"], ts=e["ts"]))
    return out


def outcome_of(summary: RunSummary) -> str:
    if summary.detached:
        return "detached"
    if summary.ok:
        return "ok"
    return {StopReason.OPERATOR: "torn down", StopReason.ERROR: "error"}.get(
        summary.stopped_by, "failed"
    )


class RunHistory:
    """The history database; every call opens, does its work and closes (several consoles
    may share one state dir)."""

    def __init__(self, path: Path | None = None) -> None:
        self.path = path or history_path()

    @contextlib.contextmanager
    def _db(self) -> Iterator[sqlite3.Connection]:
        if not self.path.exists():
            private_dir(self.path.parent)
            # SQLite gives its journal files the database's mode: private from the start.
            os.close(os.open(self.path, os.O_WRONLY | os.O_CREAT, PRIVATE_FILE))
        elif self.path.stat().st_mode & 0o077:
            with contextlib.suppress(OSError):  # a database written before it was private
                os.chmod(self.path, PRIVATE_FILE)
        db = sqlite3.connect(self.path, timeout=15)
        try:
            db.row_factory = sqlite3.Row
            if db.execute("PRAGMA user_version").fetchone()[0] < SCHEMA_VERSION:
                migrate(db)
            with db:
                yield db
        finally:
            db.close()

    def started(self, run: RunDir, spec: JobSpec, started: float | None = None) -> None:
        """The run begins (or is attached again): it is `running`, owned by this process."""
        pid = os.getpid()
        when = started if started is not None else time.time()
        of = run.attempt_of()
        cause = AttemptCause.RELAUNCH if of else AttemptCause.LAUNCH
        why = f"relaunch of run {of}" if of else ""
        first = AttemptBook.launched(run.run_id, when, cause, why=why).current
        row: dict[str, Any] = {
            "id": run.run_id,
            "profile": spec.profile,
            "backend": spec.backend,
            "hosts": json.dumps(list(spec.hosts[: spec.nodes])),
            "nodes": spec.nodes,
            "nproc_per_node": spec.nproc_per_node,
            "script": spec.script,
            "started": when,
            "status": RUNNING,
            "run_dir": str(run.path.resolve()),
            "console_pid": pid,
            "console_start": proc_start(pid),
            "console_host": socket.gethostname(),
            "attempts": json.dumps([first.to_dict()]),
            "attempt_of": of,
        }
        with self._db() as db:
            if db.execute("SELECT 1 FROM runs WHERE id = ?", (run.run_id,)).fetchone():
                db.execute(
                    "UPDATE runs SET status = ?, ended = NULL, console_pid = ?, "
                    "console_start = ?, console_host = ? WHERE id = ?",
                    (RUNNING, pid, row["console_start"], row["console_host"], run.run_id),
                )
                return
            if of:  # counted on from the run's attempts so far
                first = replace(first, index=_attempts_so_far(db, of) + 1)
                row["attempts"] = json.dumps([first.to_dict()])
            columns = ", ".join(row)
            marks = ", ".join("?" for _ in row)
            db.execute(f"INSERT INTO runs ({columns}) VALUES ({marks})", tuple(row.values()))

    def update(self, run_id: str, **values: Any) -> None:
        if not values:
            return
        sets = ", ".join(f"{name} = ?" for name in values)
        with self._db() as db:
            db.execute(f"UPDATE runs SET {sets} WHERE id = ?", (*values.values(), run_id))

    def attempts(self, run_id: str) -> list[Attempt]:
        """The attempts a run's row holds (none for a run not recorded, or recorded before
        attempts were kept)."""
        with self._db() as db:
            row = db.execute("SELECT attempts FROM runs WHERE id = ?", (run_id,)).fetchone()
        return _attempts(row["attempts"]) if row else []

    def latest_attempt_dir(self, run_id: str) -> str | None:
        """The run directory of a run's latest relaunch (None: it has none)."""
        with self._db() as db:
            row = db.execute(
                "SELECT run_dir FROM runs WHERE attempt_of = ? ORDER BY started DESC, id DESC",
                (run_id,),
            ).fetchone()
        return str(row["run_dir"]) if row else None

    def finished(self, summary: RunSummary, ended: float | None = None) -> None:
        ranks = [
            RankOutcome(
                r.rank, r.node, r.local_rank, r.state.value, r.exit_code, r.culprit
            ).__dict__
            for r in summary.ranks
        ]
        self.update(
            summary.run_id,
            status=outcome_of(summary),
            ended=None if summary.detached else (ended or time.time()),
            detail=summary.detail,
            ranks=json.dumps(ranks),
            verdict=json.dumps(summary.to_dict()["verdict"]) if summary.verdict else "",
            console_pid=None,
            metrics=json.dumps({k: plain_number(v) for k, v in summary.metrics.items()}),
            goodput=json.dumps(summary.goodput.to_dict()) if summary.goodput else "",
        )

    def runs(self, limit: int | None = None) -> list[RunRecord]:
        """Newest first; runs whose console died mid-run are marked `interrupted` first."""
        self.mark_interrupted()
        query = "SELECT * FROM runs ORDER BY started DESC, id DESC"
        with self._db() as db:
            rows = db.execute(query + (" LIMIT ?" if limit else ""), (limit,) if limit else ())
            return [_record(row) for row in rows.fetchall()]

    def listing(self, limit: int | None = None) -> list[RunRecord]:
        """The runs as history lists them, newest activity first: a relaunched run once,
        its relaunches' attempts after its own, its outcome and records its last's."""
        self.mark_interrupted()
        last = "COALESCE((SELECT MAX(c.started) FROM runs c WHERE c.attempt_of = runs.id), started)"
        first = "attempt_of IS NULL OR attempt_of NOT IN (SELECT id FROM runs)"  # its own
        query = f"SELECT * FROM runs WHERE {first} ORDER BY {last} DESC, id DESC"
        with self._db() as db:
            rows = db.execute(query + (" LIMIT ?" if limit else ""), (limit,) if limit else ())
            firsts = [_record(row) for row in rows.fetchall()]
            marks = ", ".join("?" for _ in firsts)
            later = db.execute(
                f"SELECT * FROM runs WHERE attempt_of IN ({marks}) ORDER BY started, id",
                tuple(r.id for r in firsts),
            ).fetchall()
        relaunches: dict[str, list[RunRecord]] = {}
        for row in later:
            relaunches.setdefault(row["attempt_of"], []).append(_record(row))
        return [_as_one_run(first, relaunches.get(first.id, [])) for first in firsts]

    def get(self, run_id: str) -> RunRecord | None:
        self.mark_interrupted()
        with self._db() as db:
            row = db.execute("SELECT * FROM runs WHERE id = ?", (run_id,)).fetchone()
        return _record(row) if row else None

    def mark_interrupted(self) -> list[str]:
        """`running` runs whose console is gone: their last rank states come from their events."""
        with self._db() as db:
            rows = db.execute(
                "SELECT id, run_dir, console_pid, console_start, console_host FROM runs "
                "WHERE status = ? AND ended IS NULL",
                (RUNNING,),
            ).fetchall()
            gone = [
                r
                for r in rows
                if not console_alive(r["console_pid"], r["console_start"], r["console_host"])
            ]
            for r in gone:
                ranks = [x.__dict__ for x in ranks_from_events(Path(r["run_dir"]))]
                db.execute(
                    "UPDATE runs SET status = ?, detail = ?, ranks = ? WHERE id = ?",
                    (
                        INTERRUPTED,
                        f"the console (PID {r['console_pid']}) ended without recording an "
                        "outcome; the run directory has what it saw",
                        json.dumps(ranks),
                        r["id"],
                    ),
                )
        return [r["id"] for r in gone]


def _record(row: sqlite3.Row) -> RunRecord:
    ranks = tuple(RankOutcome(**r) for r in json.loads(row["ranks"] or "[]"))
    return RunRecord(
        id=row["id"],
        profile=row["profile"],
        backend=row["backend"],
        hosts=tuple(json.loads(row["hosts"] or "[]")),
        slurm_job=row["slurm_job"],
        nodes=row["nodes"],
        nproc_per_node=row["nproc_per_node"],
        script=row["script"],
        started=row["started"],
        ended=row["ended"],
        status=row["status"],
        detail=row["detail"],
        ranks=ranks,
        run_dir=row["run_dir"],
        console_pid=row["console_pid"],
        extra={"console_host": row["console_host"]},
        verdict=json.loads(row["verdict"]) if row["verdict"] else {},
        metrics=_numbers(row["metrics"]),
        attempts=tuple(
            attempts_of_row(
                _attempts(row["attempts"]),
                row["id"],
                row["started"],
                row["ended"],
                row["status"],
                row["detail"],
            )
        ),
        attempt_of=row["attempt_of"],
        goodput=_goodput(row["goodput"]),
    )


def _attempts_so_far(db: sqlite3.Connection, run_id: str) -> int:
    """How many attempts run `run_id` and its relaunches have had (a row without its list
    counts one)."""
    rows = db.execute(
        "SELECT attempts FROM runs WHERE id = ? OR attempt_of = ?", (run_id, run_id)
    ).fetchall()
    return sum(len(_attempts(row["attempts"])) or 1 for row in rows)


def _goodput(text: str | None) -> Goodput | None:
    try:
        return Goodput.from_dict(json.loads(text)) if text else None
    except (ValueError, TypeError, KeyError, AttributeError):
        return None


def _attempts(text: str | None) -> list[Attempt]:
    try:
        return [Attempt.from_dict(a) for a in json.loads(text or "[]")]
    except (ValueError, TypeError, KeyError, AttributeError):
        return []


def _as_one_run(first: RunRecord, relaunches: list[RunRecord]) -> RunRecord:
    """A run and its relaunches as one: its id and start, every attempt in order (each
    relaunched one ended as `relaunched` if it said no more), the rest from the last."""
    if not relaunches:
        return first
    attempts: list[Attempt] = []
    for record in (first, *relaunches):
        if attempts and attempts[-1].outcome in ("running", "detached", "interrupted", ""):
            attempts[-1] = replace(attempts[-1], outcome=RELAUNCHED)
        attempts += record.attempts
    last = relaunches[-1]
    return replace(
        last,
        id=first.id,
        started=first.started,
        attempts=tuple(renumbered(attempts)),
        attempt_of=None,
    )


def _numbers(text: str | None) -> dict[str, float]:
    """The metrics column read back ("nan" and the infinities spelled as the file spells them)."""
    try:
        raw = json.loads(text or "{}")
        return {str(k): float(v) for k, v in raw.items()}
    except (ValueError, TypeError, AttributeError):
        return {}


class RunRecorder:
    """The Session's hook: records the run as it goes. The history is a convenience; a
    database that cannot be written never stops a run (the run directory has everything)."""

    def __init__(self, run: RunDir, spec: JobSpec, history: RunHistory | None = None) -> None:
        self.run = run
        self.spec = spec
        self.history = history or RunHistory()
        self.problem = ""
        self._job: str | None = None
        self.book = AttemptBook.launched(run.run_id, time.time())

    def _try(self, call: Callable[..., None], *args: Any, **kwargs: Any) -> None:
        if self.problem:
            return
        try:
            call(*args, **kwargs)
        except (sqlite3.Error, OSError) as exc:
            self.problem = f"run history not written ({self.history.path}): {exc}"

    def begin(self) -> None:
        """The run begins, or a console attaches to it again: the attempts it had go on."""
        self._try(self.history.started, self.run, self.spec)
        stored: list[Attempt] = []
        self._try(lambda: stored.extend(self.history.attempts(self.run.run_id)))
        if stored:
            self.book.attempts = stored

    def observe(self, event: Event) -> list[AttemptStarted]:
        """Records what the event changes; the attempt it begins, if any (the session
        tells it)."""
        began = self.book.seen(event)
        if began:
            attempts = json.dumps([a.to_dict() for a in self.book.attempts])
            self._try(self.history.update, self.run.run_id, attempts=attempts)
        if isinstance(event, AllocationChanged) and event.job_id and event.job_id != self._job:
            self._job = event.job_id
            self._try(self.history.update, self.run.run_id, slurm_job=event.job_id)
        elif isinstance(event, PlanReady):
            hosts = json.dumps([node for node, _line in event.commands])
            self._try(self.history.update, self.run.run_id, hosts=hosts)
        elif isinstance(event, RunSummary):
            ended = None if event.detached else time.time()
            self.book.finish(outcome_of(event), event.detail.split("\n", 1)[0], ended)
            attempts = json.dumps([a.to_dict() for a in self.book.attempts])
            self._try(self.history.finished, event, ended)
            self._try(self.history.update, self.run.run_id, attempts=attempts)
        return began
