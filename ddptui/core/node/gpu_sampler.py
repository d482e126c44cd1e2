"""Provides the node's GPU sampler and GPU snapshot: what each GPU does, and who holds it.

Runs on the nodes inside the job helper's program (sent ahead of reaper.py and job_helper.py
on stdin), so it uses only the standard library. It reads GPUs through NVML (nvidia-ml-py's
`pynvml` module) when the node's Python has it, else through an `nvidia-smi --query-gpu ...
-lms N` loop: one process for the whole job, not one a sample. Nothing runs on a node with
neither (no GPU).

Each sample goes to the console on the helper's own stdout, between log chunks, as one line
that starts with GPU_MARK (the console takes these out before the log is written or read):
the query's CSV rows as nvidia-smi prints them (NVML's numbers are written the same way, so
one parser reads both), the job's workers with their LOCAL_RANK, RANK and
CUDA_VISIBLE_DEVICES (read from /proc/PID/environ: in a container's PID namespace NVML and
nvidia-smi list no processes, so the environment is what maps a rank to its GPU), and the
processes NVML / nvidia-smi say hold a GPU, when they say.
"""

from __future__ import annotations

import json
import os
import select
import sys
import time

TYPE_CHECKING = False  # typing is not imported on the node: it is its largest import there
if TYPE_CHECKING:
    import subprocess
    import threading
    from collections.abc import Callable
    from typing import Any

GPU_MARK = b"\x1e\x1fddptui:gpu "
GPU_QUERY = (
    "index,uuid,utilization.gpu,memory.used,memory.total,power.draw,temperature.gpu,"
    "clocks.sm,clocks_throttle_reasons.active"
)
APPS_QUERY = "pid,gpu_uuid,used_memory"
SOURCE_VAR = "DDPTUI_GPU_SOURCE"  # "smi": skip NVML (the tests' stand-in nvidia-smi)
WORKERS_EVERY_S = 2.0  # the job's workers are looked up again this often, not every sample
APPS_EVERY = 5  # nvidia-smi's process list (a process start each) every 5th sample
MAX_WORKERS = 256
GONE_S = 30.0  # sample_alone: the job's workers gone this long means the job has ended
_MIB = 1 << 20


def which(name: str) -> str | None:
    """shutil.which for a plain name, without shutil's imports (fnmatch, re, bz2, lzma: a
    few ms of every node's `launch`, for one look along PATH)."""
    for folder in os.environ.get("PATH", os.defpath).split(os.pathsep):
        path = os.path.join(folder, name)
        if os.access(path, os.X_OK) and not os.path.isdir(path):
            return path
    return None


def has_gpu_tools() -> bool:
    """Whether this node may have an NVIDIA GPU: its driver's device, or nvidia-smi on PATH.
    A node with neither is asked nothing (not even NVML's import, which costs site-packages)."""
    return os.path.exists("/dev/nvidiactl") or which("nvidia-smi") is not None


def _nvml() -> Any:
    """NVML through nvidia-ml-py, initialised, or None. The helper runs without site-packages
    (`python3 -S`): they are added here, once, off the launch's path."""
    if os.environ.get(SOURCE_VAR) == "smi" or not os.path.exists("/dev/nvidiactl"):
        return None
    try:
        import site

        site.main()
        import pynvml

        pynvml.nvmlInit()
        if pynvml.nvmlDeviceGetCount() < 1:
            return None
        return pynvml
    except Exception:
        return None


def _nvml_util(nvml: Any, h: Any) -> str:
    return str(nvml.nvmlDeviceGetUtilizationRates(h).gpu)


def _nvml_used(nvml: Any, h: Any) -> str:
    return str(nvml.nvmlDeviceGetMemoryInfo(h).used // _MIB)


def _nvml_total(nvml: Any, h: Any) -> str:
    return str(nvml.nvmlDeviceGetMemoryInfo(h).total // _MIB)


def _nvml_power(nvml: Any, h: Any) -> str:
    return f"{nvml.nvmlDeviceGetPowerUsage(h) / 1000:.2f}"


def _nvml_temp(nvml: Any, h: Any) -> str:
    return str(nvml.nvmlDeviceGetTemperature(h, nvml.NVML_TEMPERATURE_GPU))


def _nvml_sm_clock(nvml: Any, h: Any) -> str:
    return str(nvml.nvmlDeviceGetClockInfo(h, nvml.NVML_CLOCK_SM))


def _nvml_throttle(nvml: Any, h: Any) -> str:
    """The clock's active slow-down reasons, as nvidia-smi prints them (a hex bitmask)."""
    return f"0x{nvml.nvmlDeviceGetCurrentClocksThrottleReasons(h):016x}"


def _nvml_rows(nvml: Any) -> tuple[list[str], list[list[Any]]]:
    """Every GPU as nvidia-smi's CSV row of GPU_QUERY, and who holds which."""
    import contextlib

    rows: list[str] = []
    apps: list[list[Any]] = []
    for i in range(nvml.nvmlDeviceGetCount()):
        h = nvml.nvmlDeviceGetHandleByIndex(i)
        uuid = nvml.nvmlDeviceGetUUID(h)
        uuid = uuid.decode() if isinstance(uuid, bytes) else uuid
        values: list[str] = [str(i), uuid]
        reads = (_nvml_util, _nvml_used, _nvml_total, _nvml_power, _nvml_temp)
        for read in (*reads, _nvml_sm_clock, _nvml_throttle):
            try:
                values.append(read(nvml, h))
            except Exception:
                values.append("[N/A]")
        rows.append(", ".join(values))
        with contextlib.suppress(Exception):
            for p in nvml.nvmlDeviceGetComputeRunningProcesses(h):
                apps.append([p.pid, uuid, (p.usedGpuMemory or 0) // _MIB])
    return rows, apps


def _nvml_shutdown(nvml: Any) -> None:
    import contextlib

    with contextlib.suppress(Exception):
        nvml.nvmlShutdown()


def _smi(*args: str, timeout: float = 10.0) -> str | None:
    """nvidia-smi's stdout, None when it is missing or failed."""
    import subprocess

    try:
        done = subprocess.run(
            ["nvidia-smi", *args], capture_output=True, text=True, timeout=timeout, check=False
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout if done.returncode == 0 else None


def smi_apps() -> list[list[Any]] | None:
    """nvidia-smi's compute processes: [pid, gpu uuid, MiB]; None when it cannot say."""
    out = _smi(f"--query-compute-apps={APPS_QUERY}", "--format=csv,noheader,nounits")
    if out is None:
        return None
    apps = []
    for line in out.splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) == 3 and parts[0].isdigit():
            mib = int(parts[2]) if parts[2].isdigit() else 0
            apps.append([int(parts[0]), parts[1], mib])
    return apps


def gpu_snapshot() -> dict[str, Any] | None:
    """One look at every GPU for the teardown proof: {"fields", "rows", "apps"}; None when the
    node has no GPU (no NVML, no nvidia-smi)."""
    if not has_gpu_tools():
        return None
    nvml = _nvml()
    if nvml is not None:
        rows, apps = _nvml_rows(nvml)
        _nvml_shutdown(nvml)
        return {"fields": GPU_QUERY, "rows": rows, "apps": apps}
    if which("nvidia-smi") is None:
        return None
    out = _smi(f"--query-gpu={GPU_QUERY}", "--format=csv,noheader,nounits")
    if out is None:
        return None
    return {"fields": GPU_QUERY, "rows": out.splitlines(), "apps": smi_apps()}


def job_workers(tag_var: str, tag: str, slurm_tasks: bool = False) -> list[list[Any]]:
    """The job's processes that torchrun started as workers: [pid, RANK, LOCAL_RANK,
    CUDA_VISIBLE_DEVICES or None], from their environment. `slurm_tasks`: the workers are
    srun's tasks themselves (`--launch srun`), whose ranks are SLURM_PROCID / SLURM_LOCALID
    (not so under torchrun, where the task with them is the agent)."""
    needle = f"{tag_var}={tag}".encode()
    here = os.environ.get("SLURMD_NODENAME", "").encode()
    found: list[list[Any]] = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/environ", "rb") as f:
                env = f.read().split(b"\0")
        except OSError:
            continue
        if needle not in env:
            continue
        values = dict(item.split(b"=", 1) for item in env if b"=" in item)
        local = values.get(b"LOCAL_RANK", b"")
        rank = values.get(b"RANK", b"")
        if slurm_tasks and not local:
            if values.get(b"SLURMD_NODENAME") != here:
                continue  # one tag for every node's tasks: only this node's are ours
            local, rank = values.get(b"SLURM_LOCALID", b""), values.get(b"SLURM_PROCID", b"")
        if not local.isdigit():
            continue  # the agent, or a shell before it
        cvd = values.get(b"CUDA_VISIBLE_DEVICES")
        found.append(
            [
                int(name),
                int(rank) if rank.isdigit() else None,
                int(local),
                cvd.decode(errors="replace") if cvd is not None else None,
            ]
        )
        if len(found) >= MAX_WORKERS:
            break
    return found


def _die_with_parent() -> None:
    """The sampler's nvidia-smi ends with the thread that started it, even when the helper
    is killed outright (prctl PR_SET_PDEATHSIG)."""
    import contextlib

    with contextlib.suppress(Exception):
        import ctypes
        import signal

        ctypes.CDLL(None).prctl(1, signal.SIGKILL)


class GpuSampler:
    """Samples every GPU each `period_ms` until stopped, writing one GPU_MARK line a sample
    through `write` (which must write whole lines atomically with respect to the log)."""

    def __init__(
        self,
        tag_var: str,
        tag: str,
        period_ms: int,
        write: Callable[[bytes], None],
        slurm_tasks: bool = False,
    ) -> None:
        self.tag_var, self.tag = tag_var, tag
        self.slurm_tasks = slurm_tasks
        self.period_s = max(0.05, period_ms / 1000)
        self.period_ms = max(50, int(period_ms))
        self.write = write
        self._stop_event: threading.Event | None = None
        self._proc: subprocess.Popen[bytes] | None = None
        self._thread: threading.Thread | None = None
        self._workers: list[list[Any]] = []
        self._workers_at = 0.0
        self.samples = 0

    def start(self) -> None:
        """Sample in a thread of its own; on a node without GPU tools, nothing (no thread:
        not even threading's import, a few ms of every node's launch)."""
        if not has_gpu_tools():
            return
        import threading

        self._stop_event = threading.Event()
        self._thread = threading.Thread(target=self._run, name="gpu-sampler", daemon=True)
        self._thread.start()

    @property
    def _stop(self) -> threading.Event:
        assert self._stop_event is not None, "the sampler was not started"
        return self._stop_event

    def stop(self) -> None:
        if self._thread is None:
            return
        self._stop.set()
        if self._proc is not None:
            import contextlib

            with contextlib.suppress(OSError):
                self._proc.kill()
        self._thread.join(timeout=5)

    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def workers(self) -> list[list[Any]]:
        """The job's workers as the last sample found them."""
        return self._workers

    def _send(self, rows: list[str], apps: list[list[Any]] | None) -> None:
        now = time.time()
        if now - self._workers_at >= WORKERS_EVERY_S or not self._workers:
            self._workers = job_workers(self.tag_var, self.tag, self.slurm_tasks)
            self._workers_at = now
        record: dict[str, Any] = {"t": round(now, 3), "fields": GPU_QUERY, "rows": rows}
        record["workers"] = self._workers
        if apps is not None:
            record["apps"] = apps
        self.samples += 1
        self.write(GPU_MARK + json.dumps(record, separators=(",", ":")).encode() + b"\n")

    def _run(self) -> None:
        try:
            if not has_gpu_tools():
                return
            nvml = _nvml()
            if nvml is not None:
                self._run_nvml(nvml)
            elif which("nvidia-smi") is not None:
                self._run_smi()
        except Exception:
            return  # telemetry is never worth a helper's crash: the log keeps flowing

    def _run_nvml(self, nvml: Any) -> None:
        while not self._stop.is_set():
            began = time.monotonic()
            rows, apps = _nvml_rows(nvml)
            self._send(rows, apps)
            self._stop.wait(max(0.0, self.period_s - (time.monotonic() - began)))
        _nvml_shutdown(nvml)

    def _run_smi(self) -> None:
        """One `nvidia-smi -lms` loop; its rows are grouped into samples: a group ends when
        an index comes again or the loop pauses (it prints every GPU at once, then waits)."""
        argv = [
            "nvidia-smi",
            f"--query-gpu={GPU_QUERY}",
            "--format=csv,noheader,nounits",
            f"-lms={self.period_ms}",
        ]
        import subprocess

        proc = self._proc = subprocess.Popen(
            argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, preexec_fn=_die_with_parent
        )
        assert proc.stdout is not None
        fd = proc.stdout.fileno()
        pending = b""
        group: list[str] = []
        seen: set[str] = set()
        wait = min(0.2, self.period_s / 4)
        while not self._stop.is_set():
            ready, _, _ = select.select([fd], [], [], wait)
            if not ready:
                if group:
                    self._flush(group)
                    group, seen = [], set()
                if proc.poll() is not None:
                    break
                continue
            data = os.read(fd, 1 << 16)
            if not data:
                break
            *lines, pending = (pending + data).split(b"\n")
            for raw in lines:
                line = raw.decode(errors="replace").rstrip("\r")
                index = line.split(",", 1)[0].strip()
                if index in seen:
                    self._flush(group)
                    group, seen = [], set()
                group.append(line)
                seen.add(index)
        if group and not self._stop.is_set():
            self._flush(group)

    def _flush(self, rows: list[str]) -> None:
        apps = smi_apps() if self.samples % APPS_EVERY == 0 else None
        self._send(rows, apps)


def sample_alone(
    tag_var: str,
    tag: str,
    period_ms: int,
    gone_s: float | None = None,
    slurm_tasks: bool = False,
) -> int:
    """The sampler as a process of its own, its samples on stdout (Slurm: a task per node of
    an `srun --overlap` step beside the job's, as the job's log is not read through the helper).
    It ends when its reader goes (stdout closed; srun's SIGTERM ends it anyway), when the
    sampler cannot run (no GPU), or when the job's workers, once seen, have been gone for
    `gone_s` (a torchrun restart is shorter)."""
    import select

    out = sys.stdout.buffer

    def write(data: bytes) -> None:
        out.write(data)
        out.flush()

    sampler = GpuSampler(tag_var, tag, period_ms, write, slurm_tasks)
    sampler.start()
    seen_at = 0.0
    poller = select.poll()
    poller.register(1, select.POLLERR | select.POLLHUP)
    while sampler.running():
        if poller.poll(500):
            break
        now = time.monotonic()
        if sampler.workers():
            seen_at = now
        elif seen_at and now - seen_at > (GONE_S if gone_s is None else gone_s):
            break
    sampler.stop()
    return 0
