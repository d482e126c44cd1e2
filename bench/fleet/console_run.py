"""Provides the fleet's UI tier: the real DdpApp under Pilot launching on every host, with keys
probed from the launch key until every rank runs, then through teardown.

Run inside the testbed's head namespace (bench/fleet/fleet.py does):
`python -m bench.fleet.console_run HOSTS SSH_CONFIG STANDIN WORKDIR`. Prints one JSON line.
The keys are those of the flood's UI tier (bench/flood/ui_tier.py): `]` (next node's log), `up`
(scroll), `end` (follow); a press whose effect never reached the screen within 5 s counts as
lost, not as absent.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from pathlib import Path
from typing import Any

from bench.common.pilot import FrameProbe, log_keys_round
from bench.common.stats import peak_rss_mb, percentile

LIMIT_S = 900.0


def _spec(hosts: int, config: str, standin: str, workdir: str) -> Any:
    from ddptui.core.job.spec import make_spec

    return make_spec(
        backend="ssh",
        hosts=tuple(f"node{i}" for i in range(1, hosts + 1)),
        nodes=hosts,
        nproc_per_node=1,
        launcher=f"bash {standin}",
        script="fleet.py",
        workdir=workdir,
        hang_timeout=3600,
        ssh={"config_file": config},
    )


async def run(hosts: int, config: str, standin: str, workdir: str) -> dict[str, Any]:
    import ddptui
    from ddptui.core.events import RankState
    from ddptui.ui.app import DdpApp

    app = DdpApp(_spec(hosts, config, standin, workdir))
    during: dict[str, list[float]] = {"launch": [], "teardown": []}
    async with app.run_test(size=(160, 45)) as pilot:
        screen = app.job_screen
        probe = FrameProbe(app)
        t0 = time.monotonic()
        await pilot.press("l")

        def all_running() -> bool:
            states = screen.grid.states().values()
            return len(states) == hosts and all(s == RankState.RUNNING for s in states)

        async def keys_until(done: Any, phase: str) -> None:
            while not done() and time.monotonic() - t0 < LIMIT_S:
                latencies: dict[str, list[float]] = {
                    "switch log (])": [],
                    "scroll (up)": [],
                    "follow (end)": [],
                }
                await log_keys_round(pilot, screen, probe, latencies)
                during[phase] += [v for values in latencies.values() for v in values]

        await keys_until(lambda: all_running() or not screen.job_active, "launch")
        launched = time.monotonic() - t0
        ok = all_running()
        screen.teardown()  # what `q` does once confirmed
        t1 = time.monotonic()
        await keys_until(lambda: not screen.job_active, "teardown")
        teardown = time.monotonic() - t1
        deadline = time.monotonic() + 30
        while screen.summary is None and time.monotonic() < deadline:
            await pilot.pause(0.1)
        reports = screen.session.teardown_reports if screen.session else {}
        clean = bool(screen.session) and all(r.clean for r in reports.values())
        not_clean = {node: r.detail for node, r in reports.items() if not r.clean}

    def stats(values: list[float]) -> dict[str, float]:
        seen = [v for v in values if v != float("inf")]
        return {
            "p50": percentile(seen, 50) if seen else float("nan"),
            "p99": percentile(seen, 99) if seen else float("nan"),
            "n": len(values),
            "lost": len(values) - len(seen),
        }

    every = during["launch"] + during["teardown"]
    return {
        "all_running": ok,
        "launch_s": launched,
        "teardown_s": teardown,
        "clean": clean,
        "not_clean": not_clean,  # node: why its proof failed, in the console's words
        "keys": stats(every),
        "keys_launch": stats(during["launch"]),
        "keys_teardown": stats(during["teardown"]),
        "frame_p99": percentile(probe.frames, 99) if probe.frames else float("nan"),
        "rss_mb": peak_rss_mb(),
        "tree": str(Path(ddptui.__file__).parents[1]),  # whose console ran
    }


def main() -> None:
    hosts, config, standin, workdir = sys.argv[1:5]
    print(json.dumps(asyncio.run(run(int(hosts), config, standin, workdir))), flush=True)


if __name__ == "__main__":
    main()
