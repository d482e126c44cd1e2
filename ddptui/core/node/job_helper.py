"""Provides the node-side helper: start a job detached, tail its log, reap and prove it gone.

This file runs on every node as `python3 - VERB ARGS` with its own source on stdin, so it uses
only the standard library and never imports ddptui. The same code serves the local backend
(the nodes are this machine) and SSH hosts, so both are stopped and proven clean the same way.

Finding, stopping and proving gone every process of the job is in reaper.py, sent ahead of
this file as one program (see `ddptui.core.node.job_helper_source`).
"""

from __future__ import annotations

import _thread
import base64
import json
import os
import select
import sys
import time

from ddptui.core.node.agent_end import exit_from_log, read_from_log  # sent ahead of this program
from ddptui.core.node.collective_follow import CollectiveFollower  # sent ahead of this program
from ddptui.core.node.drill import drill  # sent ahead of this program
from ddptui.core.node.each import each  # sent ahead of this program
from ddptui.core.node.gpu_sampler import GpuSampler, sample_alone  # sent ahead of this program
from ddptui.core.node.netinfo import port, probe, start_checks  # sent ahead of this program
from ddptui.core.node.reaper import TAG_VAR, is_alive, orphans, reap  # sent ahead of this program
from ddptui.core.node.step import program_in_env, split_step  # sent ahead of this program

CONTAINER_CLIENTS = ("podman", "docker")  # a job run in a container: `podman|docker run ...`
TYPE_CHECKING = False  # typing is not imported on the node: it is its largest import there
if TYPE_CHECKING:
    from typing import Any

JOB = ""  # the console puts the job here (base64 JSON), never on the command line

POLL_S = 0.05
POLL_MAX_S = 0.25  # a log gone quiet is looked at 4 times a second, not 20 (see _pause)


def _paths(log_path: str) -> dict[str, str]:
    return {"log": log_path, "exit": log_path + ".exit", "pid": log_path + ".pid"}


def _private_dirs(path: str) -> None:
    """The run's directory and its `nodes` parent: only the owner may enter (the log holds
    whatever the job prints)."""
    os.makedirs(path, mode=0o700, exist_ok=True)
    for level in (path, os.path.dirname(path)):
        if os.path.basename(level) in ("runs", ""):
            break
        os.chmod(level, 0o700)


def _write_private(path: str, text: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(text)


def start() -> int:
    """Start the command detached from this session; print {"pid", "log"} and return at once.

    What used to be a probe before launch is done here, in the same process: given
    `script_check` (the script as the job names it), refuse to start when it is no file
    from the job's cwd (one line `script-missing PATH`); given `port_check` (address,
    port), refuse to start when the rendezvous port cannot be bound (one line
    `port-taken REPORT`, the port report as JSON: who holds it); given `ifname_for` (the
    address the console reached this node at), point GLOO/NCCL_SOCKET_IFNAME at the
    interface holding it unless the job's environment names one.
    """
    job = json.loads(base64.b64decode(JOB).decode())
    if job.get("script_check"):  # the script, resolved as torchrun will: from the job's cwd
        where = os.path.expanduser(job.get("cwd") or os.getcwd())
        script = os.path.normpath(os.path.join(where, os.path.expanduser(job["script_check"])))
        if not os.path.isfile(script):
            sys.stdout.write(f"script-missing {script}\n")
            sys.stdout.flush()
            return 1
    taken, ifname = start_checks(job.get("port_check"), job.get("ifname_for"))
    if taken is not None:
        sys.stdout.write(f"port-taken {taken}\n")
        sys.stdout.flush()
        return 1
    if ifname:
        for name in ("GLOO_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME"):
            job["env"].setdefault(name, ifname)
    log = os.path.expanduser(job["log"])
    paths = _paths(log)
    _private_dirs(os.path.dirname(log))
    for stale in (paths["exit"], paths["pid"]):
        if os.path.exists(stale):
            os.unlink(stale)
    read_fd, write_fd = os.pipe()
    if os.fork() > 0:
        os.close(write_fd)
        with os.fdopen(read_fd) as reader:
            report = reader.read()
        if report.startswith("{") and ifname:
            report = report[:-1] + f', "ifname": {json.dumps(ifname)}}}'
        sys.stdout.write(report + "\n")
        sys.stdout.flush()
        return 0 if report.startswith("{") else 1
    os.close(read_fd)
    os.setsid()
    if os.fork() > 0:
        os._exit(0)
    _supervise(job, paths, write_fd)
    os._exit(0)


def _debug_env(job: dict, log: str, env: dict[str, str]) -> None:
    """The workers' debug hook first on PYTHONPATH, and the flight recorder on (see
    worker_hook.py): both write into the node's debug directory, beside its log."""
    base = os.path.splitext(log)[0] + ".debug"
    hook = os.path.join(base, "hook")
    # __pycache__ too: the workers' import of the hook writes there (its .pyc takes the
    # source's private mode, not the directory's)
    private = ("fr", "stacks", os.path.join("hook", "__pycache__"))
    for folder in (base, hook, *(os.path.join(base, d) for d in private)):
        os.makedirs(folder, mode=0o700, exist_ok=True)
        os.chmod(folder, 0o700)
    _write_private(os.path.join(hook, "sitecustomize.py"), job["hook"])
    env["DDPTUI_DEBUG_DIR"] = base
    env["PYTHONPATH"] = hook + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    if job.get("flight_recorder"):
        for name, value in (
            ("TORCH_FR_BUFFER_SIZE", "2000"),
            ("TORCH_NCCL_DUMP_ON_TIMEOUT", "1"),
            ("TORCH_NCCL_ENABLE_TIMING", "1"),  # each collective's GPU time: the straggler's wait
            ("TORCH_NCCL_DEBUG_INFO_TEMP_FILE", os.path.join(base, "fr", "nccl_rank_")),
            ("TORCH_NCCL_DEBUG_INFO_PIPE_FILE", os.path.join(base, "fr", "pipe_rank_")),
        ):
            env.setdefault(name, value)


def _supervise(job: dict, paths: dict[str, str], report_fd: int) -> None:
    """Run the job with its output in the log file and record its exit code when it ends."""
    env = dict(os.environ)
    env.update(job["env"])
    env[TAG_VAR] = job["tag"]
    if job.get("hook"):
        _debug_env(job, paths["log"], env)
    argv = list(job["argv"])
    if job.get("prelude"):
        # bash where there is one: `source` and `conda activate` are what operators type.
        import shutil  # here: few jobs have a prelude, and shutil's imports cost every launch

        shell = shutil.which("bash") or "sh"
        argv = [shell, "-c", job["prelude"] + ' && exec "$@"', "ddptui-node", *argv]
    cwd = os.path.expanduser(job["cwd"]) if job.get("cwd") else None
    log_fd = os.open(paths["log"], os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    os.fchmod(log_fd, 0o600)
    null_fd = os.open(os.devnull, os.O_RDONLY)
    split = job.get("split")
    in_fd, out_fd = null_fd, log_fd
    splitter, program = None, b""
    if split:  # one step for every node: its stream is split into their logs (step.py)
        debug = (lambda log, e: _debug_env(job, log, e)) if job.get("hook") else None
        splitter, program = split_step(split, env, debug, log_fd)
        program = program_in_env(program, env)  # srun's environment, before srun starts
        in_fd, feed_fd = os.pipe()
        read_fd, out_fd = os.pipe()
    err_r, err_w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(err_r)
        try:
            os.setsid()
            os.dup2(in_fd, 0)
            os.dup2(out_fd, 1)
            os.dup2(out_fd, 2)
            if cwd:
                os.chdir(cwd)
            os.set_inheritable(err_w, False)
            os.execvpe(argv[0], argv, env)
        except OSError as exc:
            os.write(err_w, f"{argv[0]}: {exc.strerror}".encode())
        os._exit(127)
    os.close(err_w)
    if split:
        os.close(in_fd)
        os.close(out_fd)
        if program:
            import threading  # here: only a step whose program is too large for srun's env

            threading.Thread(target=_feed, args=(feed_fd, program), daemon=True).start()
        else:
            os.close(feed_fd)
    failure = os.read(err_r, 4096).decode()
    os.close(err_r)
    _write_private(paths["pid"], f"{pid} {os.getpid()}\n")
    if failure:
        os.write(log_fd, f"ddptui: cannot start {failure}\n".encode())
        os.write(report_fd, f"cannot start {failure}".encode())
    else:
        os.write(report_fd, json.dumps({"pid": pid, "log": paths["log"]}).encode())
    os.close(report_fd)
    for fd in (0, 1, 2):
        os.dup2(null_fd, fd)
    if splitter is not None:
        while chunk := os.read(read_fd, 1 << 16):
            splitter.feed(chunk)
    _, status = os.waitpid(pid, 0)
    code = os.waitstatus_to_exitcode(status)
    if splitter is not None:
        splitter.finish(code)
    elif os.path.basename(job["argv"][0]) not in CONTAINER_CLIENTS:
        # (a step's tasks are srun's to stop, on every node; a container's client ended
        # is not its agent ended: the container runs on under conmon or dockerd)
        _orphans_stopped(job["tag"], code, log_fd)
    tmp = paths["exit"] + ".tmp"
    _write_private(tmp, f"{code}\n")
    os.replace(tmp, paths["exit"])


def _orphans_stopped(tag: str, code: int, log_fd: int) -> None:
    """Stop what the job's command left running when it ended (reaper.orphans: the
    workers of an agent killed alone) and say so in the log, before the exit is recorded:
    each worker's end as the monitor reads a launcher's report of it (framing.WORKER_ENDED,
    a stopped worker is a victim, never the culprit), then the node's own line."""
    stopped = orphans(tag)
    if not stopped:
        return
    how = f"killed by signal {-code}" if code < 0 else f"exit {code}"
    said = f"its torchrun agent ended ({how}); ddptui's node helper stopped the orphaned worker"
    lines = [
        f"[ddptui:{rank}:{local_rank}]:ddptui: worker ended: exit {exit_code}, stopped by the "
        f"launcher | {said}\n"
        for rank, local_rank, exit_code in stopped
    ]
    ranks = ", ".join(rank or local_rank for rank, local_rank, _ in stopped)
    lines.append(
        f"ddptui: torchrun agent lost ({how}) with its workers running: stopped "
        f"{len(stopped)} orphaned worker(s) (rank {ranks})\n"
    )
    os.write(log_fd, "".join(lines).encode())


def _feed(fd: int, data: bytes) -> None:
    """The step's program to srun's stdin, where it was too large for srun's environment
    (srun passes it to every task: --input=all)."""
    try:
        with os.fdopen(fd, "wb") as pipe:
            pipe.write(data)
    except OSError:
        pass  # srun ended before reading it: its own lines say why


def _stdout_closed() -> bool:
    """True once the reader of our stdout has gone (an SSH channel closed, a console killed)."""
    poller = select.poll()
    poller.register(1, select.POLLERR | select.POLLHUP)
    return bool(poller.poll(0))


def _pause(quiet_polls: int, seen_output: bool) -> float:
    """How long to wait before looking at the log again.

    Why: hundreds of nodes each tailing a quiet log 20 times a second keep a node's CPUs (or
    a test machine's) busy for nothing. Until the job's first output the tail looks every
    50 ms (the first line says a rank runs: it must show at once); after output has flowed
    and stopped, the wait doubles up to 0.25 s, and the next output resets it.
    """
    if not seen_output:
        return POLL_S
    return float(min(POLL_MAX_S, POLL_S * 2**quiet_polls))


def tail(log_path: str, offset_arg: str, tag: str = "", gpu_ms: str = "0") -> int:
    """Copy the log from `offset` to stdout until the job has ended and all of it is sent.

    The exit code goes to stderr as the last line ({"exit": code}) so stdout stays the raw log.
    With the job's `tag` and a sampling period (`gpu_ms` > 0), the GPU sampler runs alongside
    and its samples go out on stdout too, each a whole line between log chunks (GPU_MARK);
    with the tag, the ranks' collectives files go out the same way (collective_follow.py).
    """
    paths = _paths(os.path.expanduser(log_path))
    out = sys.stdout.buffer
    lock = _thread.allocate_lock()  # not threading's: its import is a few ms of every launch

    def write(data: bytes) -> None:
        with lock:
            out.write(data)
            out.flush()

    sampler = GpuSampler(TAG_VAR, tag, int(gpu_ms), write) if tag and int(gpu_ms) > 0 else None
    if sampler is not None:
        sampler.start()
    follower = CollectiveFollower.beside(paths["log"], write) if tag else None
    try:
        return _copy_log(paths, int(offset_arg), write, follower, tag)
    finally:
        if sampler is not None:
            sampler.stop()
        if follower is not None:
            follower.close()


def _unrecorded(paths: dict[str, str]) -> bool:
    """Whether the job has ended with nobody left to record how: the process that started
    it and waits for it (its supervisor) is gone (killed, or its host's processes were),
    and so is the job's command, with no exit written. Without this look the tail would wait
    for an exit file forever."""
    try:
        with open(paths["pid"]) as f:
            agent, supervisor = (int(word) for word in f.read().split()[:2])
    except (OSError, ValueError):
        return False
    if is_alive(supervisor) or is_alive(agent):
        return False
    return not os.path.exists(paths["exit"])


def _copy_log(
    paths: dict[str, str],
    offset: int,
    write: Any,
    follower: CollectiveFollower | None = None,
    tag: str = "",
) -> int:
    while not os.path.exists(paths["log"]):
        if os.path.exists(paths["exit"]):
            break
        time.sleep(POLL_S)
    idle, quiet, seen = 0.0, 0, False
    followed = time.monotonic()
    with open(paths["log"], "rb") as f:
        f.seek(offset)
        while True:
            if follower is not None and time.monotonic() - followed >= follower.every_s:
                followed = time.monotonic()
                follower.poll()
            chunk = f.read(1 << 16)
            if chunk:
                write(chunk)
                idle, quiet, seen = 0.0, 0, True
                continue
            if os.path.exists(paths["exit"]):
                chunk = f.read()
                if chunk:
                    write(chunk)
                break
            pause = _pause(quiet, seen)
            time.sleep(pause)
            idle += pause
            quiet += 1
            if idle >= 1.0:
                idle = 0.0
                if _stdout_closed():
                    return 0
                if _unrecorded(paths):
                    if tag:
                        orphans(tag)
                    code = exit_from_log(paths["log"])
                    with open(paths["log"], "a") as log:
                        log.write(read_from_log("job supervisor", code))
                    _write_private(paths["exit"] + ".tmp", f"{code}\n")
                    os.replace(paths["exit"] + ".tmp", paths["exit"])
                    continue  # the rest of the log, then the exit as recorded
                # A heartbeat on stderr lets the console tell a quiet job from a dead link.
                sys.stderr.write("\n")
                sys.stderr.flush()
    if follower is not None:
        follower.poll()  # the ranks' last lines, written as they ended
    with open(paths["exit"]) as f:
        code = int(f.read().strip() or "1")
    sys.stderr.write(json.dumps({"exit": code}) + "\n")
    return 0


def status(log_path: str) -> int:
    """Whether the job still runs, its exit code if not, and how much log there is."""
    paths = _paths(os.path.expanduser(log_path))
    report = {"exists": os.path.exists(paths["log"]), "exit": None, "size": 0, "running": False}
    if report["exists"]:
        report["size"] = os.path.getsize(paths["log"])
    if os.path.exists(paths["exit"]):
        with open(paths["exit"]) as f:
            report["exit"] = int(f.read().strip() or "1")
    elif os.path.exists(paths["pid"]):
        with open(paths["pid"]) as f:
            report["running"] = is_alive(int(f.read().split()[0]))
    print(json.dumps(report))
    return 0


def launch() -> int:
    """`start`, then `tail` of the log from its first byte, in this same process: a node costs
    the console one remote process and one channel, not two. The start report is the first
    line of stdout; the log follows it."""
    code = start()
    if code != 0:
        return code
    job = json.loads(base64.b64decode(JOB).decode())
    return tail(job["log"], "0", job["tag"], str(job.get("gpu_sample_ms", 0)))


def gpu(tag: str, gpu_ms: str, gone_s: str = "", tasks: str = "") -> int:
    """The GPU sampler alone, for the job tagged `tag`, until the job's workers are gone
    (for `gone_s` seconds, or the default); `tasks` "slurm": the workers are srun's tasks."""
    import signal

    for number in (signal.SIGUSR1, signal.SIGUSR2):  # Slurm's warning to every step: not ours
        signal.signal(number, signal.SIG_IGN)
    gone = float(gone_s) if gone_s else None
    return sample_alone(TAG_VAR, tag, int(gpu_ms), gone, tasks == "slurm")


def kill_rank(tag: str, local_rank: str, signum: str = "9") -> int:
    """Fault injection: SIGKILL the job's worker of this local rank (`all`: every worker, a
    torchft replica group) and what it started, as the kernel's OOM killer would end it; its
    agent sees a worker die. Another `signum` (15: the console stops an elastic job's
    workers stuck waiting for a lost node, so that their agent restarts them). Prints the
    PIDs."""
    wants = [f"\0{TAG_VAR}={tag}\0".encode()]
    if local_rank != "all":
        wants.append(f"\0LOCAL_RANK={local_rank}\0".encode())
    killed = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/environ", "rb") as f:
                env = b"\0" + f.read() + b"\0"
        except OSError:
            continue
        # a worker (torchrun sets its TORCHELASTIC_RUN_ID), never the agent itself
        if all(w in env for w in wants) and b"\0TORCHELASTIC_RUN_ID=" in env:
            try:
                os.kill(int(name), int(signum))
                killed.append(int(name))
            except OSError:
                continue
    sys.stdout.write(json.dumps({"killed": killed}) + "\n")
    return 0 if killed else 1


VERBS: dict[str, Any] = {
    "launch": launch,
    "start": start,
    "tail": tail,
    "gpu": gpu,
    "reap": reap,
    "drill": drill,
    "kill_rank": kill_rank,
    "status": status,
    "probe": probe,
    "port": port,
    "each": lambda verb: each(JOB, VERBS, verb),
}

if __name__ == "__main__":
    sys.exit(VERBS[sys.argv[1]](*sys.argv[2:]))
