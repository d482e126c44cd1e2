"""A host Slurm lost inside the allocation, as the console reads it at 80x24: the events real
runs on the Slurm testbed said (node3's network cut mid-run; `tests/integration/
test_failure_matrix_slurm.py`, kept in tests/data/slurm/host_lost*), fed to the console. A
fixed job ends with it (NODE_FAIL); an elastic one, allocated with `--no-kill`, goes on
without node3 and finishes. Either way its first rows, its grid and its summary name node3,
the node Slurm lost, and no node whose task srun ended because of it."""

from __future__ import annotations

from pathlib import Path

import pytest

from ddptui.core.events import Event
from ddptui.core.runs.event_log import decode_event
from ddptui.core.runs.summary import RunSummary

from .conftest import local_spec
from .replay import first_rows_and_marks

DATA = Path(__file__).resolve().parents[1] / "data" / "slurm"


def _said(capture: str) -> list[Event]:
    lines = (DATA / capture / "events.jsonl").read_text().splitlines()
    decoded = (decode_event(line) for line in lines)
    return [e for e in decoded if e is not None]


@pytest.mark.parametrize("capture", ["host_lost", "host_lost_elastic"])
async def test_a_host_slurm_lost_reads_node3_on_every_surface(capture: str) -> None:
    # the allocation's three nodes, named as Slurm gave them
    spec = local_spec(backend="ssh", hosts=("node1", "node2", "node3"), nodes=3, nproc_per_node=1)
    said = _said(capture)
    rows, marked = await first_rows_and_marks(said, spec)
    assert rows[0].startswith("▶ node lost: node node3"), rows[:4]
    assert [node for node, _ in marked] == ["node3"], marked  # the lost node's, no survivor
    shown = "\n".join(rows[:3])
    assert "node1" not in shown and "node2" not in shown, rows[:3]
    (summary,) = [e for e in said if isinstance(e, RunSummary)]
    told = [line for line in summary.detail.splitlines() if "node lost" in line]
    assert told and told[0].split("node lost: ", 1)[1].startswith("node node3 — Slurm lost")
