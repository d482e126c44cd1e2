# mypy: disallow-untyped-defs=False, disallow-incomplete-defs=False
"""Provides the workers' settings report: the versions and distributed environment a rank sees.

Standard library only; it runs inside the worker hook (worker_hook.py, sent ahead of it), in
a daemon thread of its own, so the worker's start waits for none of it. Twice, each one JSON
line appended to `<debug dir>/collectives/settings_rank_<RANK>.jsonl` (the node's follower
carries every `.jsonl` of that folder to the console, collective_follow.py):

- at start (`"stage": "start"`, before the user's script imported anything): torch's version
  and CUDA build read from its `version.py` as text, the NCCL release of the pip package it
  loads (`nvidia_nccl_cu*-X.Y.Z.dist-info`, or a `libnccl.so.X.Y.Z` beside torch), the GPU
  driver from `/proc/driver/nvidia/version`, and the `NCCL_*`, `TORCH_NCCL_*`,
  `TORCH_DISTRIBUTED_*` and `GLOO_*` environment: torch is never imported for it, so the
  report is on its way seconds before the rank's first step;
- once the script's default process group exists (`"stage": "init"`; looked for every
  INIT_POLL_S, at most INIT_WAIT_S: a group destroyed sooner goes without it): what only the
  running torch knows, read from the modules the script imported (the NCCL it loaded, the
  group's backend and timeout), and the environment again, as the script may have changed
  it before init_process_group.

A variable whose name looks secret (SECRET_WORDS, as the console's secret_env decides) is
named with its value left out. Paths under the node's debug directory are written relative
to it (`${DDPTUI_DEBUG_DIR}/...`): every node has its own, and they are no difference.
"""

import contextlib
import os
import sys
import time

SETTINGS_KEY = "settings"  # the key that marks a report line among the collectives' lines
SETTINGS_PREFIXES = ("NCCL_", "TORCH_NCCL_", "TORCH_DISTRIBUTED_", "GLOO_")
SECRET_WORDS = ("TOKEN", "SECRET", "PASSWORD", "PASSWD", "KEY", "CREDENTIAL")
SETTINGS_FILE = "settings_rank_{rank}.jsonl"
DEBUG_DIR_WORD = "${DDPTUI_DEBUG_DIR}"
INIT_POLL_S = 0.2  # a look costs a dict lookup; a group that lives less may go unseen
INIT_WAIT_S = 1800.0  # a rendezvous may wait this long for its nodes; then the thread ends


def settings_env(environ, debug_dir=""):
    """(the distributed environment, the secret names left without their value)."""
    env, hidden = {}, []
    for name, value in environ.items():
        if not name.startswith(SETTINGS_PREFIXES):
            continue
        if any(word in name.upper() for word in SECRET_WORDS):
            hidden.append(name)
            continue
        if debug_dir and debug_dir in value:
            value = value.replace(debug_dir, DEBUG_DIR_WORD)
        env[name] = value
    return dict(sorted(env.items())), sorted(hidden)


def _torch_dir():
    for entry in sys.path:
        where = os.path.join(entry or ".", "torch")
        if os.path.isfile(os.path.join(where, "version.py")):
            return where
    return None


def torch_versions(version_text):
    """(torch's version, its CUDA build) from the text of torch/version.py."""
    import re

    version = re.search(r"^__version__\s*=\s*['\"]([^'\"]+)['\"]", version_text, re.M)
    cuda = re.search(r"^cuda\s*(?::[^=]*)?=\s*['\"]([^'\"]+)['\"]", version_text, re.M)
    return (version.group(1) if version else None, cuda.group(1) if cuda else None)


def nccl_near(torch_dir):
    """The NCCL release the torch in `torch_dir` loads, read from file names alone: the pip
    package beside it (nvidia_nccl_cu12-2.21.5.dist-info), else a libnccl.so.2.21.5 in its
    lib/ or in the environment's lib/ (conda). None when nothing names one."""
    import re

    site = os.path.dirname(torch_dir)
    try:
        names = os.listdir(site)
    except OSError:
        names = []
    for name in sorted(names):
        found = re.fullmatch(r"nvidia_nccl_cu\d+-(\d+\.\d+\.\d+)[^-]*\.dist-info", name)
        if found:
            return found.group(1)
    prefix = os.path.dirname(
        os.path.dirname(os.path.dirname(site))
    )  # .../lib/pythonX/site-packages
    for lib in (os.path.join(torch_dir, "lib"), os.path.join(prefix, "lib")):
        try:
            libs = os.listdir(lib)
        except OSError:
            continue
        for name in sorted(libs):
            found = re.fullmatch(r"libnccl\.so\.(\d+\.\d+\.\d+)", name)
            if found:
                return found.group(1)
    return None


def driver_version(text):
    """The NVIDIA kernel module's version from /proc/driver/nvidia/version's text."""
    import re

    found = re.search(r"Kernel Module(?:\s+for\s+\S+)?\s+(\d+(?:\.\d+)+)", text)
    return found.group(1) if found else None


def _driver():
    try:
        with open("/proc/driver/nvidia/version") as f:
            return driver_version(f.read())
    except OSError:
        return None


def start_report(environ, debug_dir=""):
    """What a rank sees before its script imports anything (no torch import)."""
    report = {"stage": "start", "torch": None, "cuda": None, "nccl": None}
    where = _torch_dir()
    if where is not None:
        try:
            with open(os.path.join(where, "version.py")) as f:
                report["torch"], report["cuda"] = torch_versions(f.read())
        except OSError:
            pass
        report["nccl"] = nccl_near(where)
    report["driver"] = _driver()
    report["env"], report["hidden"] = settings_env(environ, debug_dir)
    return report


def _default_group():
    """The script's default process group, once it exists; None before (or without torch)."""
    c10d = sys.modules.get("torch.distributed.distributed_c10d")
    if c10d is None:
        return None
    try:
        return c10d._get_default_group() if c10d.is_initialized() else None
    except Exception:  # noqa: BLE001 - a half-built group: later
        return None


def nccl_release(code):
    """X.Y.Z of the NCCL torch loaded, from torch._C._nccl_version(): (major << 32 | minor << 16
    | patch) in newer torch, else NCCL's own NCCL_VERSION_CODE (X*10000 + Y*100 + Z since
    2.9, X*1000 + Y*100 + Z before)."""
    if code >= 1 << 32:
        parts = (code >> 32, (code >> 16) & 0xFFFF, code & 0xFFFF)
    elif code >= 10000:
        parts = (code // 10000, code // 100 % 100, code % 100)
    else:
        parts = (code // 1000, code // 100 % 10, code % 100)
    return ".".join(map(str, parts))


def init_report(group, environ, debug_dir=""):
    """What the running torch knows once the default group exists: its version, the NCCL it
    loaded, the group's backend and timeout (read from the modules the script imported)."""
    torch = sys.modules.get("torch")
    report = {"stage": "init", "torch": str(getattr(torch, "__version__", "") or "") or None}
    report["cuda"] = getattr(getattr(torch, "version", None), "cuda", None)
    report["nccl"] = None
    with contextlib.suppress(Exception):  # no NCCL in this torch: none loaded
        report["nccl"] = nccl_release(int(torch._C._nccl_version()))
    report["driver"] = _driver()
    report["backend"], report["pg_timeout_s"] = None, None
    with contextlib.suppress(Exception):
        report["backend"] = str(group._get_backend_name())
    for device_type in getattr(group, "_device_types", None) or ():
        try:
            backend = group._get_backend(device_type)
            report["pg_timeout_s"] = backend.options._timeout.total_seconds()
            break
        except Exception:  # noqa: BLE001 - a backend without options: not knowable
            continue
    report["env"], report["hidden"] = settings_env(environ, debug_dir)
    return report


def _environ():
    """A copy of the environment, read while the script's own thread may be changing it (a
    change during the copy is a RuntimeError: copied again)."""
    for _ in range(5):
        try:
            return dict(os.environ)
        except RuntimeError:
            continue
    return {}


class SettingsReporter:
    """One rank's two reports, to its file."""

    def __init__(self, path, rank, local_rank, debug_dir):
        import socket

        self.path = path
        self.head = {SETTINGS_KEY: 1, "rank": rank, "local_rank": local_rank}
        self.head["host"], self.head["pid"] = socket.gethostname(), os.getpid()
        self.debug_dir = debug_dir

    def write(self, report):
        import json

        line = dict(self.head, wall_ns=time.time_ns(), **report)
        data = (json.dumps(line, separators=(",", ":")) + "\n").encode()
        fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        try:
            os.write(fd, data)  # one write per line: the follower never reads half of one
        finally:
            os.close(fd)

    def run(self):
        self.write(start_report(_environ(), self.debug_dir))
        deadline = time.monotonic() + INIT_WAIT_S
        while time.monotonic() < deadline:
            time.sleep(INIT_POLL_S)
            group = _default_group()
            if group is not None:
                self.write(init_report(group, _environ(), self.debug_dir))
                return


def start_settings(base, rank, local_rank):
    """Start the rank's settings thread (reports into the collectives folder of `base`); never
    an error of its own: the hook's other parts start after it."""
    try:
        import threading

        folder = os.path.join(base, "collectives")
        os.makedirs(folder, mode=0o700, exist_ok=True)
        path = os.path.join(folder, SETTINGS_FILE.format(rank=rank))
        reporter = SettingsReporter(path, rank, local_rank, base)

        def run():
            with contextlib.suppress(Exception):  # a report is never worth the rank
                reporter.run()

        thread = threading.Thread(target=run, daemon=True)
        thread.name = "ddptui-settings"
        thread.start()
        return reporter
    except Exception:  # noqa: BLE001 - no folder, no thread: no report, the rank as it was
        return None
