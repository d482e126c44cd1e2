"""Provides the suite's tiers, marked from what each test uses, and its longest-first order.

Tiers (markers, each a `-m` expression away):
- `testbed`: uses the real multi-host testbed (namespaces with sshd, Slurm, podman, dockerd),
  known from the fixtures it asks for;
- `real`: starts real processes beyond the test's own (a session, torchrun, sshd, a browser):
  every test under tests/integration/ and tests/e2e/, and any other whose recorded time says
  it waits on one (`REAL_S`);
- `long`: ran over `LONG_S` when last recorded, or is marked `long` by hand;
- `fast`: neither `testbed` nor `long`, and recorded under `FAST_S`, and not one of a module
  whose tests share a module-scoped fixture (they run in their order, all or none): the tier
  that answers in minutes (`python3 -m pytest -m fast -n 4`), real processes included where
  they are quick.

Recorded times live in tests/durations.json (`--record-durations` writes it after a run). A
test it does not know is `fast` only under tests/unit/, and counts as `FAST_S` for the order.

Under pytest-xdist the items go out longest first (the longest-processing-time rule), so the
3-minute holds start at once and the short tests fill the gaps; a module with a module-scoped
fixture (a browser, dockerd in the hosts) stays on one worker through its xdist group, and so
do the tests of one shared container store (`CONTAINER_FIXTURES`) and the torchft runs
(`ONE_AT_A_TIME`).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

DURATIONS = Path(__file__).resolve().parent / "durations.json"
TESTBED_FIXTURES = frozenset(
    {"testbed", "slurm_cluster", "clean_testbed", "make_testbed", "podman", "docker",
     "host_dockers"}
)  # fmt: skip
CONTAINER_FIXTURES = frozenset({"podman", "docker", "host_dockers"})
# Modules whose tests run one after another on one worker: torchft's replica groups heal by
# steps the others took meanwhile, which two such jobs at once on two cores may not take.
ONE_AT_A_TIME = {
    "tests/integration/test_ft.py": "torchft",
    "tests/ui/test_ft_console.py": "torchft",
}
REAL_DIRS = ("integration", "e2e")
FAST_S = 5.0
REAL_S = 2.0
LONG_S = 60.0


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--record-durations",
        action="store_true",
        help="after the run, write each test's time (setup + call + teardown) into "
        "tests/durations.json, keeping the entries of tests that did not run",
    )


def pytest_configure(config: pytest.Config) -> None:
    for line in (
        "testbed: uses the real multi-host testbed (marked from its fixtures)",
        "real: starts real processes (a session, torchrun, sshd, a browser)",
        "long: ran over a minute when last recorded (tests/durations.json), or marked by hand",
        "fast: the quick tier: no testbed, recorded under 5 s",
    ):
        config.addinivalue_line("markers", line)
    if config.getoption("record_durations") and not hasattr(config, "workerinput"):
        _RUN["times"] = {}


_RUN: dict[str, dict[str, float]] = {}  # "times": what this run measured, when recording


def recorded() -> dict[str, float]:
    try:
        data = json.loads(DURATIONS.read_text())
    except (OSError, ValueError):
        return {}
    return {str(k): float(v) for k, v in data.items()}


def tiers_of(nodeid: str, fixtures: set[str], seconds: float | None, long: bool) -> set[str]:
    """The tiers of one test, from where it lives, what it asks for and its recorded time."""
    top = nodeid.split("/")[1] if nodeid.startswith("tests/") else ""
    tiers: set[str] = set()
    if fixtures & TESTBED_FIXTURES:
        tiers.add("testbed")
    if top in REAL_DIRS or "testbed" in tiers or (seconds or 0.0) >= REAL_S:
        tiers.add("real")
    if long or (seconds or 0.0) > LONG_S:
        tiers.add("long")
    quick = seconds < FAST_S if seconds is not None else top == "unit"
    if quick and not tiers & {"testbed", "long"}:
        tiers.add("fast")
    return tiers


def _module_scoped(item: pytest.Item) -> bool:
    info = getattr(item, "_fixtureinfo", None)
    defs: dict[str, Any] = getattr(info, "name2fixturedefs", {}) or {}
    return any(d and d[-1].scope in ("module", "class", "package") for d in defs.values())


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    times = recorded()
    for item in items:
        fixtures = set(getattr(item, "fixturenames", ()))
        seconds = times.get(item.nodeid)
        tiers = tiers_of(
            item.nodeid, fixtures, seconds, item.get_closest_marker("long") is not None
        )
        if _module_scoped(item):  # its module's tests share a fixture's state, in their order
            tiers.discard("fast")
        for tier in tiers:
            item.add_marker(tier)
        module = item.nodeid.split("::")[0]
        if fixtures & CONTAINER_FIXTURES:
            item.add_marker(pytest.mark.xdist_group("containers"))
        elif module in ONE_AT_A_TIME:
            item.add_marker(pytest.mark.xdist_group(ONE_AT_A_TIME[module]))
        elif _module_scoped(item):
            item.add_marker(pytest.mark.xdist_group(module))
    if hasattr(config, "workerinput"):  # an xdist worker: its order is the schedule's
        weight = _group_weights(items, times)
        items.sort(key=lambda item: -weight[_group(item)])


def _group(item: pytest.Item) -> str:
    mark = item.get_closest_marker("xdist_group")
    return f"group:{mark.args[0]}" if mark and mark.args else item.nodeid


def _group_weights(items: list[pytest.Item], times: dict[str, float]) -> dict[str, float]:
    """Each xdist scope's recorded seconds, a group's tests summed; a test not recorded yet
    counts 0.1 s under tests/unit/ and FAST_S elsewhere."""
    weight: dict[str, float] = {}
    for item in items:
        default = 0.1 if item.nodeid.startswith("tests/unit/") else FAST_S
        key = _group(item)
        weight[key] = weight.get(key, 0.0) + times.get(item.nodeid, default)
    return weight


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    """Each phase's time, summed per test (under xdist the controller sees every worker's)."""
    times = _RUN.get("times")
    if times is not None:
        times[report.nodeid] = times.get(report.nodeid, 0.0) + report.duration


def pytest_sessionfinish(session: pytest.Session) -> None:
    measured = _RUN.get("times")
    if measured is None:
        return
    times = {**recorded(), **{k: round(v, 2) for k, v in measured.items()}}
    DURATIONS.write_text(json.dumps(dict(sorted(times.items())), indent=0) + "\n")
