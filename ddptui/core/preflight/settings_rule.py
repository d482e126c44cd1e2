"""Provides the settings check of preflight: NCCL and the distributed environment, across nodes.

What each node's python sees after `--activate` (the probe: ddptui/core/node/probe.py) is
compared as the running job's ranks are (ddptui/core/diagnose/settings.py): the NCCL its
torch loads, and its `NCCL_*`, `TORCH_NCCL_*`, `TORCH_DISTRIBUTED_*` and `GLOO_*` variables.
torch, Python, the driver and CUDA have checks of their own (torch, python, gpu): they are not
said twice. Another NCCL on a node fails (ranks must run one NCCL); a variable that differs
warns (it may be meant, an interface name); a known-bad NCCL release warns, with its source.
"""

from __future__ import annotations

from ddptui.core.diagnose.settings import (
    RankSettings,
    SettingDifference,
    bad_nccl,
    compare,
)
from ddptui.core.preflight.model import FAIL, OK, SKIP, WARN, Finding, Observations, skip_dead

CHECK = "settings"
NCCL_FIX = (
    "install one NCCL everywhere: the same torch wheel (its nvidia-nccl package) or the same "
    "NCCL on LD_LIBRARY_PATH"
)
ENV_FIX = (
    "set it the same on every node (--env NAME=VALUE for the job), or unset it where a login "
    "or module file sets it"
)


def _reports(obs: Observations) -> tuple[list[RankSettings], list[Finding]]:
    """One report per node whose python runs (its index as its rank), and the others' skips."""
    reports, out = [], skip_dead(obs, CHECK)
    for index, node in enumerate(obs.nodes):
        if node not in obs.live:
            continue
        probe = obs.probe(node.name)
        if obs.container:
            out.append(Finding(node.name, CHECK, SKIP, f"in the image {obs.container}"))
        elif "python" not in probe:
            out.append(Finding(node.name, CHECK, SKIP, "the job's python does not run"))
        else:
            env = {str(k): str(v) for k, v in dict(probe.get("env") or {}).items()}
            env.update(obs.env)  # the job's --env, as every rank gets it
            nccl = probe.get("nccl")
            reports.append(
                RankSettings(node.name, index, nccl=str(nccl) if nccl else None, env=env)
            )
    return reports, out


def _odd_here(difference: SettingDifference, node: str) -> str:
    """`NCCL_IB_DISABLE=1 here; unset on node1 and 1 other(s)`."""
    group = next(g for g in difference.odd if node in g.nodes)
    value = difference.describe_value(group.value)
    ref = difference.reference
    said = "unset" if ref.value is None else ref.value
    others = ref.nodes[0] + (f" and {len(ref.nodes) - 1} other(s)" if len(ref.nodes) > 1 else "")
    return f"{value} here; {said} on {others}"


def check_settings(obs: Observations) -> list[Finding]:
    reports, out = _reports(obs)
    differences = compare(reports)
    bad = {b.version: b for b in bad_nccl(reports)}
    for report in reports:
        name = report.node
        mine = [d for d in differences if name in d.nodes]
        for difference in mine:
            detail = _odd_here(difference, name)
            status, fix = (FAIL, NCCL_FIX) if difference.name == "NCCL" else (WARN, ENV_FIX)
            out.append(Finding(name, CHECK, status, detail, fix))
        if report.nccl in bad:
            found = bad[report.nccl]
            sources = " ".join(found.advisory.sources)
            if found.advisory.fixed_in:
                fix = f"use NCCL {found.advisory.fixed_in} or later ({sources})"
            else:
                fix = f"use another NCCL release, or the workaround its source gives ({sources})"
            detail = f"NCCL {report.nccl}: {found.advisory.what}"
            out.append(Finding(name, CHECK, WARN, detail, fix))
        if not mine and report.nccl not in bad:
            which = f"NCCL {report.nccl}" if report.nccl else "no NCCL"
            said = f"{which}; {len(report.env)} NCCL_/TORCH_NCCL_/GLOO_ variable(s)"
            out.append(Finding(name, CHECK, OK, said))
    return out
