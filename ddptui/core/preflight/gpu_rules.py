"""Provides the gpu check: GPUs vs processes, one driver and CUDA everywhere, ECC, remapping, Xid.

What each node's probe reported (ddptui/core/node/probe.py: `nvidia-smi --query-gpu`, then
NVML or `nvidia-smi -q` for health, the kernel log for Xid reports) against what the job asks.
No `nvidia-smi` is "no GPU": a CPU job on gloo, not a failure.
"""

from __future__ import annotations

from typing import Any

from ddptui.core.job.gpus import CUDA_VISIBLE, counted, hides_gpus
from ddptui.core.preflight.model import (
    FAIL,
    OK,
    WARN,
    Finding,
    Observations,
    on_nodes,
    reference,
    skip_dead,
)

RESET_FIX = (
    "take the node out of service and reset the GPU (nvidia-smi -r, or reboot); if it comes "
    "back, the GPU needs replacing"
)


def _gpu(obs: Observations, node: str) -> dict[str, Any]:
    return dict(obs.facts[node].get("gpu") or {})


def _gpus(obs: Observations, node: str) -> list[list[str]]:
    return list(_gpu(obs, node).get("gpus") or [])


def _same(values: dict[str, str], live: list[str], what: str, fix: str) -> list[Finding]:
    """A warning on each node whose `what` differs from most nodes'."""
    if not values:
        return []
    ref, have = reference(values, live)
    return [
        Finding(name, "gpu", WARN, f"{what} {value}; {ref} on {on_nodes(have)}", fix)
        for name, value in values.items()
        if value != ref
    ]


def check_gpu(obs: Observations) -> list[Finding]:
    out = skip_dead(obs, "gpu")
    live = [n.name for n in obs.live]
    with_gpus = [n for n in live if _gpus(obs, n)]
    for name in live:
        gpu, gpus = _gpu(obs, name), _gpus(obs, name)
        if gpu.get("error"):
            fix = (
                "the NVIDIA driver is not working here: check `nvidia-smi`; reinstall or reload "
                "the driver (reboot after a driver upgrade)"
            )
            out.append(Finding(name, "gpu", FAIL, f"nvidia-smi failed: {gpu['error']}", fix))
        elif not gpus:
            if with_gpus:
                fix = "give the job nodes of one kind (Slurm: --gres=gpu:N, a GPU partition)"
                detail = f"no GPU here, but {on_nodes(with_gpus)} has GPUs"
                out.append(Finding(name, "gpu", FAIL, detail, fix))
            else:
                out.append(Finding(name, "gpu", OK, "no GPU (CPU job: gloo)"))
        else:
            out += _gpu_node(obs, name, gpus)
    drivers = {n: _gpus(obs, n)[0][1] for n in with_gpus if len(_gpus(obs, n)[0]) > 1}
    out += _same(drivers, live, "driver", "install the same NVIDIA driver on every node")
    cudas = {
        n: str(_gpu(obs, n).get("health", {}).get("cuda"))
        for n in with_gpus
        if _gpu(obs, n).get("health", {}).get("cuda")
    }
    out += _same(cudas, live, "CUDA (driver)", "install the same NVIDIA driver on every node")
    builds = {
        n: str(obs.probe(n)["cuda_build"]) for n in with_gpus if obs.probe(n).get("cuda_build")
    }
    out += _same(builds, live, "torch CUDA", "install the same torch build on every node")
    return out


def _hidden(obs: Observations) -> bool:
    """The job hides every GPU (CUDA_VISIBLE_DEVICES empty): a CPU job, whatever is here."""
    value = obs.env.get(CUDA_VISIBLE)
    return value is not None and hides_gpus(value)


def _visible(obs: Observations, count: int) -> tuple[int, str]:
    """How many GPUs the job may use on a node, and what gives them."""
    value = obs.env.get(CUDA_VISIBLE)
    if value is not None:
        return len([d for d in value.split(",") if d.strip()]), f"{CUDA_VISIBLE}={value} gives"
    return count, "the node has"


def _gpu_node(obs: Observations, name: str, gpus: list[list[str]]) -> list[Finding]:
    count, model = len(gpus), gpus[0][0]
    driver = gpus[0][1] if len(gpus[0]) > 1 else "?"
    probe, gpu = obs.probe(name), _gpu(obs, name)
    health = gpu.get("health") or {}
    cuda = probe.get("cuda_build")
    detail = f"{count} x {model}, driver {driver}"
    if health.get("cuda"):
        detail += f" (CUDA {health['cuda']})"
    detail += f", torch CUDA {cuda}" if cuda else ""
    findings = []
    if _hidden(obs):
        return [Finding(name, "gpu", OK, detail + f"; hidden by {CUDA_VISIBLE}: CPU job")]
    if "torch" in probe and not probe.get("cuda_available"):
        build = f"CUDA {cuda}" if cuda else "a CPU-only build"
        fix = "install a CUDA build of torch that this driver supports"
        why = f"{count} GPU(s), but torch {probe['torch']} ({build}) cannot use them"
        findings.append(Finding(name, "gpu", FAIL, why, fix))
    findings += _count(obs, name, count)
    findings += _health(name, gpus, health, gpu.get("xid") or {})
    return findings or [Finding(name, "gpu", OK, detail + _health_words(health, gpu))]


def _count(obs: Observations, name: str, count: int) -> list[Finding]:
    """NCCL needs a GPU per rank: two ranks on one GPU fail with `Duplicate GPU detected`."""
    usable, source = _visible(obs, count)
    machine = obs.nodes_per_machine if obs.gpu_split else 1
    need = machine * obs.nproc_per_node
    if need <= usable:
        return []
    if machine > 1:
        shape = f"{counted(machine, 'pseudo-node')} x {counted(obs.nproc_per_node, 'process')}"
        why = f"the job needs {need} GPUs here ({shape}), {source} {usable}"
        fix = f"--nodes {max(1, usable // obs.nproc_per_node)} or --nproc-per-node " + str(
            max(1, usable // machine)
        )
    else:
        why = f"{counted(obs.nproc_per_node, 'process')} per node, {source} {usable} GPU(s)"
        fix = f"--nproc-per-node {usable} (NCCL needs a GPU per rank)"
    return [Finding(name, "gpu", FAIL, why, fix + f", or a CPU job: --env {CUDA_VISIBLE}=")]


def _health(
    name: str, gpus: list[list[str]], health: dict[str, Any], xid: dict[str, Any]
) -> list[Finding]:
    findings = []
    for g in health.get("gpus") or []:
        index = g.get("index", "?")
        if g.get("ecc_uncorrected"):
            why = f"GPU {index}: {g['ecc_uncorrected']} uncorrectable ECC error(s) since boot"
            findings.append(Finding(name, "gpu", FAIL, why, RESET_FIX))
        if g.get("remap_failed"):
            findings.append(
                Finding(name, "gpu", FAIL, f"GPU {index}: memory row remapping failed", RESET_FIX)
            )
        elif g.get("remap_pending"):
            fix = "reset the GPU (nvidia-smi -r) or reboot to apply the remapping"
            why = f"GPU {index}: memory row remapping pending"
            findings.append(Finding(name, "gpu", WARN, why, fix))
    xids = xid.get("xids") or []
    if xids:
        codes = sorted({code for _pci, code in xids})
        where = sorted({pci for pci, _code in xids})
        why = f"kernel log: Xid {', '.join(map(str, codes))} on {', '.join(where)}"
        fix = "look the Xid codes up in NVIDIA's Xid catalogue; a node with recent ones is suspect"
        findings.append(Finding(name, "gpu", WARN, why, fix))
    return findings


def _health_words(health: dict[str, Any], gpu: dict[str, Any]) -> str:
    """What was checked of the GPUs' health, so an ok says how much it covers."""
    parts = []
    if health.get("gpus"):
        parts.append(f"ECC/remap clean ({health.get('source', '?')})")
    elif health.get("error"):
        parts.append(f"health unknown: {health['error']}")
    xid = gpu.get("xid") or {}
    if xid.get("readable"):
        parts.append("no Xid in the kernel log")
    elif xid:
        parts.append("kernel log not readable (Xid unchecked)")
    return "; " + ", ".join(parts) if parts else ""
