"""Provides `open_from_argv`: the first hosts' TCP connects, from the command line alone.

Why: `ddptui run --headless --hosts ...` spends most of its start-up importing (pydantic
and the job's models, then the SSH engine and its cryptography). The hosts are on the command
line from the first instant, so the first wave's TCP connects go out before any of that is
imported, and the handshakes with sshd overlap the imports. Only the standard library and
python-hostlist are imported here. Not for the console: it connects when the operator
launches, maybe minutes later, and sshd would have dropped the sockets by then.

This reads a few flags for a guess only: anything it is unsure of (a profile, a hostfile,
another backend, the paramiko engine, a malformed list) means no early sockets, and what it
opens is used only when the SSH backend resolves the host to the same address and port
(`EarlySockets.claim`); the job's own validation later reports every error in its own words.
"""

from __future__ import annotations

from collections.abc import Sequence

DEFAULT_FANOUT = 32  # the spec's default `ssh.fanout`

_VALUED = ("--hosts", "--ssh-config", "--ssh-fanout", "--backend", "--ssh-engine", "--nodes")


def _flags(argv: Sequence[str]) -> dict[str, str] | None:
    """The flags of `run` this reader understands (last one wins, as argparse does), or None
    when the command line is not a plain `run --headless` with --hosts."""
    if "run" not in argv:
        return None
    found: dict[str, str] = {}
    items = list(argv[argv.index("run") + 1 :])
    i = 0
    while i < len(items):
        item = items[i]
        if item == "--":
            break
        name, eq, value = item.partition("=")
        if name in ("--profile", "--hostfile"):
            return None
        if name in _VALUED:
            if not eq:
                if i + 1 >= len(items):
                    return None
                value = items[i + 1]
                i += 1
            found[name] = value
        i += 1
    if "--hosts" not in found or found.get("--backend", "ssh") != "ssh":
        return None
    if "--headless" not in items[:i]:
        return None  # the console connects when the operator launches: sockets would go stale
    if found.get("--ssh-engine", "asyncssh") != "asyncssh":
        return None
    return found


def open_from_argv(argv: Sequence[str]) -> None:
    """Start the TCP connects to the first wave of `run --hosts` hosts, for the SSH backend
    to claim (`EarlySockets.take_preopened`). Does nothing when unsure, or when early
    sockets are turned off (DDPTUI_EARLY_CONNECT=0)."""
    flags = _flags(argv)
    if flags is None:
        return
    from ddptui.core.backends.ssh import early_connect

    if early_connect.environment_disables():
        return
    try:
        import hostlist

        hosts: list[str] = hostlist.expand_hostlist(flags["--hosts"].strip())
        fanout = int(flags.get("--ssh-fanout", DEFAULT_FANOUT))
        nodes = int(flags.get("--nodes", len(hosts)))
    except Exception:  # noqa: BLE001 - a guess only: the job's validation reports it
        return
    if fanout < 1 or nodes < 1:
        return
    early_connect.preopen(hosts[: min(nodes, fanout)], flags.get("--ssh-config"))
