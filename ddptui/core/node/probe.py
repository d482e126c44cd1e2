"""Provides the node-side half of preflight: what a node knows of itself and its peers.

Like the node shim, this file runs on every node as `python3 - VERB ARGS` with its source on
stdin (after netinfo.py, whose interface lookup it shares), so it uses only the standard
library and never imports torch: the job's python is asked about torch in a process of its
own, after the job's activation step.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import shutil
import sys
import time
from typing import Any

from ddptui.core.node.netinfo import _ipv4_of  # sent ahead of this program

JOB = ""  # the console puts the job here (base64 JSON), never on the command line


FACTS_MARK = "DDPTUI-FACTS "
# Run by the job's own python, never imported here: the console and this helper never
# import torch themselves. The distributed environment it sees (its secret values left out,
# as the workers' settings report does: ddptui/core/node/rank_settings.py) and the NCCL its
# torch loads are what the settings check compares.
PYTHON_FACTS = """
import json, os, platform, shutil, sys
r = {"python": platform.python_version(), "executable": sys.executable,
     "launcher": shutil.which(sys.argv[1]) if sys.argv[1] else None}
secret = ("TOKEN", "SECRET", "PASSWORD", "PASSWD", "KEY", "CREDENTIAL")
r["env"] = {k: "***" if any(w in k.upper() for w in secret) else v
            for k, v in sorted(os.environ.items())
            if k.startswith(("NCCL_", "TORCH_NCCL_", "TORCH_DISTRIBUTED_", "GLOO_"))}
try:
    import torch
    r["torch"] = str(getattr(torch, "__version__", "unknown"))
    r["torch_path"] = str(getattr(torch, "__file__", ""))
    r["cuda_build"] = getattr(getattr(torch, "version", None), "cuda", None)
    try:
        import torch.cuda.nccl
        r["nccl"] = ".".join(str(p) for p in torch.cuda.nccl.version()[:3])
    except Exception:
        pass
    try:
        r["cuda_available"] = bool(torch.cuda.is_available())
        r["cuda_devices"] = int(torch.cuda.device_count()) if r["cuda_available"] else 0
    except Exception as exc:
        r["cuda_error"] = type(exc).__name__ + ": " + str(exc)
except Exception as exc:
    r["torch_error"] = type(exc).__name__ + ": " + str(exc)
print("DDPTUI-FACTS " + json.dumps(r), flush=True)
"""


def _addresses(name: str) -> dict[str, Any]:
    """Every address `name` resolves to here (IPv4-mapped IPv6 shown as IPv4)."""
    import socket

    try:
        infos = socket.getaddrinfo(name, None, proto=socket.IPPROTO_TCP)
    except OSError as exc:
        return {"addrs": [], "error": str(exc)}
    addrs: list[str] = []
    for info in infos:
        addr = str(info[4][0]).split("%", 1)[0]
        addr = addr[7:] if addr.startswith("::ffff:") and "." in addr else addr
        if addr not in addrs:
            addrs.append(addr)
    return {"addrs": addrs, "error": ""}


def _python_facts(job: dict) -> dict[str, Any]:
    """The job's python (after its activation step, with its environment): never this one."""
    import subprocess

    code = [job["python"], "-c", PYTHON_FACTS, job.get("launcher") or ""]
    argv = code
    if job.get("prelude"):
        shell = shutil.which("bash") or "sh"
        argv = [shell, "-c", job["prelude"] + ' && exec "$@"', "ddptui-preflight", *code]
    env = dict(os.environ)
    env.update(job.get("env") or {})
    cwd = os.path.expanduser(job["cwd"]) if job.get("cwd") else None
    try:
        done = subprocess.run(
            argv,
            capture_output=True,
            text=True,
            env=env,
            cwd=cwd if cwd and os.path.isdir(cwd) else None,
            timeout=float(job.get("timeout", 120)),
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return {"error": str(exc)}
    for line in done.stdout.splitlines():
        if line.startswith(FACTS_MARK):
            return dict(json.loads(line[len(FACTS_MARK) :]))
    tail = (done.stderr.strip().splitlines() or [f"exit {done.returncode}"])[-1]
    return {"error": tail}


def _gpu_facts() -> dict[str, Any]:
    import subprocess

    smi = shutil.which("nvidia-smi")
    if smi is None:
        return {"present": False}
    query = "--query-gpu=name,driver_version,memory.total,pci.bus_id"
    try:
        done = subprocess.run(
            [smi, query, "--format=csv,noheader"], capture_output=True, text=True, timeout=60
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return {"present": True, "error": str(exc)}
    if done.returncode != 0:
        lines = (done.stdout + done.stderr).strip().splitlines() or [f"exit {done.returncode}"]
        return {"present": True, "error": lines[0]}
    gpus = [[p.strip() for p in line.split(",")] for line in done.stdout.strip().splitlines()]
    return {"present": True, "gpus": gpus, "health": _gpu_health(smi), "xid": _xids()}


def _gpu_health(smi: str) -> dict[str, Any]:
    """CUDA driver version, uncorrectable ECC errors and row remapping per GPU: from NVML
    (nvidia-ml-py's `pynvml`) when this python has it, else from `nvidia-smi -q`."""
    try:
        import pynvml  # type: ignore[import-not-found,unused-ignore]

        pynvml.nvmlInit()
    except Exception:  # no binding, or no driver for it: the text report says the same
        return _smi_health(smi)
    try:
        cuda = int(pynvml.nvmlSystemGetCudaDriverVersion_v2())
        report: dict[str, Any] = {"source": "nvml", "cuda": f"{cuda // 1000}.{cuda % 1000 // 10}"}
        gpus = []
        for index in range(pynvml.nvmlDeviceGetCount()):
            handle = pynvml.nvmlDeviceGetHandleByIndex(index)
            gpu: dict[str, Any] = {"index": index}
            with contextlib.suppress(pynvml.NVMLError):
                gpu["ecc_uncorrected"] = int(
                    pynvml.nvmlDeviceGetTotalEccErrors(
                        handle,
                        pynvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED,
                        pynvml.NVML_VOLATILE_ECC,
                    )
                )
            with contextlib.suppress(pynvml.NVMLError):
                _, _, pending, failed = pynvml.nvmlDeviceGetRemappedRows(handle)
                gpu.update(remap_pending=bool(pending), remap_failed=bool(failed))
            gpus.append(gpu)
        report["gpus"] = gpus
        return report
    except Exception as exc:
        return {"source": "nvml", "error": f"{type(exc).__name__}: {exc}"}
    finally:
        with contextlib.suppress(Exception):
            pynvml.nvmlShutdown()


def _smi_health(smi: str) -> dict[str, Any]:
    import subprocess

    try:
        done = subprocess.run([smi, "-q"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return {"source": "nvidia-smi", "error": str(exc)}
    return parse_smi_q(done.stdout)


def parse_smi_q(text: str) -> dict[str, Any]:
    """The health facts of `nvidia-smi -q`'s report: its CUDA version; per GPU the volatile
    uncorrectable ECC errors (N/A counts nothing) and whether row remapping is pending/failed."""
    import re

    cuda = re.search(r"^CUDA Version\s*:\s*(\S+)", text, re.MULTILINE)
    report: dict[str, Any] = {"source": "nvidia-smi", "cuda": cuda.group(1) if cuda else None}
    blocks = re.split(r"^GPU [0-9A-Fa-f]+:[0-9A-Fa-f]+:[0-9A-Fa-f]+\.[0-9A-Fa-f]\s*$", text,
                      flags=re.MULTILINE)[1:]  # fmt: skip
    gpus = []
    for index, block in enumerate(blocks):
        gpu: dict[str, Any] = {"index": index}
        volatile = re.search(r"^\s+Volatile\s*$(.*?)^\s+Aggregate\s*$", block, re.M | re.S)
        if volatile:
            counts = re.findall(r"Uncorrectable[^:]*:\s*(\d+)", volatile.group(1))
            gpu["ecc_uncorrected"] = sum(int(c) for c in counts)
        remap = re.search(r"^\s+Remapped Rows\s*$(.*?)^\s+Bank Remap", block, re.M | re.S)
        if remap:
            gpu["remap_pending"] = bool(re.search(r"Pending\s*:\s*Yes", remap.group(1)))
            failed = re.search(r"Remapping Failure Occurred\s*:\s*Yes", remap.group(1))
            gpu["remap_failed"] = bool(failed)
        gpus.append(gpu)
    report["gpus"] = gpus
    return report


def _xids() -> dict[str, Any]:
    """The GPU driver's Xid reports in the kernel log (`NVRM: Xid (PCI:...): 79, ...`), when
    this user may read it; unreadable is said, not taken for none."""
    import re
    import subprocess

    try:
        done = subprocess.run(["dmesg"], capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return {"readable": False, "why": str(exc)}
    if done.returncode != 0:
        why = (done.stderr.strip().splitlines() or [f"exit {done.returncode}"])[-1]
        return {"readable": False, "why": why}
    found = re.findall(r"NVRM: Xid \(PCI:([^)]+)\): (\d+)", done.stdout)
    return {"readable": True, "xids": [[pci, int(code)] for pci, code in found][-20:]}


def _disk_facts(path: str) -> dict[str, Any]:
    """Free space where the run's files go: the nearest directory of `path` that exists."""
    target = os.path.expanduser(path)
    existing = target
    while not os.path.isdir(existing) and os.path.dirname(existing) != existing:
        existing = os.path.dirname(existing)
    usage = shutil.disk_usage(existing)
    return {
        "path": target,
        "existing": existing,
        "free": usage.free,
        "total": usage.total,
        "writable": os.access(existing, os.W_OK),
    }


def preflight_facts() -> int:
    """Everything preflight asks of a node, in one round trip.

    `t_start` and `elapsed` let the console place this node's clock: the reading was taken
    between the request being sent and the reply arriving minus `elapsed`.
    """
    import platform
    import socket

    t_start = time.time()
    begun = time.monotonic()
    job = json.loads(base64.b64decode(JOB).decode())
    hostname = socket.gethostname()
    ifaces = {}
    for _, name in socket.if_nameindex():
        addr = _ipv4_of(name)
        if addr:
            ifaces[addr] = name
    cwd = os.path.expanduser(job["cwd"]) if job.get("cwd") else os.getcwd()
    script = job.get("script")
    report: dict[str, Any] = {
        "hostname": hostname,
        "fqdn": socket.getfqdn(),
        "self": _addresses(hostname),
        "ifaces": ifaces,
        "shim_python": platform.python_version(),
        "python": _python_facts(job),
        "gpu": _gpu_facts(),
        "disk": _disk_facts(job["rundir"]),
        "cwd": cwd,
        "t_start": t_start,
    }
    if script:
        path = script if os.path.isabs(script) else os.path.join(cwd, script)
        report["script"] = {"path": path, "exists": os.path.isfile(os.path.expanduser(path))}
    report["elapsed"] = time.monotonic() - begun
    print(json.dumps(report))
    return 0


def preflight_resolve(*names: str) -> int:
    """What this node resolves each name to: do the nodes agree about each other?"""
    print(json.dumps({name: _addresses(name) for name in names}))
    return 0


def preflight_listen(number: str, count: str, seconds: str, token: str) -> int:
    """Listen on the rendezvous port as c10d's store would (every interface), answer each
    connection with `token`, and stop after `count` connections or `seconds`."""
    import socket

    server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        server.bind(("", int(number)))
        server.listen(64)
    except OSError as exc:
        print(json.dumps({"listening": False, "error": exc.strerror or str(exc)}), flush=True)
        return 0
    print(json.dumps({"listening": True, "error": ""}), flush=True)
    deadline = time.monotonic() + float(seconds)
    peers: list[str] = []
    with server:
        while len(peers) < int(count) and time.monotonic() < deadline:
            server.settimeout(max(0.05, deadline - time.monotonic()))
            try:
                conn, peer = server.accept()
            except OSError:
                break
            with conn:
                with contextlib.suppress(OSError):
                    conn.sendall((token + "\n").encode())
                peers.append(peer[0])
    print(json.dumps({"done": True, "peers": peers}), flush=True)
    return 0


def preflight_connect(addr: str, number: str, seconds: str, token: str) -> int:
    """Connect to the first node's rendezvous port as a c10d client would."""
    import socket

    begun = time.monotonic()
    try:
        with socket.create_connection((addr, int(number)), timeout=float(seconds)) as conn:
            conn.settimeout(float(seconds))
            banner = conn.recv(256).decode(errors="replace").strip()
    except OSError as exc:
        reason = exc.strerror or str(exc) or type(exc).__name__
        print(json.dumps({"ok": False, "error": reason}))
        return 0
    ms = round((time.monotonic() - begun) * 1000, 1)
    print(json.dumps({"ok": banner == token, "banner": banner, "ms": ms, "error": ""}))
    return 0


VERBS: dict[str, Any] = {
    "facts": preflight_facts,
    "resolve": preflight_resolve,
    "listen": preflight_listen,
    "connect": preflight_connect,
}

if __name__ == "__main__":
    sys.exit(VERBS[sys.argv[1]](*sys.argv[2:]))
