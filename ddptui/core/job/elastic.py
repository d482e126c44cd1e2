"""Provides the elastic shape of a job: `--nodes MIN:MAX`, spares, and whether a run goes on."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from ddptui.core.job.spec import JobSpec, SpecError

ELASTIC_RESTARTS = 3  # --max-restarts of an elastic job unless given: a lost node is one
_RANGE = re.compile(r"^\s*(\d+)\s*(?::\s*(\d+)\s*)?$")


@dataclass(frozen=True)
class NodeRange:
    """How many nodes the job runs on: MAX are started, it goes on while MIN remain."""

    min_nodes: int
    max_nodes: int

    @property
    def elastic(self) -> bool:
        return self.min_nodes < self.max_nodes

    def nnodes(self) -> str:
        """torchrun's `--nnodes` value: `2` or `2:3`."""
        return f"{self.min_nodes}:{self.max_nodes}" if self.elastic else str(self.max_nodes)

    def __str__(self) -> str:
        return self.nnodes()


def parse_nodes(text: str | int) -> NodeRange:
    """`3` or `2:3` (MIN:MAX, as torchrun's --nnodes) from a flag, a profile or the form."""
    if isinstance(text, int):
        if text < 1:
            raise SpecError(f"nodes: {text} is not a positive number")
        return NodeRange(text, text)
    match = _RANGE.fullmatch(str(text))
    if not match:
        raise SpecError(f"nodes: {text!r} is neither N nor MIN:MAX (e.g. 2:3)")
    low = int(match.group(1))
    high = int(match.group(2)) if match.group(2) else low
    if low < 1 or high < low:
        raise SpecError(f"nodes: {text!r} needs 1 <= MIN <= MAX")
    return NodeRange(low, high)


def split_node_range(fields: dict[str, Any]) -> dict[str, Any]:
    """JobSpec fields with `nodes` "MIN:MAX" (a profile, the form) as `nodes` MAX and
    `min_nodes` MIN, and the restarts an elastic job needs unless `max_restarts` is given."""
    nodes = fields.get("nodes")
    if not isinstance(nodes, str) or ":" not in nodes:
        return fields  # a number (or not one: the spec's own check says so)
    shape = parse_nodes(nodes)
    out = {**fields, "nodes": shape.max_nodes, "min_nodes": shape.min_nodes}
    if not shape.elastic:
        out["min_nodes"] = None
    elif out.get("max_restarts") is None:
        out["max_restarts"] = ELASTIC_RESTARTS
    return out


def node_range(spec: JobSpec) -> NodeRange:
    """The job's range: `nodes` is MAX, `min_nodes` (None: fixed) is MIN."""
    return NodeRange(spec.min_nodes or spec.nodes, spec.nodes)


def nnodes_for(spec: JobSpec, started: int) -> str:
    """torchrun's `--nnodes` for a job whose plan holds `started` nodes besides its spares."""
    if spec.min_nodes is not None and spec.min_nodes < started:
        return f"{spec.min_nodes}:{started}"
    return str(started)


def goes_on(spec: JobSpec, remaining: int) -> bool:
    """Whether torchrun's elastic agents carry on with `remaining` nodes after a loss."""
    shape = node_range(spec)
    return shape.elastic and spec.max_restarts > 0 and remaining >= shape.min_nodes
