"""A host Slurm lost inside the allocation, as the console reads it at 80x24: the events a
real run on the Slurm testbed said (node3's network cut mid-run, Slurm ending the job with
NODE_FAIL; `tests/integration/test_failure_matrix_slurm.py`, kept in tests/data/slurm/
host_lost) fed to the console. Its first rows, its grid and its summary name node3, the
node Slurm lost, and no rank that the job's end stopped first."""

from __future__ import annotations

from pathlib import Path

from ddptui.core.events import Event
from ddptui.core.runs.event_log import decode_event

from .conftest import local_spec
from .replay import first_rows_and_marks

EVENTS = Path(__file__).resolve().parents[1] / "data" / "slurm" / "host_lost" / "events.jsonl"


def _said() -> list[Event]:
    decoded = (decode_event(line) for line in EVENTS.read_text().splitlines())
    return [e for e in decoded if e is not None]


async def test_a_host_slurm_lost_reads_node3_on_every_surface() -> None:
    # the allocation's three nodes, named as Slurm gave them
    spec = local_spec(backend="ssh", hosts=("node1", "node2", "node3"), nodes=3, nproc_per_node=1)
    rows, marked = await first_rows_and_marks(_said(), spec)
    assert rows[0].startswith("▶ node lost: node node3"), rows[:4]
    assert [node for node, _ in marked] == ["node3"], marked  # the lost node's, no survivor
    shown = "\n".join(rows[:3])
    assert "node1" not in shown and "node2" not in shown, rows[:3]
