"""Provides the node side of teardown: find every process of a job by its tag, stop it, and
list what is left (the proof a node is clean); containers of the job removed the same way.

Runs on the nodes as part of the job helper's program (`ddptui.core.node.job_helper_source`
sends this file ahead of job_helper.py on stdin), so it uses only the standard library.

Why a tag in the environment: torchrun starts every worker in a new session, so the agent's
process group does not hold the workers, and SIGKILL of the agent orphans them (they are
re-parented to PID 1 and keep training). Every process of the job inherits `DDPTUI_TAG`, and
`/proc/PID/environ` keeps it whatever the process tree becomes, so the reaper finds them all.
"""

from __future__ import annotations

import os
import time

from ddptui.core.node.gpu_sampler import gpu_snapshot  # sent ahead of this program

TYPE_CHECKING = False  # typing is not imported on the node: it is its largest import there
if TYPE_CHECKING:
    from typing import Any

TAG_VAR = "DDPTUI_TAG"
REAP_POLL_S = 0.05
ENVIRON_READ = 1 << 16  # bytes a read of /proc/PID/environ asks for
AGENT_OWN_S = 5.0  # an agent whose workers are gone gets this long to end on its own
AGENT_GRACE_S = 1.0  # then SIGTERM, and this long before SIGKILL
# What a torchrun agent's command line holds among its first words: the stop signals go past
# it, to its workers (it forwards only INT/TERM/HUP/QUIT, and kills them 30 s after TERM).
AGENT_WORDS = ("torchrun", "torch.distributed.run", "torch.distributed.launch")
ENGINE_VARS = (  # what points a docker/podman client at its daemon, store or settings
    "DOCKER_HOST", "DOCKER_CONTEXT", "DOCKER_CONFIG", "DOCKER_CERT_PATH", "DOCKER_TLS_VERIFY",
    "CONTAINER_HOST", "CONTAINER_CONNECTION", "CONTAINERS_CONF", "CONTAINERS_STORAGE_CONF",
)  # fmt: skip
GPU_RETURN_S = 5.0  # how long a GPU's memory gets to come back after the job's processes end
GPU_MARGIN_MIB = 256  # GPU memory above its level before the job that still counts as returned


def _tagged(tag: str) -> list[int]:
    """PIDs of every process whose environment carries this job's tag.

    A look at every process, the reap's main cost where many run (a login node, or hundreds
    of test hosts on one machine): each environment is read with bare os.open/os.read (a
    Python file object adds an fstat and a second read a process) and searched whole."""
    needle = f"\0{TAG_VAR}={tag}\0".encode()
    me = str(os.getpid())
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit() or name == me:
            continue
        try:
            if needle in b"\0" + _environ(name) + b"\0":
                found.append(int(name))
        except OSError:
            continue
    return found


def _environ(pid: str) -> bytes:
    """/proc/PID/environ whole: procfs hands as much as asked for in one read, so a read
    shorter than asked is the end."""
    fd = os.open(f"/proc/{pid}/environ", os.O_RDONLY)
    try:
        chunks = [os.read(fd, ENVIRON_READ)]
        while len(chunks[-1]) == ENVIRON_READ:
            chunks.append(os.read(fd, ENVIRON_READ))
    finally:
        os.close(fd)
    return b"".join(chunks)


def _until_gone(pids: list[int], tag: str, seconds: float) -> list[int]:
    """Wait up to `seconds` for the job's processes to end (polled as _still_tagged looks);
    what is left."""
    deadline = time.monotonic() + seconds
    while pids and time.monotonic() < deadline:
        time.sleep(REAP_POLL_S)
        pids = _still_tagged(pids, tag)
    return pids


def _still_tagged(pids: list[int], tag: str) -> list[int]:
    """The job's processes still alive: those known first, and only once they are all gone
    every process again (what a forked child may have added). Reading every process's
    environment on each poll cost a reap a scan of /proc every 50 ms: where many processes
    run (a login node, or hundreds of test hosts on one machine) that was most of its time."""
    alive = [p for p in pids if is_alive(p)]
    return alive or [p for p in _tagged(tag) if is_alive(p)]


def is_alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def _signal_all(pids: list[int], sig: int) -> None:
    import contextlib

    for pid in pids:
        with contextlib.suppress(OSError):
            os.kill(pid, sig)


def _parent(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return int(f.read().rsplit(")", 1)[1].split()[1])
    except (OSError, ValueError, IndexError):
        return 0


def _cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace").strip()[:120]
    except OSError:
        return ""


def _is_agent(pid: int) -> bool:
    """Whether the process is a torchrun agent (its first three words name it)."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            words = f.read().split(b"\0")[:3]
    except OSError:
        return False
    names = {os.path.basename(w.decode(errors="replace")) for w in words}
    return any(word in names for word in AGENT_WORDS)


def split_workers(pids: list[int]) -> tuple[list[int], list[int]]:
    """(the workers: every process of the job but its torchrun agents, as Slurm signals every
    process of a step; the agents)."""
    agents = [p for p in pids if _is_agent(p)]
    return [p for p in pids if p not in agents], agents


def _signum(name: str) -> int:
    import signal

    return int(getattr(signal, "SIG" + name.upper().removeprefix("SIG")))


def engine_env(pids: list[int], engine: str) -> dict[str, str]:
    """The environment for the engine's client at teardown: this helper's, with the variables
    that choose the engine's daemon or store (ENGINE_VARS) as the job's own `run` client has
    them, when it is still there. The job's environment may differ from the helper's session
    (the operator's --env, what --activate exported), and teardown must ask the daemon that
    runs the container. A killed client leaves the session's values."""
    env = {k: v for k, v in os.environ.items() if k != TAG_VAR}
    for pid in pids:
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                argv0 = f.read().split(b"\0")[0].decode(errors="replace")
            with open(f"/proc/{pid}/environ", "rb") as f:
                items = f.read().decode(errors="replace").split("\0")
        except OSError:
            continue
        if os.path.basename(argv0) == engine:
            pairs = (item.partition("=") for item in items)
            client = {k: v for k, _, v in pairs if k in ENGINE_VARS}
            return {**{k: v for k, v in env.items() if k not in ENGINE_VARS}, **client}
    return env


def _engine(engine: str, env: dict[str, str], *args: str) -> str | None:
    """Run the container engine's client; its stdout, None when it failed or is missing."""
    import subprocess

    try:
        done = subprocess.run(
            [engine, *args], capture_output=True, text=True, timeout=60, env=env, check=False
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout if done.returncode == 0 else None


def _holding(container_id: str) -> list[int]:
    """Processes that keep the container outside it (podman's conmon, docker's shim): their
    command line names the container's full id."""
    if not container_id:
        return []
    me = os.getpid()
    return [
        int(n)
        for n in os.listdir("/proc")
        if n.isdigit() and int(n) != me and container_id in _cmdline(int(n)).split()
    ]


def _gpu_unreturned(snapshot: dict[str, Any], job: set[int], before: dict[str, int]) -> bool:
    """Whether a process of the job still holds a GPU, or a GPU's memory is above its level
    before the job (`before`: index -> MiB). The console judges the report itself
    (core.monitor.gpu_proof); this only says whether waiting longer may help."""
    if any(app[0] in job for app in snapshot.get("apps") or []):
        return True
    for row in snapshot["rows"]:
        parts = [p.strip() for p in row.split(",")]
        known = len(parts) > 3 and parts[0] in before and parts[3].isdigit()
        if known and int(parts[3]) > before[parts[0]] + GPU_MARGIN_MIB:
            return True
    return False


def gpu_proof(tag: str, job: set[int], before_arg: str) -> dict[str, Any] | None:
    """The GPUs once the job's processes are gone: every GPU's row, who holds which, the
    memory before the job (`0:503,1:503`, MiB by index), and the command line of any holder
    that is the job's (or carries its tag). None: the node has no GPU."""
    before = {}
    for item in filter(None, before_arg.split(",")):
        index, _, mib = item.partition(":")
        if mib.isdigit():
            before[index] = int(mib)
    snapshot = gpu_snapshot()
    if snapshot is None:
        return None
    deadline = time.monotonic() + GPU_RETURN_S
    while _gpu_unreturned(snapshot, job, before) and time.monotonic() < deadline:
        time.sleep(0.2)
        snapshot = gpu_snapshot() or snapshot
    tagged = set(_tagged(tag))
    holders = [app for app in snapshot.get("apps") or [] if app[0] in job or app[0] in tagged]
    snapshot["before"] = before
    snapshot["held"] = holders
    snapshot["names"] = {str(app[0]): _cmdline(app[0]) for app in holders}
    return snapshot


def _stop(
    pids: list[int], tag: str, grace: float, signals: list[int], agents: bool = False
) -> list[int]:
    """The stop signals to every worker directly (split_workers), none to the agents: an
    agent that saw its workers end ends on its own (AGENT_OWN_S), and only then is an agent
    still there sent SIGTERM (AGENT_GRACE_S before the SIGKILL). Why agents used to need
    SIGKILL: they were given 0.5 s once their workers were gone, and an agent needs its
    monitor's next look, its failure report and its rendezvous shutdown before it exits
    (1-3 s measured on a loaded 2-core machine: a 2-node job whose workers were stopped
    this way ended with no agent killed). With `agents`, the signals go to every process at
    once, agents too: an elastic agent whose workers alone were stopped would restart them.
    Returns what is left when the grace is over."""
    import signal

    if agents:
        for number in signals:
            _signal_all(pids, number)
        return _until_gone(pids, tag, grace)
    workers, agents_of = split_workers(pids)
    parents = {_parent(p) for p in pids} & set(pids)  # agents, wrappers: they had children
    if workers:
        for number in signals:
            _signal_all(workers, number)
    else:  # agents alone (no worker started yet): nothing to checkpoint, SIGTERM as before
        _signal_all(pids, signal.SIGTERM)
    deadline = time.monotonic() + grace
    agents_from = 0.0  # when the last worker was seen gone
    termed = False
    while pids and time.monotonic() < deadline:
        time.sleep(REAP_POLL_S)
        pids = _still_tagged(pids, tag)
        # Only agents left: named so, or parents of the job's processes none of whose
        # children is left (an agent whose workers are gone has nothing left to stop).
        alone = not any(_parent(p) in pids for p in pids)
        if not all(p in agents_of or (alone and p in parents) for p in pids):
            continue
        now = time.monotonic()
        agents_from = agents_from or now
        if not termed and now - agents_from >= AGENT_OWN_S:
            _signal_all(pids, signal.SIGTERM)
            termed = True
            deadline = min(deadline, now + AGENT_GRACE_S)
        elif not termed:
            deadline = max(deadline, agents_from + AGENT_OWN_S + AGENT_GRACE_S)
    return pids


ORPHAN_GRACE_S = 3.0  # an orphaned worker's time to end on SIGTERM before SIGKILL


def _rank_of(pid: int) -> tuple[str, str] | None:
    """(RANK, LOCAL_RANK) from a torchrun worker's environment; None for anything else."""
    try:
        items = _environ(str(pid)).split(b"\0")
    except OSError:
        return None
    env = dict(item.decode(errors="replace").partition("=")[::2] for item in items if item)
    if "TORCHELASTIC_RUN_ID" not in env or not env.get("LOCAL_RANK", "").isdigit():
        return None
    return env.get("RANK", ""), env["LOCAL_RANK"]


def orphans(tag: str, grace: float = ORPHAN_GRACE_S) -> list[tuple[str, str, int]]:
    """Stop the job's processes left once its command (the torchrun agent) has ended:
    SIGTERM, SIGKILL after `grace`. An agent ends after stopping its own workers, so anything of the
    job still there lost its agent (killed by SIGKILL, or by the kernel): its workers keep
    training, re-parented to PID 1, and hold the other nodes in the job's collectives, so
    an elastic job never shrinks and a fixed one waits in torchrun's exit barrier.
    Returns (RANK, LOCAL_RANK, exit code as signalled) for each orphaned worker stopped."""
    import signal

    pids = [p for p in _tagged(tag) if is_alive(p)]
    if not pids:
        return []
    tops = [p for p in pids if _parent(p) not in pids]  # a worker, not its dataloaders
    workers = {p: r for p in tops if (r := _rank_of(p)) is not None}
    _signal_all(pids, signal.SIGTERM)
    left = _until_gone(pids, tag, grace)
    _signal_all(left, signal.SIGKILL)
    _until_gone(left, tag, 5.0)
    return [(r[0], r[1], -9 if p in left else -15) for p, r in sorted(workers.items())]


def reap(
    tag: str,
    grace_arg: str,
    engine: str = "",
    name: str = "",
    gpu_before: str = "",
    signals: str = "TERM",
    order: str = "",
) -> int:
    """The stop signals to the job's workers (`signals`: TERM, USR1, ... in order, see
    _stop), SIGKILL what remains after `grace` seconds, then list what is still there: the
    proof the node is clean. `order` "agents": the signals to the agents too, at once.

    On a node with GPUs the report holds the GPU proof too (gpu_proof), `gpu_before` being
    each GPU's memory before the job, as the console's first sample saw it.

    With a container (`engine`, `name`): its processes carry the tag too and are seen from
    here in /proc, so the same signals stop them; then the container is removed (a killed
    `run` client leaves it to conmon) and its conmon/shim must be gone and the engine must
    no longer list it; the engine is asked with the job's own client's settings (engine_env).
    """
    import json  # here, not at the top: a `launch` of the same program does without them
    import signal

    grace = float(grace_arg)
    pids = [p for p in _tagged(tag) if is_alive(p)]
    container_id = ""
    env = engine_env(pids, engine) if name else {}
    if name:
        container_id = (_engine(engine, env, "inspect", "--format", "{{.Id}}", name) or "").strip()
    holders = _holding(container_id)
    found = len(pids)
    first = list(pids)
    seen = {p: _cmdline(p) for p in [*pids, *holders][:40]}
    numbers = [_signum(n) for n in signals.split(",") if n] or [15]
    pids = _stop(pids, tag, grace, numbers, agents=order == "agents")
    # An empty list here came from a look at every process (_still_tagged); one that is not
    # gets another, for what started meanwhile; the proof at the end is such a look too.
    killed = [p for p in _tagged(tag) if is_alive(p)] if pids else []
    _signal_all(killed, signal.SIGKILL)
    pids = _until_gone(list(killed), tag, 5.0)
    if pids:
        pids = [p for p in _tagged(tag) if is_alive(p)]
    report: dict[str, Any] = {"found": found, "killed": killed}
    if name:
        _engine(engine, env, "rm", "-f", name)
        deadline = time.monotonic() + 5.0
        while (left := [p for p in holders if is_alive(p)]) and time.monotonic() < deadline:
            time.sleep(REAP_POLL_S)
        _signal_all(left, signal.SIGKILL)
        left = [p for p in _holding(container_id) if is_alive(p)]
        names = _engine(engine, env, "ps", "-a", "--format", "{{.Names}}")
        deadline = time.monotonic() + 10.0
        while names is not None and name in names.split() and time.monotonic() < deadline:
            # "removal in progress", or an rm that raced the end of its processes: again
            time.sleep(0.2)
            _engine(engine, env, "rm", "-f", name)
            names = _engine(engine, env, "ps", "-a", "--format", "{{.Names}}")
        report["container"] = {
            "engine": engine,
            "name": name,
            "id": container_id[:12],
            "holders": holders,
            # None: the engine could not be asked, so the container is not proven gone
            "listed": None if names is None else name in names.split(),
        }
        pids += [p for p in left if p not in pids]
    report["leftover"] = pids
    report["names"] = {str(p): seen.get(p) or _cmdline(p) for p in [*killed, *pids]}
    gpu = gpu_proof(tag, {*first, *killed, *pids}, gpu_before)
    if gpu is not None:
        for pid, command in gpu["names"].items():
            gpu["names"][pid] = seen.get(int(pid)) or command
        report["gpu"] = gpu
    print(json.dumps(report))
    return 0
