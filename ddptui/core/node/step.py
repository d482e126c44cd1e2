"""Provides one Slurm step for every node: each task runs its own node's command, and the
step's one labelled stream is split back into one log per node.

Why: a step per node costs an srun client and a step request to slurmctld per node (0.3-0.4
s each at 64 nodes); one step with a task per node starts them all at once, as a by-hand
`srun -N N` does. Both halves run from the job helper's program (sent ahead of
job_helper.py, standard library only):

- on each node, srun's task is step_task.sh (a POSIX shell program on its stdin, with the
  table in front of it: task_script): it looks its node up (SLURMD_NODENAME), runs that
  node's command with the node's environment (its own DDPTUI_TAG, so teardown finds it per
  node), and prints a start mark before it and, after it, the node's proof (no process left
  with the node's tag) and an exit mark with the command's exit code;
- on the console's host, the detached supervisor (job_helper._supervise) reads srun's
  `--label`led stream and writes each task's lines into its node's log and, at its exit
  mark, the node's `LOG.exit` (its proof in `LOG.proof`): exactly the files a step per node
  wrote, so following, attaching and failure attribution read each node as before.

srun's own lines are not labelled: one about a node's task (`srun: error: node2: task 1:
Exited with exit code 1`) goes to that node's log, any other (the step refused, aborted) to
every node's log and the step's own.
"""

from __future__ import annotations

import base64
import json
import os
import re

from ddptui.core.node.agent_end import exit_from_log, read_from_log  # sent ahead of this program
from ddptui.core.node.each import MARK  # sent ahead of this program
from ddptui.core.node.reaper import TAG_VAR  # sent ahead of this program

LABEL = re.compile(rb"^ *(\d+): ")
SRUN_TASKS = re.compile(rb"^srun: error: (\S+): tasks? [\d,\-]+: (.+)$")
_EXITED = re.compile(rb"Exited with exit code (\d+)")
_SIGNALS = {b"Terminated": -15, b"Killed": -9, b"Interrupt": -2, b"Aborted": -6}


def task_table(
    nodes: dict[str, dict], logs: dict[str, str], base: dict[str, str], debug: object
) -> dict[str, dict]:
    """Each node's command and the environment it adds to srun's (its tag, its debug
    directory beside its log: `debug(log, env)` sets those up, as for a node of its own)."""
    table = {}
    for node, entry in nodes.items():
        env = dict(base)
        env.update(entry["env"])
        env[TAG_VAR] = entry["tag"]
        if debug is not None:
            debug(logs[node], env)  # type: ignore[operator]
        extra = {k: v for k, v in env.items() if base.get(k) != v}
        table[node] = {"argv": entry["argv"], "env": extra, "tag": entry["tag"]}
        for check in ("port_check", "ifname_for"):  # step_task.sh's start checks
            if entry.get(check):
                table[node][check] = entry[check]
    return {"nodes": table}


def _quoted(text: object) -> str:
    """One shell word, whatever it holds."""
    return "'" + str(text).replace("'", "'\\''") + "'"


# srun's environment carries the task's program to every node (STEP_SHELL reads it there);
# one larger than this goes on srun's stdin instead: a single environment string may not
# exceed 128 KiB at exec, and the rest of the environment and the command share that room.
STEP_PROGRAM_VAR = "DDPTUI_STEP_PROGRAM"
STEP_PROGRAM_ENV_MAX = 64 << 10

_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
DEBUG_VAR = "DDPTUI_DEBUG_DIR"  # the node's debug directory (job_helper._debug_env)
# What the head's ddptui_port_reason prints: why the port cannot be bound, nothing if it can.
PORT_MAIN = """
if __name__ == "__main__":
    _report = port_report(sys.argv[1], sys.argv[2])
    if not _report["free"]:
        _why = str(_report["why"])
        if not _report.get("holders"):
            _why = _why.removeprefix("not available (").removesuffix(")")
        print(_why)
"""
# Whether the head can bind the rendezvous port as c10d's store will (exit 0: it can). The
# whole port report (PORT_MAIN: who holds it) runs only when it cannot: that program, read
# and compiled, cost the head's start about 25 ms more than this (39 ms against 12 ms here).
BIND_PY = (
    "import _socket as s,sys\n"
    "k=s.socket(s.AF_INET,s.SOCK_STREAM)\n"
    "k.setsockopt(s.SOL_SOCKET,s.SO_REUSEADDR,1)\n"
    "k.bind((sys.argv[1],int(sys.argv[2])))\n"
)
# The interface holding an address, where the node has no `ip` (SIOCGIFADDR per interface).
IFNAME_PY = (
    "import _socket,fcntl,sys\n"
    "s=_socket.socket(_socket.AF_INET,_socket.SOCK_DGRAM)\n"
    "for _,n in _socket.if_nameindex():\n"
    " try:p=fcntl.ioctl(s.fileno(),0x8915,n[:15].encode().ljust(256,b'\\0'))\n"
    " except OSError:continue\n"
    " if _socket.inet_ntoa(p[20:24])==sys.argv[1]:print(n);break\n"
)


def task_script(source: str, table: dict, python: list[str], port: dict[str, str]) -> bytes:
    """The task's program (in srun's environment or on its stdin: program_in_env): every
    node's entry (a `case` on the node's name) in front of step_task.sh (`source`, base64,
    without its comments). `python`: the node's Python command, for the interfaces where a
    node has no `ip`; `port`: the head's port check, a Python program ("source", base64:
    netinfo.py, which says who holds a port) run on its stdin ("argv").

    srun hands the whole program to every task (64 nodes: 64 copies while the job starts),
    so what all nodes share is said once: the environment
    values and the command's words every node has alike, then each node's own."""
    entries = table["nodes"]
    py = " ".join(_quoted(w) for w in python)
    lines = [
        f"ddptui_mark={_quoted(MARK.decode())}",
        "ddptui_node=${SLURMD_NODENAME-}",
        "ddptui_tag= ddptui_ifname_for= ddptui_port_check= ddptui_d=",
        f'ddptui_ifname_holding() {{ {py} -S -c {_quoted(IFNAME_PY)} "$1"; }}',
    ]
    # Each value written in terms of the node's tag and debug directory (ddptui_tag,
    # ddptui_d, set in the node's entry): most are then the same words on every node.
    dirs = {n: str(e["env"].get(DEBUG_VAR, "")) for n, e in entries.items()}
    prefix = os.path.commonprefix(list(dirs.values())) if all(dirs.values()) else ""
    lines.append(f"ddptui_p={_quoted(prefix)}")
    words = {
        node: {
            k: _word(v, {"ddptui_d": dirs[node], "ddptui_tag": str(entry["tag"])})
            for k, v in entry["env"].items()
            if _NAME.match(k)
        }
        for node, entry in entries.items()
    }
    first = next(iter(words.values()), {})
    shared = {k: w for k, w in first.items() if all(ws.get(k) == w for ws in words.values())}
    lines.append(f"ddptui_env_all() {{ {_exports(shared)}; }}")
    lines.append("ddptui_env() { ddptui_env_all; }")  # a node with values of its own: below
    width = len(next(iter(entries.values()), {"argv": []})["argv"])
    alike = all(len(e["argv"]) == width for e in entries.values())
    differ: set[int] = set()
    shared_exec = ""
    if alike:  # the words that differ are each node's own: ddptui_wN
        argvs = [e["argv"] for e in entries.values()]
        differ = {i for i in range(width) if len({a[i] for a in argvs}) > 1}
        shown = [f'"$ddptui_w{i}"' if i in differ else _quoted(w) for i, w in enumerate(argvs[0])]
        shared_exec = _exec_line(shown)  # after the case, which sets the ddptui_wN
    lines.append('case "$ddptui_node" in')
    checked = False
    for node, entry in entries.items():
        own = {k: w for k, w in words[node].items() if k not in shared}
        lines.append(f"{_quoted(node)})")
        if dirs[node]:
            lines.append(f'    ddptui_d="$ddptui_p"{_quoted(dirs[node][len(prefix) :])}')
        if alike:
            lines += [f"    ddptui_w{i}={_quoted(entry['argv'][i])}" for i in sorted(differ)]
        else:
            lines.append("    " + _exec_line([_quoted(w) for w in entry["argv"]]))
        if own:
            lines.append(f"    ddptui_env() {{ ddptui_env_all; {_exports(own)}; }}")
        lines.append(f"    ddptui_tag={_quoted(entry['tag'])}")
        if entry.get("ifname_for"):
            lines.append(f"    ddptui_ifname_for={_quoted(entry['ifname_for'])}")
        if entry.get("port_check"):
            checked = True
            address_port = " ".join(map(str, entry["port_check"]))
            lines.append(f"    ddptui_port_check={_quoted(address_port)}")
        lines.append("    ;;")
    lines.append("esac")
    if shared_exec:
        lines.append(shared_exec)
    if checked:
        program = base64.b64decode(port["source"]).decode() + PORT_MAIN
        argv = " ".join(_quoted(w) for w in port["argv"])
        lines += [
            f'ddptui_port_bindable() {{ {py} -S -c {_quoted(BIND_PY)} "$@"; }}',
            "ddptui_port_reason() {",
            f"{argv} \"$@\" <<'DDPTUI_PROGRAM'",
            program.rstrip("\n"),
            "DDPTUI_PROGRAM",
            "}",
        ]
    body = base64.b64decode(source).decode().splitlines()
    lines += [line for line in body if line.strip() and not line.lstrip().startswith("#")]
    return ("\n".join(lines) + "\n").encode()


def _exec_line(words: list[str]) -> str:
    """The node's command: its first word (for a check before the start), its start."""
    first = words[0] if words else "''"
    return f"ddptui_cmd={first}; ddptui_exec() {{ exec {' '.join(words) or ':'}; }}"


def _word(value: object, names: dict[str, str]) -> str:
    """`value` as one shell word, each (non-empty) value of `names` in it written as that
    variable (`'a'"$ddptui_d"'/hook'`), the longest first."""
    parts: list[tuple[str, str]] = [("", str(value))]  # (variable, or "" for literal text)
    for name, sub in sorted(names.items(), key=lambda item: -len(item[1])):
        if not sub:
            continue
        split: list[tuple[str, str]] = []
        for var, text in parts:
            if var:
                split.append((var, text))
                continue
            pieces = text.split(sub)
            for i, piece in enumerate(pieces):
                if i:
                    split.append((name, sub))
                split.append(("", piece))
        parts = split
    word = "".join(f'"${var}"' if var else _quoted(text) for var, text in parts if var or text)
    return word or "''"


def _exports(words: dict[str, str]) -> str:
    """`export 'A=1' B="$ddptui_d"`, or `:` for none (`words`: each value a shell word)."""
    return "export " + " ".join(f"{k}={w}" for k, w in words.items()) if words else ":"


def _write_beside(log: str, suffix: str, text: str) -> None:
    tmp = log + suffix + ".tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.write(fd, f"{text}\n".encode())
    os.close(fd)
    os.replace(tmp, log + suffix)


def _write_exit(log: str, code: int) -> None:
    _write_beside(log, ".exit", str(code))


class StepSplit:
    """srun's labelled stream in, each node's log and exit file out (see the module)."""

    def __init__(self, logs: dict[str, str], order: list[str], own_fd: int) -> None:
        self.logs = logs
        self.order = order  # task i runs on the i-th node until its start mark says
        self.own_fd = own_fd
        self.fds = {}
        for node, path in logs.items():
            for stale in (path + ".exit", path + ".exit.tmp", path + ".gpu", path + ".proof"):
                if os.path.exists(stale):
                    os.unlink(stale)
            self.fds[node] = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        self.task_node: dict[int, str] = {}
        self.exits: dict[str, int] = {}
        self.srun_said: dict[str, int] = {}
        self._rest = b""
        self._out: dict[str, list[bytes]] = {}

    def _node(self, task_id: int) -> str | None:
        if task_id in self.task_node:
            return self.task_node[task_id]
        return self.order[task_id] if task_id < len(self.order) else None

    def feed(self, chunk: bytes) -> None:
        data = self._rest + chunk
        *lines, self._rest = data.split(b"\n")
        for line in lines:
            self._line(line + b"\n")
        self._flush()

    def _line(self, line: bytes) -> None:
        label = LABEL.match(line)
        if label is None:
            self._srun_line(line)
            return
        task_id = int(label.group(1))
        body = line[label.end() :]
        at = body.find(MARK)
        if at < 0:
            node = self._node(task_id)
            if node is not None:
                self._out.setdefault(node, []).append(body)
            return
        what, _, arg = body[at + len(MARK) :].strip().partition(b" ")
        if what == b"node" and arg.decode(errors="replace") in self.fds:
            self.task_node[task_id] = arg.decode()
            return
        if what == b"gpu":  # whether the node may have a GPU: LOG.gpu, for the sampler
            node = self._node(task_id)
            if node is not None:
                _write_beside(self.logs[node], ".gpu", arg.decode(errors="replace"))
            return
        node = self._node(task_id)
        if node is None:
            return
        if body[:at]:
            self._out.setdefault(node, []).append(body[:at])  # the command's unended line
        if what == b"proof" and arg.isdigit():  # the node's proof: LOG.proof, for teardown
            report = {"found": int(arg), "killed": [], "leftover": [], "by": "step"}
            _write_beside(self.logs[node], ".proof", json.dumps(report))
        if what == b"exit" and arg.lstrip(b"-").isdigit():
            self._flush()
            self._end(node, int(arg))

    def _srun_line(self, line: bytes) -> None:
        about = SRUN_TASKS.match(line.rstrip(b"\n"))
        node = about.group(1).decode(errors="replace") if about else None
        if about and node in self.fds:
            exited = _EXITED.search(about.group(2))
            word = about.group(2).split(b" (")[0].strip()
            self.srun_said[node] = int(exited.group(1)) if exited else _SIGNALS.get(word, 1)
            self._out.setdefault(node, []).append(line)
            return
        os.write(self.own_fd, line)
        for node in self.fds:
            if node not in self.exits:
                self._out.setdefault(node, []).append(line)

    def _flush(self) -> None:
        out, self._out = self._out, {}
        for node, parts in out.items():
            if node in self.fds and node not in self.exits:
                os.write(self.fds[node], b"".join(parts))

    def _end(self, node: str, code: int) -> None:
        if node in self.exits:
            return
        self.exits[node] = code
        os.close(self.fds[node])
        _write_exit(self.logs[node], code)

    def finish(self, srun_code: int) -> None:
        """srun has ended: every node not yet ended gets what srun said of its task, else
        srun's own exit code (the step refused: every node failed with it)."""
        if self._rest:
            self._line(self._rest)
            self._rest = b""
        self._flush()
        for node in list(self.fds):
            if node not in self.exits:
                self._end(node, self._unmarked_exit(node, srun_code))

    def _unmarked_exit(self, node: str, srun_code: int) -> int:
        """A node whose task ended without its exit mark. A task killed by a signal (its
        shell, the agent's parent, SIGKILLed: the OOM killer's or a person's doing) may have
        left the agent running to its end: the agent's own log says how it ended, and the
        log says whose reading that is. Else srun's word on the task, else srun's code."""
        said = self.srun_said.get(node)
        if said is None:
            return srun_code or 1
        code = exit_from_log(self.logs[node], said) if said < 0 else said
        if code != said:
            os.write(self.fds[node], read_from_log("step task", code).encode())
        return code


def program_in_env(program: bytes, env: dict[str, str]) -> bytes:
    """Put the task's program in srun's environment `env` where it fits; returns what is
    left for srun's stdin (nothing, or the whole program)."""
    if len(program) > STEP_PROGRAM_ENV_MAX or b"\0" in program:
        return program
    env[STEP_PROGRAM_VAR] = program.decode()
    return b""


def split_step(split: dict, env: dict[str, str], debug: object, own_fd: int) -> tuple:
    """The supervisor's half: (the StepSplit of srun's stream, the program for its stdin).
    `split`: {"nodes": {NAME: {"argv", "env", "tag"}}, "logs": {NAME: LOG}, "order": [NAME],
    "program": step_task.sh (base64), "python": the node's Python command, "port": the
    head's port check (task_script)}."""
    table = task_table(split["nodes"], split["logs"], env, debug)
    program = task_script(split["program"], table, split["python"], split["port"])
    return StepSplit(split["logs"], split["order"], own_fd), program
