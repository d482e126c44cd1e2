"""Provides Notifier: the operator's `--notify CMD`, run for the incidents they picked, once each.

A run that lasts days is mostly unwatched: the command (a mail, a pager, a chat hook) is how
anyone learns it died at 3 a.m. It runs through the shell on the head node (where the session
runs), in a process group of its own, with one JSON object on stdin (`Notification.to_dict`)
and the run's id, directory, the reason and the headline in its environment; nothing of it
goes on a command line. Its output is kept out of the run's own (headless JSON stays JSON).

What is told (`NotifySelection`, `--notify-on`): the run ended badly (not the operator's own
teardown, not a detach), a restart storm (STORM_RESTARTS restart rounds within STORM_WINDOW_S),
or an incident of a kind the operator named. Each incident is told once, however often the
story updates it; the keys told are kept in the run directory, so a session that attaches to
the run again does not tell them again. A command that fails (exit status, not found, past
its timeout) is a warning in the run, never the run's failure. The commands run one at a
time, in the order they were due, on a thread: the session's event loop never waits for
them, except at the run's end, where the last ones get their timeout each before the summary
is said.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from ddptui.core.events import Event, Notice, StopReason
from ddptui.core.job.spec import JobSpec
from ddptui.core.runs.run_dir import RunDir, open_private
from ddptui.core.runs.summary import RunSummary
from ddptui.core.story.incident import Incident, IncidentKind, IncidentReport

ENDED = "ended"
RESTART_STORM = "restart_storm"
STORM_RESTARTS = 3  # restart rounds within STORM_WINDOW_S make a storm
STORM_WINDOW_S = 600.0
TIMEOUT_S = 30.0  # the command's whole run, its stdin read included
SETTLE_S = 5.0  # an incident is told this long after it began: its stacks, its blame in
TOLD_FILE = "notified"  # in the run directory: the keys told, one a line
OUTPUT_TAIL = 300  # characters of a failing command's output said in the warning


@dataclass(frozen=True)
class Notification:
    """One alert: why (`reason`: a `--notify-on` name), the incident, and how to look."""

    reason: str
    run_id: str
    run_dir: str
    incident: Incident | None
    headline: str
    ended: RunSummary | None = None  # the run's end, when that is the reason
    restarts: int = 0  # restart rounds in the storm's window, when that is the reason

    def to_dict(self) -> dict[str, Any]:
        """The JSON on the command's stdin."""
        data: dict[str, Any] = {
            "notify": self.reason,
            "ts": time.time(),
            "headline": self.headline,
            "run_id": self.run_id,
            "run_dir": self.run_dir,
            "host": socket.gethostname(),
            "incident": self.incident.to_dict() if self.incident else None,
            "look": {
                "console": f"ddptui attach {self.run_id}",
                "browser": f"ddptui serve {self.run_id}",
            },
        }
        if self.ended is not None:
            data["run"] = {
                "ok": self.ended.ok,
                "stopped_by": str(self.ended.stopped_by),
                "detail": self.ended.detail,
            }
        if self.reason == RESTART_STORM:
            data["restarts"] = self.restarts
        return data

    def env(self) -> dict[str, str]:
        """What the command's environment adds to the session's."""
        return {
            "DDPTUI_RUN_ID": self.run_id,
            "DDPTUI_RUN_DIR": self.run_dir,
            "DDPTUI_NOTIFY": self.reason,
            "DDPTUI_HEADLINE": self.headline,
        }

    def what(self) -> str:
        """`hang (incident 2)`: what a notice about this alert names."""
        number = f" (incident {self.incident.number})" if self.incident else ""
        return f"{self.reason}{number}"


class NotifySelection:
    """Which incidents are told, and that each is told once: the model, with no process in it.

    `told` are keys told before (by an earlier session of the same run): `incident:N`,
    `ended`, `restart_storm:N` (N: the restart incident that made the storm)."""

    def __init__(
        self,
        notify_on: Iterable[str],
        told: Iterable[str] = (),
        storm_restarts: int = STORM_RESTARTS,
        storm_window_s: float = STORM_WINDOW_S,
    ) -> None:
        self.notify_on = frozenset(notify_on)
        self.told: set[str] = set(told)
        self.storm_restarts = storm_restarts
        self.storm_window_s = storm_window_s
        self._restarts: dict[int, float] = {}  # restart incident -> when its round began
        self._storm_last: float | None = None  # the last restart of the storm being told

    def incident(self, incident: Incident) -> list[tuple[str, str]]:
        """The alerts an incident's report makes, as (reason, key): none for an incident
        told already, nor for its updates; its kind counts the first time it is one the
        operator picked (a verdict may judge a crash an out-of-memory later)."""
        due: list[tuple[str, str]] = []
        if incident.kind == IncidentKind.RESTARTED:
            storm = self._restart(incident)
            if storm is not None:
                due.append((RESTART_STORM, storm))
        key = f"incident:{incident.number}"
        if str(incident.kind) in self.notify_on and key not in self.told:
            self.told.add(key)
            due.append((str(incident.kind), key))
        return due

    def _restart(self, incident: Incident) -> str | None:
        """A storm's key when this restart round makes one; a storm goes on (and is not told
        again) while its rounds come within the window of each other."""
        if incident.number in self._restarts:
            return None
        at = incident.began
        if self._storm_last is not None and at - self._storm_last > self.storm_window_s:
            self._storm_last = None  # the storm blew over: a new one may be told
        if self._storm_last is not None:
            self._storm_last = max(self._storm_last, at)
        self._restarts[incident.number] = at
        recent = [t for t in self._restarts.values() if at - t <= self.storm_window_s]
        key = f"{RESTART_STORM}:{incident.number}"
        if self._storm_last is not None or len(recent) < self.storm_restarts:
            return None
        self._storm_last = at
        if RESTART_STORM not in self.notify_on or key in self.told:
            return None
        self.told.add(key)
        return key

    def restarts_within(self, at: float) -> int:
        return sum(at - t <= self.storm_window_s for t in self._restarts.values() if t <= at)

    def ended(self, summary: RunSummary) -> str | None:
        """The key of the run's end when it is told: it ended badly, not by the operator's
        teardown nor a detach (the job runs on)."""
        badly = not summary.ok and not summary.detached
        if not badly or summary.stopped_by == StopReason.OPERATOR:
            return None
        if ENDED not in self.notify_on or ENDED in self.told:
            return None
        self.told.add(ENDED)
        return ENDED


def run_command(
    command: str, stdin: bytes, env: Mapping[str, str], timeout: float = TIMEOUT_S
) -> str:
    """Run `command` through the shell in a process group of its own, `stdin` on its stdin;
    "" when it exited 0, else what went wrong (its status and the end of its output). Past
    `timeout` the whole group is killed."""
    with tempfile.TemporaryFile() as out:
        try:
            proc = subprocess.Popen(
                command,
                shell=True,
                stdin=subprocess.PIPE,
                stdout=out,
                stderr=out,
                env={**os.environ, **env},
                start_new_session=True,
            )
        except OSError as exc:
            return f"could not be started: {exc.strerror or exc}"
        try:
            proc.communicate(stdin, timeout=timeout)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            return f"did not end within {timeout:g} s: stopped"
        if proc.returncode == 0:
            return ""
        out.seek(0)
        said = out.read().decode(errors="replace").strip()
        tail = said[-OUTPUT_TAIL:].replace("\n", " | ")
        code = proc.returncode
        how = f"was killed by signal {-code}" if code < 0 else f"exited {code}"
        return f"{how}" + (f": {tail}" if tail else "")


class Notifier:
    """A run's alerts: the session hands it every incident report (`seen`) and its summary
    before saying it (`run_ended`); the command runs on a thread, its failure a warning."""

    def __init__(
        self,
        command: str,
        notify_on: Iterable[str],
        run: RunDir,
        emit: Callable[[Event], None],
        *,
        timeout: float = TIMEOUT_S,
        settle: float = SETTLE_S,
        selection: NotifySelection | None = None,
    ) -> None:
        self.command = command
        self.run = run
        self.emit = emit
        self.timeout = timeout
        self.settle = settle
        self.selection = selection or NotifySelection(notify_on, self._told_before())
        self._latest: dict[int, Incident] = {}
        self._waiting: dict[str, tuple[str, int, asyncio.TimerHandle | None]] = {}
        self._sending: set[asyncio.Future[None]] = set()
        self._in_turn: asyncio.Lock | None = None  # one command at a time, in order

    @classmethod
    def for_job(cls, spec: JobSpec, run: RunDir, emit: Callable[[Event], None]) -> Notifier | None:
        """The job's notifier, or None when it has no `notify` command."""
        return cls(spec.notify, spec.notify_on, run, emit) if spec.notify else None

    def _told_before(self) -> list[str]:
        try:
            return (self.run.path / TOLD_FILE).read_text().split()
        except OSError:
            return []

    def _keep(self, key: str) -> None:
        """Told (or about to be): kept before the command runs, so it is never told twice."""
        with contextlib.suppress(OSError), open_private(self.run.path / TOLD_FILE, "a") as f:
            f.write(key + "\n")

    # -- what the session hands it ---------------------------------------------------------

    def seen(self, report: IncidentReport) -> None:
        """An incident began or changed: told after SETTLE_S, as it stands then."""
        incident = report.incident
        self._latest[incident.number] = incident
        for reason, key in self.selection.incident(incident):
            self._keep(key)
            handle = None
            with contextlib.suppress(RuntimeError):  # no loop running: said at the end
                loop = asyncio.get_running_loop()
                handle = loop.call_later(self.settle, self._due, key)
            self._waiting[key] = (reason, incident.number, handle)

    async def run_ended(self, summary: RunSummary, lead: Incident | None) -> None:
        """The run is over: what waits is told now, the end too if it is picked, and every
        command is given its timeout to finish before the summary is said."""
        for key in list(self._waiting):
            self._due(key)
        end = self.selection.ended(summary)
        if end is not None:
            self._keep(end)
            headline = lead.headline() if lead else summary.headline
            self._send(
                Notification(
                    ENDED,
                    summary.run_id,
                    summary.run_dir,
                    lead,
                    headline or summary.detail.split("\n", 1)[0],
                    ended=summary,
                )
            )
        if self._sending:
            await asyncio.wait(set(self._sending))

    # -- telling ---------------------------------------------------------------------------

    def _due(self, key: str) -> None:
        waiting = self._waiting.pop(key, None)
        if waiting is None:
            return
        reason, number, handle = waiting
        if handle is not None:
            handle.cancel()
        incident = self._latest[number]
        restarts = self.selection.restarts_within(incident.began) if reason == RESTART_STORM else 0
        self._send(
            Notification(
                reason,
                self.run.run_id,
                str(self.run.path),
                incident,
                incident.headline(),
                restarts=restarts,
            )
        )

    def _send(self, note: Notification) -> None:
        task = asyncio.ensure_future(self._deliver(note))
        self._sending.add(task)
        task.add_done_callback(self._sending.discard)

    async def _deliver(self, note: Notification) -> None:
        self._in_turn = self._in_turn or asyncio.Lock()
        async with self._in_turn:  # a lock's waiters are woken in the order they came
            stdin = (json.dumps(note.to_dict()) + "\n").encode()
            failed = await asyncio.to_thread(
                run_command, self.command, stdin, note.env(), self.timeout
            )
        if failed:
            self.emit(Notice("warning", f"notify: {note.what()} not told: the command {failed}"))
        else:
            self.emit(Notice("info", f"notify: {note.what()} told"))
