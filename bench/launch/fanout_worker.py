"""Provides the fan-out benchmark's ddptui side: a fresh process that runs one command on hosts.

It does what SshBackend does when it connects and probes, and imports no more than that: early
sockets for the first wave (asyncssh), then the transports, connect + run, concurrently, at
most `ssh.fanout` at a time. Prints one JSON line: times inside the process and the answers.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from typing import Any


async def fan_out(engine: str, config: str, hosts: list[str], command: str) -> dict[str, Any]:
    started = time.monotonic()
    from ddptui.core.backends.ssh.early_connect import EarlySockets

    early = EarlySockets()
    if engine == "asyncssh":
        early = EarlySockets.open(hosts[:32], config)
    from ddptui.cli.gc_policy import end_startup
    from ddptui.core.backends.ssh.backend import make_transport
    from ddptui.core.job.spec import make_spec

    spec = make_spec(
        backend="ssh",
        hosts=tuple(hosts),
        nodes=len(hosts),
        script="x",
        ssh={"engine": engine, "config_file": config},
    )
    gate = asyncio.Semaphore(spec.ssh.fanout)
    transports = [make_transport(h, spec) for h in hosts]
    for transport in transports:
        offer = getattr(transport, "offer_early", None)
        if offer is not None:
            offer(early)
    end_startup()
    imported = time.monotonic()

    async def one(transport: Any) -> tuple[float, str]:
        async with gate:
            await transport.connect()
            connected = time.monotonic()
            result = await transport.run([command], timeout=60)
            return connected, result.stdout.strip()

    answers = await asyncio.gather(*(one(t) for t in transports))
    done = time.monotonic()
    await asyncio.gather(*(t.close() for t in transports))
    early.close()
    return {
        "in_process_s": done - imported,
        "imports_s": imported - started,
        "connected_s": max(a[0] for a in answers) - imported,
        "answers": {h: a[1] for h, a in zip(hosts, answers, strict=True)},
    }


def main() -> None:
    from ddptui.cli.gc_policy import begin_startup, end_startup

    begin_startup()  # as `ddptui` does
    engine, config, hosts, command = sys.argv[1:5]
    print(json.dumps(asyncio.run(fan_out(engine, config, hosts.split(","), command))))
    end_startup()


if __name__ == "__main__":
    main()
