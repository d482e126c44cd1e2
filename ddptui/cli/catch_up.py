"""Provides `ddptui history --refresh`: runs left detached on SSH or Slurm nodes, asked how they
ended, and the outcome of those that did, read to the end as `ddptui attach` reads it.

Asking costs a connection to every node of each such run, so it is done on request only;
runs on this machine are brought up to date from their run directory whenever the history
is read (`core/runs/settle.py`).
"""

from __future__ import annotations

import asyncio
import contextlib
import time

from ddptui.core.backends.base import BackendError
from ddptui.core.backends.factory import make_backend
from ddptui.core.events import StopReason
from ddptui.core.job.spec import SpecError
from ddptui.core.runs.history import RunHistory, RunRecord
from ddptui.core.runs.settle import DETACHED
from ddptui.core.session.session import Session

ASK_TIMEOUT_S = 60.0  # connecting to every node of the run and asking each


def ask_detached(history: RunHistory | None = None) -> dict[str, str]:
    """Every run on SSH or Slurm nodes still marked detached, asked how it is: those whose
    every node has ended get their outcome; returns, by run id, why each other one is still
    detached (still running, or its nodes cannot be asked)."""
    history = history or RunHistory()
    away = [r for r in history.runs() if r.status == DETACHED and r.backend != "local"]
    said = {record.id: asyncio.run(ask_run(record, history)) for record in away}
    return {run_id: why for run_id, why in said.items() if why}


async def ask_run(record: RunRecord, history: RunHistory) -> str:
    """One run: '' once its outcome is recorded, else why it is still detached (also kept
    as the run's detail in the history)."""
    run = record.run()
    asked = time.strftime("%H:%M")
    try:
        spec = run.read_spec()
        plan, state = run.read_plan()
    except (SpecError, FileNotFoundError) as exc:
        return _still(history, record, f"its run directory cannot be read ({exc})")
    backend = make_backend(spec, run, lambda event: None)
    try:
        await asyncio.wait_for(backend.restore(state), ASK_TIMEOUT_S)
        codes = await asyncio.wait_for(
            asyncio.gather(*(backend.ended(c) for c in plan.commands)), ASK_TIMEOUT_S
        )
    except (BackendError, TimeoutError) as exc:
        why = str(exc) or f"no answer in {ASK_TIMEOUT_S:.0f} s"
        return _still(history, record, f"its nodes cannot be asked at {asked}: {why}")
    finally:
        with contextlib.suppress(BackendError):
            await backend.detach()
    running = [c.node for c, code in zip(plan.commands, codes, strict=True) if code is None]
    if running:
        return _still(
            history,
            record,
            f"still running at {asked} on {len(running)} of {len(codes)} node(s)",
        )
    # Every node has ended: attached again, the session reads each node's log to its end,
    # records the outcome as a console watching to the end would, and proves the nodes clean.
    summary = await Session(spec, lambda event: None, run=run, attaching=True).run_job()
    if summary.stopped_by == StopReason.ERROR:
        history.update(record.id, status=DETACHED)
        return _still(history, record, f"its ended nodes could not be read: {summary.detail}")
    return ""


def _still(history: RunHistory, record: RunRecord, why: str) -> str:
    history.update(record.id, detail=f"still detached: {why}")
    return why
