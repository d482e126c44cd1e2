"""Provides RankDetails: the chosen rank's state, step rate, phase, cause and last line."""

from __future__ import annotations

from rich.text import Text
from textual.widgets import Static

from ddptui.core.diagnose.rhythm import STEP_FACTOR, RankPhase
from ddptui.core.monitor.patterns import signal_name
from ddptui.ui.widgets.grid_cells import RankGridCell


def describe_rank(
    cell: RankGridCell,
    last_line: str | None,
    steps_per_s: float | None = None,
    phase: RankPhase | None = None,
    now: float = 0.0,
) -> Text:
    """`rank 5 · local1 L1 · running · 2.40 steps/s`, then the phase of the job's rhythm it
    is in with its silence budget, its cause and its last line."""
    text = Text()
    who = f"rank {cell.rank}" if cell.rank is not None else "no rank yet"
    text.append(who, style="bold")
    text.append(f" · {cell.node} L{cell.local_rank} · ")
    state = "running, slow" if cell.straggler else cell.state.value
    if cell.exit_code is not None:
        killed = signal_name(cell.exit_code)
        state += f" (exit {cell.exit_code}" + (f", {killed})" if killed else ")")
    text.append(state, style="bold")
    if steps_per_s is not None:
        text.append(f" · {steps_per_s:.2f} steps/s")
    if cell.restarts:
        text.append(f" · restarted {cell.restarts}×")
    if cell.suspect:
        text.append(" · the stall's suspect", style="bold")
    if phase is not None and not cell.state.final:
        text.append("\nphase: ", style="bold")
        text.append(describe_phase(phase, now))
    causes = [cell.blamed.headline()] if cell.blamed is not None and not cell.blamed.over else []
    causes += [cell.detail] if cell.detail else []
    causes += [d.summary for d in cell.diagnoses]
    if causes:
        text.append("\ncause: ", style="bold")
        text.append(causes[0])
    if last_line:
        text.append("\nlast line: ", style="bold")
        text.append(last_line)
    return text


def describe_phase(phase: RankPhase, now: float) -> str:
    """`checkpoint · 42 s of its 225 s budget, 183 s left`, or `step loop · budget 60 s
    (5 × 1.02 s steps)`."""
    left = phase.left(now)
    if left is not None:
        spent = phase.budget_s - left
        over = f"{-left:.0f} s over" if left < 0 else f"{left:.0f} s left"
        return f"{phase.label} · {spent:.0f} s of its {phase.budget_s:.0f} s budget, {over}"
    said = f"{phase.label} · budget {phase.budget_s:.0f} s"
    if phase.interval_s is not None and phase.budget_s > phase.interval_s * STEP_FACTOR + 0.5:
        return f"{said} (the floor; steps every {phase.interval_s:.2f} s)"
    if phase.interval_s is not None:
        return f"{said} ({STEP_FACTOR:g} × {phase.interval_s:.2f} s steps)"
    return said


class RankDetails(Static):
    """Hidden until the operator chooses a rank (a click, or `go to`); the screen fills it."""

    DEFAULT_CSS = """
    RankDetails {
        height: auto;
        padding: 0 1;
        margin-top: 1;
        border-top: solid $primary;
        display: none;
        &.-shown { display: block; }
    }
    """

    def show_rank(
        self,
        cell: RankGridCell | None,
        last_line: str | None = None,
        steps_per_s: float | None = None,
        phase: RankPhase | None = None,
        now: float = 0.0,
    ) -> None:
        self.set_class(cell is not None, "-shown")
        said = describe_rank(cell, last_line, steps_per_s, phase, now) if cell is not None else ""
        self.update(said)
