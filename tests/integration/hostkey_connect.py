"""Connects to one host with one SSH engine, as the console does, and prints the outcome.

Run inside the testbed's head namespace: `python -m tests.integration.hostkey_connect
ENGINE HOST SSH_CONFIG [--accept-new] [--twice]`; prints `ok` or `refused: MESSAGE`.
"""

from __future__ import annotations

import asyncio
import sys

from ddptui.core.backends.ssh.backend import make_transport
from ddptui.core.backends.transport import TransportError
from ddptui.core.job.spec import make_spec


async def main(engine: str, host: str, config: str, flags: list[str]) -> str:
    spec = make_spec(
        script="x.py",
        backend="ssh",
        hosts=(host,),
        nodes=1,
        ssh={
            "engine": engine,
            "config_file": config,
            "accept_new_host_keys": "--accept-new" in flags,
        },
    )
    transports = [make_transport(host, spec) for _ in range(3 if "--twice" in flags else 1)]
    try:
        await asyncio.gather(*(t.connect() for t in transports))
        result = await transports[0].run(["true"], timeout=30)
    except TransportError as exc:
        return f"refused: {exc}"
    finally:
        await asyncio.gather(*(t.close() for t in transports))
    return "ok" if result.exit_code == 0 else f"exit {result.exit_code}"


if __name__ == "__main__":
    print(asyncio.run(main(sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:])))
