"""Provides the preflight rules: what the nodes reported, turned into ok/warn/fail with a fix."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from ddptui.core.backends.base import SCRIPT_FIX
from ddptui.core.preflight.gang import check_gang
from ddptui.core.preflight.gpu_rules import check_gpu
from ddptui.core.preflight.model import (
    CHECKS,
    FAIL,
    LOW_FREE,
    MIN_FREE,
    OK,
    SKIP,
    WARN,
    Finding,
    Observations,
    human,
    on_nodes,
    reference,
    skip_dead,
    worst,
)
from ddptui.core.preflight.network import check_clock, check_hostname, check_rdzv_port
from ddptui.core.preflight.settings_rule import check_settings

Rule = Callable[[Observations], list[Finding]]

# -- the rules, one per check -------------------------------------------------------------------


def check_reachable(obs: Observations) -> list[Finding]:
    fixes = {
        "ssh": "check the host is up and `ssh HOST true` works without a prompt (keys; "
        "known_hosts or --accept-new-host-keys; --ssh-config); python3 must be on its PATH "
        "(or --python)",
        "slurm": "check the node in `sinfo -N` (down, drained?) and that "
        "`srun -w NODE python3 -V` works",
        "local": "python could not start on this machine",
    }
    out = []
    for node in obs.nodes:
        if node.name in obs.unreachable:
            fix = fixes.get(obs.backend, "")
            out.append(Finding(node.name, "reachable", FAIL, obs.unreachable[node.name], fix))
        elif node.name in obs.facts:
            host = obs.facts[node.name].get("hostname", "?")
            out.append(Finding(node.name, "reachable", OK, f"{host} at {node.address}"))
    return out


def check_python(obs: Observations) -> list[Finding]:
    out = skip_dead(obs, "python")
    versions = {}
    for node in obs.live:
        probe = obs.probe(node.name)
        if "python" not in probe:
            why = probe.get("error", "no report")
            fix = "install Python 3 there, or fix --python / --activate"
            out.append(
                Finding(node.name, "python", FAIL, f"the job's python does not run: {why}", fix)
            )
        else:
            versions[node.name] = probe["python"]
    if versions:
        ref, have = reference(versions, [n.name for n in obs.nodes])
        for name, version in versions.items():
            exe = obs.probe(name).get("executable", "")
            if version == ref:
                out.append(Finding(name, "python", OK, f"{version} ({exe})"))
            else:
                fix = "use one Python everywhere: the same conda env, venv or container image"
                detail = f"Python {version} ({exe}); {ref} on {on_nodes(have)}"
                out.append(Finding(name, "python", FAIL, detail, fix))
    return out


def check_torch(obs: Observations) -> list[Finding]:
    out = skip_dead(obs, "torch")
    versions = {}
    for node in obs.live:
        probe = obs.probe(node.name)
        if obs.container:
            out.append(Finding(node.name, "torch", SKIP, f"in the image {obs.container}"))
        elif "python" not in probe:
            out.append(Finding(node.name, "torch", SKIP, "the job's python does not run"))
        elif "torch" in probe:
            versions[node.name] = probe["torch"]
    ref, have = reference(versions, [n.name for n in obs.nodes]) if versions else ("", [])
    want = f"torch=={ref.split('+')[0]}" if ref else "torch"
    for node in obs.live:
        probe = obs.probe(node.name)
        if obs.container or "python" not in probe:
            continue
        exe = probe.get("executable", "python3")
        if "torch" not in probe:
            why = probe.get("torch_error", "not importable")
            fix = f"pip install {want} in the job's environment (or fix --activate)"
            out.append(Finding(node.name, "torch", FAIL, f"{exe} cannot import torch: {why}", fix))
            continue
        version = probe["torch"]
        if version != ref:
            fix = f"install {want} there: every node must run the same torch"
            detail = f"torch {version} ({probe.get('torch_path', '')}); {ref} on {on_nodes(have)}"
            out.append(Finding(node.name, "torch", FAIL, detail, fix))
        elif obs.launcher and not probe.get("launcher"):
            fix = "install torch (it provides torchrun) in the job's environment, or --launcher"
            detail = f"torch {version}, but `{obs.launcher}` is not on the job's PATH"
            out.append(Finding(node.name, "torch", FAIL, detail, fix))
        else:
            where = f", {probe['launcher']}" if probe.get("launcher") else ""
            out.append(Finding(node.name, "torch", OK, f"{version}{where}"))
    return out


def check_disk(obs: Observations) -> list[Finding]:
    out = skip_dead(obs, "disk")
    for node in obs.live:
        disk = obs.facts[node.name].get("disk") or {}
        where = disk.get("existing", "?")
        free = int(disk.get("free", 0))
        if not disk.get("writable", False):
            fix = "make it writable for this user, or run from another --workdir"
            out.append(Finding(node.name, "disk", FAIL, f"cannot write in {where}", fix))
        elif free < MIN_FREE:
            fix = f"free space in {where} (old ddptui run dirs, checkpoints), at least 1 GiB"
            out.append(Finding(node.name, "disk", FAIL, f"{human(free)} free in {where}", fix))
        elif free < LOW_FREE:
            fix = f"free space in {where}: checkpoints and logs may fill it"
            out.append(Finding(node.name, "disk", WARN, f"{human(free)} free in {where}", fix))
        else:
            out.append(Finding(node.name, "disk", OK, f"{human(free)} free in {where}"))
    return out


def check_script(obs: Observations) -> list[Finding]:
    out = skip_dead(obs, "script")
    for node in obs.live:
        found = obs.facts[node.name].get("script")
        if obs.container:
            out.append(Finding(node.name, "script", SKIP, f"in the image {obs.container}"))
        elif not obs.script or found is None:
            out.append(Finding(node.name, "script", SKIP, "no script given"))
        elif found.get("exists"):
            out.append(Finding(node.name, "script", OK, str(found["path"])))
        else:
            out.append(Finding(node.name, "script", FAIL, f"{found['path']} not found", SCRIPT_FIX))
    return out


RULES: dict[str, Rule] = {
    "reachable": check_reachable,
    "python": check_python,
    "torch": check_torch,
    "gpu": check_gpu,
    "settings": check_settings,
    "rdzv-port": check_rdzv_port,
    "hostname": check_hostname,
    "clock": check_clock,
    "disk": check_disk,
    "script": check_script,
    "gang": check_gang,
}


def evaluate(
    obs: Observations, only: Sequence[str] | None = None, checks: Sequence[str] = CHECKS
) -> list[Finding]:
    """One finding per (node, check): the worst of what the rules found, details joined."""
    found: dict[tuple[str, str], list[Finding]] = {}
    for check in checks:
        for finding in RULES[check](obs):
            if only is None or finding.node in only:
                found.setdefault((finding.node, finding.check), []).append(finding)
    order = {n.name: i for i, n in enumerate(obs.nodes)}
    merged = []
    for (node, check), items in found.items():
        status = worst(f.status for f in items)
        chosen = [f for f in items if f.status == status] if status in (OK, SKIP) else items
        chosen = [f for f in chosen if f.status != OK] or chosen
        detail = "; ".join(dict.fromkeys(f.detail for f in chosen))
        fix = " ".join(dict.fromkeys(f.fix for f in chosen if f.fix))
        merged.append(Finding(node, check, status, detail, fix))
    merged.sort(key=lambda f: (order.get(f.node, -1), CHECKS.index(f.check)))
    return merged
