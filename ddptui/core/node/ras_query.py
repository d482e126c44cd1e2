# mypy: disallow-untyped-defs=False, disallow-incomplete-defs=False
"""Provides NCCL RAS's answer on a node, asked once: `python3 - ras ADDR TIMEOUT`, stdlib only.

NCCL's RAS thread (NCCL 2.24+) listens on NCCL_RAS_ADDR (default localhost:28028) and speaks a
plain text protocol: the client says `CLIENT PROTOCOL 2`, the server `SERVER PROTOCOL N`;
`TIMEOUT S` bounds its data gathering; `STATUS` makes it gather the job's communicators and
write its report, then close. NCCL's own client, `ncclras`, does the same; it is used where
the node has it. Prints one JSON line: {"via", "text"} or {"via": "", "error"}.
"""

import json
import os
import shutil
import socket
import subprocess
import sys


def _by_binary(addr, timeout):
    exe = shutil.which("ncclras")
    if exe is None:
        return None
    host, _, port = addr.rpartition(":")
    argv = [exe, "-t", str(int(timeout))]
    if host and host != "localhost":
        argv += ["-h", host]
    if port and port != "28028":
        argv += ["-p", port]
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout + 10)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return {"via": "ncclras", "error": str(exc)}
    if done.returncode != 0 and not done.stdout:
        return {"via": "ncclras", "error": (done.stderr or "").strip()[-300:]}
    return {"via": "ncclras", "text": done.stdout}


def _by_socket(addr, timeout):
    host, _, port = addr.rpartition(":")
    try:
        with socket.create_connection((host or "localhost", int(port)), timeout=timeout) as s:
            s.settimeout(timeout + 10)
            s.sendall(f"CLIENT PROTOCOL 2\nTIMEOUT {int(timeout)}\nSTATUS\n".encode())
            chunks = []
            while True:
                data = s.recv(65536)
                if not data:
                    break
                chunks.append(data)
    except (OSError, ValueError) as exc:
        return {"via": "socket", "error": str(exc)}
    return {"via": "socket", "text": b"".join(chunks).decode(errors="replace")}


def ask(addr, timeout):
    answer = _by_binary(addr, timeout) or _by_socket(addr, timeout)
    sys.stdout.write(json.dumps(answer) + "\n")
    return 0


if __name__ == "__main__":
    args = sys.argv[1:]
    if args[:1] != ["ras"]:
        sys.exit(2)
    where = args[1] if len(args) > 1 else os.environ.get("NCCL_RAS_ADDR", "localhost:28028")
    sys.exit(ask(where, float(args[2]) if len(args) > 2 else 5.0))
