# mypy: disallow-untyped-defs=False, disallow-incomplete-defs=False
"""Provides the workers' debug hook and its collector: every thread's stack, flight-recorder dumps.

Two lives, standard library only. As `sitecustomize.py` in a directory the job helper puts
first on the workers' PYTHONPATH, it runs in every Python process of the job before the
user's script, unmodified: a torchrun agent catches the signals its node's step ignored for
it, so that its workers start with their defaults (_agent_catches_ignored); a worker
(RANK/LOCAL_RANK, or an srun task) reports its settings (rank_settings.py) and registers
`faulthandler` on a real-time signal, writing every thread's stack to a file of the node's
debug directory. That needs no ptrace, so it works as a plain user where Yama restricts
ptrace; faulthandler's handler is C-level, so a rank stuck in C (a collective, a sleep)
answers too. A thread also waits for a dump request and writes the flight recorder's trace
(`_dump_fr_trace`, the one gloo and NCCL fill) without importing torch itself. Another
sitecustomize further down the path is still imported.

As `python3 - collect DIR TAG METHOD` (this source on stdin, like the job helper), it asks
every live worker of the job on this node for its stacks (`py-spy dump` where it may
attach and METHOD allows, else the signal) and its flight-recorder dump, and prints one
JSON report: {"method", "ranks": [{rank, local_rank, pid, host, text}], "fr": [...]}.
"""

import os
import sys
import time

from ddptui.core.node.collective_sampler import start_sampler  # sent ahead of this program
from ddptui.core.node.rank_settings import start_settings  # sent ahead of this program

DIR_VAR = "DDPTUI_DEBUG_DIR"
TAG_VAR = "DDPTUI_TAG"
IGNORED_VAR = "DDPTUI_IGNORED_SIGNALS"  # what the node's step set ignored (step_task.sh)
FR_ENTRIES = 64  # the newest entries of each rank's dump that the report carries
_keep: list = []


def _private(path, flags):
    """Files of the job's debug directory are its owner's alone, as its log is."""
    return os.open(path, flags, 0o600)


def _signal():
    """A real-time signal no library uses (SIGUSR2 where there are none)."""
    import signal

    return signal.SIGRTMIN + 7 if hasattr(signal, "SIGRTMIN") else signal.SIGUSR2


def _identity():
    """(rank, local rank) of a worker; None for torchrun's agent or a helper process."""
    env = os.environ
    if "LOCAL_RANK" in env and "RANK" in env:
        who = int(env["RANK"]), int(env["LOCAL_RANK"])
    elif "SLURM_PROCID" in env and "SLURM_LOCALID" in env and "SLURM_STEP_ID" in env:
        who = int(env["SLURM_PROCID"]), int(env["SLURM_LOCALID"])
    else:
        return None
    try:
        with open("/proc/self/cmdline", "rb") as f:
            cmdline = f.read()
    except OSError:
        cmdline = b""
    if b"torchrun" in cmdline or b"torch.distributed.run" in cmdline:
        return None  # the agent (under srun it has the task's variables too)
    return who


def _agent_catches_ignored():
    """In a torchrun agent whose node's step set signals ignored for it (IGNORED_VAR: Slurm's
    USR1/USR2 reach every process of a step, and their default would end the agent and
    orphan its workers), catch them instead with a handler that does nothing. The agent
    still outlives them, and its workers start with the dispositions a plain torchrun gives
    them: exec resets a caught signal to its default, where an ignored one stays ignored
    (a worker without a handler of its own would then never end on it)."""
    names = os.environ.get(IGNORED_VAR, "")
    if not names or _identity() is not None or not _is_agent():
        return
    import signal

    for name in names.split(","):
        number = getattr(signal, "SIG" + name, None)
        if number is not None and signal.getsignal(number) == signal.SIG_IGN:
            signal.signal(number, _caught)


def _caught(_number, _frame):
    """The agent's handler for a signal meant for its workers (see _agent_catches_ignored)."""


def _is_agent():
    try:
        with open("/proc/self/cmdline", "rb") as f:
            words = f.read().split(b"\0")[:3]
    except OSError:
        return False
    names = {os.path.basename(w) for w in words}
    return bool(names & {b"torchrun", b"torch.distributed.run", b"torch.distributed.launch"})


def _install():
    base = os.environ.get(DIR_VAR)
    who = _identity() if base else None
    if who is None:
        return
    import faulthandler
    import json
    import socket
    import threading

    stacks = os.path.join(base, "stacks")
    os.makedirs(stacks, exist_ok=True)
    stem = os.path.join(stacks, f"{socket.gethostname()}-{os.getpid()}")
    out = open(stem + ".txt", "a", opener=_private)  # noqa: SIM115 - for the process's life
    _keep.append(out)
    signal = _signal()
    faulthandler.register(signal, file=out, all_threads=True, chain=False)
    about = {"pid": os.getpid(), "rank": who[0], "local_rank": who[1], "signal": int(signal)}
    with open(stem + ".ready", "w", opener=_private) as f:
        json.dump(about, f)
    import atexit

    atexit.register(_dump, base, who[0])  # a rank that fails leaves its records behind
    thread = threading.Thread(target=_dump_on_request, args=(base, who[0]), daemon=True)
    thread.name = "ddptui-flight-recorder"
    thread.start()
    start_settings(base, who[0], who[1])  # the rank's versions and environment, to the console
    start_sampler(base, who[0], who[1])


def _dump_on_request(base, rank):
    """Write the flight recorder's trace each time the collector asks (a newer request file)."""
    request = os.path.join(base, "dump-request")
    seen = _mtime(request)
    while True:
        time.sleep(0.5)
        now = _mtime(request)
        if now == seen:
            continue
        seen = now
        _dump(base, rank)


def _dump(base, rank):
    """Write the rank's flight-recorder trace (on request, and when the rank exits: a rank
    that fails takes its records with it, and the collective audit needs the odd rank's)."""
    torch = sys.modules.get("torch")
    c10d = getattr(getattr(torch, "_C", None), "_distributed_c10d", None)
    # NCCL's recorder and the one gloo fills are two; without C++ stacks a dump is instant
    for name, stem in (("_dump_nccl_trace", "fr_nccl_rank_"), ("_dump_fr_trace", "fr_rank_")):
        dump = getattr(c10d, name, None)
        if dump is None:
            continue
        try:
            data = dump(includeCollectives=True, includeStackTraces=False, onlyActive=False)
        except Exception:  # noqa: BLE001 - no process group, no recorder: nothing to write
            continue
        try:
            path = os.path.join(base, "fr", f"{stem}{rank}")
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path + ".tmp", "wb", opener=_private) as f:
                f.write(data)
            os.replace(path + ".tmp", path)
        except OSError:
            continue


def _mtime(path):
    try:
        return os.stat(path).st_mtime_ns
    except OSError:
        return None


# -- the collector -------------------------------------------------------------------------


def _tagged(pid, tag):
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            return f"{TAG_VAR}={tag}".encode() in f.read().split(b"\0")
    except OSError:
        return False


def _ptrace_refused():
    """Why py-spy may not attach (it uses ptrace), or "": root may, else only where Yama's
    scope is 0 (or there is no Yama)."""
    if os.geteuid() == 0:
        return ""
    try:
        with open("/proc/sys/kernel/yama/ptrace_scope") as f:
            scope = f.read().strip()
    except OSError:
        return ""
    return "" if scope == "0" else f"ptrace refused (not root, Yama ptrace_scope={scope})"


def _pyspy(pid):
    import shutil
    import subprocess

    exe = shutil.which("py-spy")
    if exe is None:
        return None
    try:
        done = subprocess.run(
            [exe, "dump", "--pid", str(pid)], capture_output=True, text=True, timeout=20
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout if done.returncode == 0 and "Thread" in done.stdout else None


def _by_signal(workers, stacks):
    sizes = {}
    for w in workers:
        path = os.path.join(stacks, w["stem"] + ".txt")
        sizes[w["pid"]] = _size(path)
        try:
            os.kill(w["pid"], w["signal"])
        except OSError:
            continue
    deadline, texts = time.time() + 5.0, {}
    while time.time() < deadline and len(texts) < len(workers):
        time.sleep(0.2)
        for w in workers:
            path = os.path.join(stacks, w["stem"] + ".txt")
            size = _size(path)
            if w["pid"] not in texts and size > sizes[w["pid"]]:
                time.sleep(0.1)  # the handler writes thread after thread
                with open(path, errors="replace") as f:
                    f.seek(sizes[w["pid"]])
                    texts[w["pid"]] = f.read()
    return texts


def _size(path):
    try:
        return os.path.getsize(path)
    except OSError:
        return 0


def _sources(text):
    """The source line of each frame (`File "x.py", line 15`), for the console to show."""
    import linecache
    import re

    lines = {}
    for path, number in re.findall(r'File "([^"]+)", line (\d+)', text):
        code = linecache.getline(path, int(number)).strip()
        if code:
            lines[f"{path}:{number}"] = code[:200]
    return lines


def _flight_recorder(base):
    """Each rank's newest dump, read without torch: plain containers only."""
    import pickle

    class Plain(pickle.Unpickler):
        def find_class(self, module, name):
            raise pickle.UnpicklingError(f"{module}.{name} is not plain data")

    frdir, out = os.path.join(base, "fr"), []
    names = sorted(os.listdir(frdir)) if os.path.isdir(frdir) else []
    for name in names:
        if name.endswith((".tmp", ".pipe")):
            continue
        try:
            with open(os.path.join(frdir, name), "rb") as f:
                dump = Plain(f).load()
        except Exception:  # noqa: BLE001 - half-written or foreign: skip it
            continue
        rank = name.rsplit("_", 1)[-1]
        entries = [
            {
                k: e.get(k)
                for k in (
                    "pg_id",
                    "collective_seq_id",
                    "p2p_seq_id",
                    "profiling_name",
                    "state",
                    "input_sizes",
                    "output_sizes",
                    "input_dtypes",
                    "output_dtypes",
                    "process_group",
                    "record_id",
                    "time_created_ns",
                    "is_p2p",
                )
            }
            for e in dump.get("entries", [])[-FR_ENTRIES:]
        ]
        out.append(
            {
                "file": name,
                "rank": int(rank) if rank.isdigit() else None,
                "entries": entries,
                "pg_config": dump.get("pg_config") or {},
                "comm_lib_version": str(dump.get("comm_lib_version") or ""),
            }
        )
    return out


def _request_dumps(base):
    """Ask every worker for a flight-recorder dump: the hook's request file and NCCL's pipes."""
    with open(os.path.join(base, "dump-request"), "w", opener=_private) as f:
        f.write(str(time.time()))
    frdir = os.path.join(base, "fr")
    for name in os.listdir(frdir) if os.path.isdir(frdir) else []:
        if name.endswith(".pipe"):
            try:
                fd = os.open(os.path.join(frdir, name), os.O_WRONLY | os.O_NONBLOCK)
                os.write(fd, b"1")
                os.close(fd)
            except OSError:
                continue


def _await_dumps(base, ranks, asked, limit_s=4.0):
    """Until every rank wrote a dump since `asked` (the hook's thread polls twice a second,
    NCCL's monitor once a second), or `limit_s`: a rank stuck holding the GIL never does."""
    frdir = os.path.join(base, "fr")
    deadline = asked + limit_s
    while time.time() < deadline:
        fresh = set()
        for name in os.listdir(frdir) if os.path.isdir(frdir) else []:
            stamp = _mtime(os.path.join(frdir, name))
            if stamp is not None and stamp / 1e9 >= asked - 0.01:
                fresh.add(name.rsplit("_", 1)[-1])
        if all(str(rank) in fresh for rank in ranks):
            return
        time.sleep(0.2)


def collect(base, tag, method="auto"):
    """Print this node's stacks and flight-recorder dumps as one JSON line."""
    import json
    import socket

    base = os.path.expanduser(base)
    stacks = os.path.join(base, "stacks")
    host = socket.gethostname()
    workers = []
    for name in sorted(os.listdir(stacks)) if os.path.isdir(stacks) else []:
        if not name.startswith(host + "-") or not name.endswith(".ready"):
            continue
        with open(os.path.join(stacks, name)) as f:
            about = json.load(f)
        if _tagged(about["pid"], tag):
            workers.append(dict(about, stem=name[: -len(".ready")]))
    asked = time.time()
    _request_dumps(base)
    refused = _ptrace_refused()
    use_pyspy = method in ("auto", "py-spy") and not refused  # "fr": the dumps alone
    texts, used = {}, set()
    if use_pyspy:
        for w in workers:
            text = _pyspy(w["pid"])
            if text is not None:
                texts[w["pid"]] = text
                used.add("py-spy")
    if method in ("signal", "fr"):
        pyspy = f"not asked (stacks method {method})"
    elif refused:
        pyspy = refused
    else:
        missed = sum(w["pid"] not in texts for w in workers)
        pyspy = f"could not attach to {missed} worker(s)" if missed else "used"
    rest = [w for w in workers if w["pid"] not in texts]
    if rest and method != "fr":
        texts.update(_by_signal(rest, stacks))
        used.add("faulthandler-signal")
    _await_dumps(base, [w["rank"] for w in workers], asked)
    ranks = [
        {
            "rank": w["rank"],
            "local_rank": w["local_rank"],
            "pid": w["pid"],
            "host": host,
            "text": texts.get(w["pid"], ""),
            "sources": _sources(texts.get(w["pid"], "")),
        }
        for w in workers
        if method != "fr"
    ]
    report = {"method": "+".join(sorted(used)) or "none", "ranks": ranks, "pyspy": pyspy}
    report["fr"] = _flight_recorder(base)
    sys.stdout.write(json.dumps(report) + "\n")
    return 0


def _next_sitecustomize():
    """Import the sitecustomize this one hides, if there is one further down the path."""
    here = os.path.dirname(os.path.abspath(__file__))
    for entry in sys.path:
        if os.path.abspath(entry or ".") == here:
            continue
        candidate = os.path.join(entry or ".", "sitecustomize.py")
        if os.path.isfile(candidate):
            import importlib.util

            loader = importlib.util.spec_from_file_location("_sitecustomize_next", candidate)
            if loader and loader.loader:
                module = importlib.util.module_from_spec(loader)
                loader.loader.exec_module(module)
            return


if __name__ == "__main__":
    sys.exit(collect(*sys.argv[2:]) if sys.argv[1:2] == ["collect"] else 2)
elif __name__ == "sitecustomize":
    import contextlib

    with contextlib.suppress(Exception):
        _agent_catches_ignored()
    with contextlib.suppress(Exception):  # a debug hook must never stop the user's script
        _install()
    with contextlib.suppress(Exception):
        _next_sitecustomize()
