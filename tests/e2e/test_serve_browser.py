"""`ddptui serve` in a real browser: Chromium (Debian's package) driven by Playwright.

A real local 2x2 job (torchrun, c10d, gloo) runs headless, as a head node's own console
would run it; `ddptui serve` serves it; the pages are read through their xterm buffer
(testbed/browser.py) and waited on, never slept on, with generous limits: this machine's
two cores are shared. Every console the server starts is checked by its PID to be gone
once its tab is.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
from playwright.sync_api import sync_playwright

from testbed.browser import (
    TERMINAL_HOOK,
    Served,
    alive,
    cell_background,
    open_console,
    page_text,
    serve,
    wait_for_text,
)
from tests.cases import ROOT
from tests.procs import until_running

pytestmark = pytest.mark.timeout(600)
SCRIPT = Path(__file__).with_name("crash_on_file.py")


@dataclass
class LiveRun:
    run: subprocess.Popen[str]
    run_id: str
    trigger: Path
    served: Served


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveRun]:
    """A local 2x2 job run headless (its own session), and `ddptui serve` on it."""
    tmp = tmp_path_factory.mktemp("serve")
    state, trigger = tmp / "state", tmp / "crash-now"
    env = {**os.environ, "DDPTUI_STATE_DIR": str(state)}
    run = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "ddptui.cli",
            "run",
            "--headless",
            str(SCRIPT),
            "--when",
            str(trigger),
            "--limit",  # it ends by its crash, however slow the machine makes the tests
            "900",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        cwd=ROOT,
        env=env,
    )
    try:
        run_id = until_running(run)
        with serve(state, run_id) as served:
            yield LiveRun(run, run_id, trigger, served)
    finally:
        trigger.touch()  # a test that stopped early: the job ends by its crash
        try:
            run.wait(timeout=120)
        except subprocess.TimeoutExpired:
            run.kill()
            run.wait()


@pytest.fixture(scope="module")
def chromium(browser_type_launch_args: dict[str, Any]) -> Iterator[Any]:
    """A browser of this module's own, launched with pytest-playwright's arguments: the last
    test closes it, as a user closes theirs.

    Playwright's sync API runs an event loop on this thread while it is started, so it is
    started here and stopped with the module: the asyncio tests after it need the thread
    free of a running loop (a session-wide Playwright breaks every one of them)."""
    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(**browser_type_launch_args)
        try:
            yield launched
        finally:
            if launched.is_connected():
                launched.close()


def _status(url: str, headers: dict[str, str] | None = None) -> int:
    try:
        with urllib.request.urlopen(urllib.request.Request(url, headers=headers or {})) as r:
            return int(r.status)
    except urllib.error.HTTPError as exc:
        return exc.code


def _ended(served: Served, pid: int, timeout_s: float = 30.0) -> None:
    served.wait_for(rf"viewer ended: pid {pid}\b", timeout_s=timeout_s)
    deadline = time.monotonic() + 10
    while alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not alive(pid), f"the console of a closed tab (pid {pid}) still runs"


def test_a_visit_without_the_token_is_refused(live: LiveRun) -> None:
    served = live.served
    assert served.url.startswith("http://127.0.0.1:")  # loopback unless told otherwise
    token = served.url.split("token=", 1)[1]
    for path in ("/", "/ws", "/static/js/textual.js"):
        assert _status(served.base + path) == 403, path
        assert _status(f"{served.base}{path}?token=wrong-{token[:8]}") == 403, path
    assert _status(served.url) == 200
    assert _status(f"{served.base}/static/js/textual.js?token={token}") == 200
    ws = {"Connection": "Upgrade", "Upgrade": "websocket", "Sec-WebSocket-Version": "13",
          "Sec-WebSocket-Key": "dGhlIHNhbXBsZSBub25jZQ=="}  # fmt: skip
    assert _status(served.base + "/ws", ws) == 403  # no console is started for it
    assert served.viewer_pids() == ([], [])


def test_b_grid_green_log_keys_read_only(live: LiveRun, chromium: Any, tmp_path: Path) -> None:
    page = open_console(chromium, live.served.url)
    [pid] = live.served.viewer_pids()[0]
    token = live.served.url.split("token=", 1)[1].encode()
    for proc in (pid, live.served.process.pid):  # the token is on no command line
        assert token not in Path(f"/proc/{proc}/cmdline").read_bytes()
    assert token not in Path(f"/proc/{pid}/environ").read_bytes()
    wait_for_text(page, "running 4")
    green = cell_background(page, "local0 r", "r")  # the grid's row, not the log's tab
    assert green is not None and green[1] > green[0] + 40 and green[1] > green[2] + 40, green

    # Read-only: what would change the run is not offered, and its key does nothing. (The
    # footer shows its keys while the page has the focus: Textual's Footer skips updates
    # while the app is blurred.)
    page.locator(".xterm-screen").click()
    wait_for_text(page, "Quit")
    shown = page_text(page)
    for offered in ("Tear down", "Launch", "Detach", "Stacks"):
        assert offered not in shown, offered

    # Keys typed in the page change the log shown; `t` before them asked nothing (a
    # teardown's question would have taken the `]`).
    wait_for_text(page, "local0 · running")
    page.keyboard.press("t")
    page.keyboard.press("]")
    wait_for_text(page, "local1 · running")
    wait_for_text(page, "heartbeat=")
    assert "Tear down run" not in page_text(page)

    shot = tmp_path / "served-console.png"
    page.screenshot(path=str(shot))
    assert shot.stat().st_size > 10_000
    page.close()
    _ended(live.served, pid)
    assert live.run.poll() is None  # the run goes on without its viewer


def test_b_the_page_asks_nothing_of_any_host_but_the_server(live: LiveRun, chromium: Any) -> None:
    """Offline: the page, its script, stylesheet, font and websocket all come from `ddptui
    serve` (a head node without internet access serves a working page), and the font the
    terminal asks for is loaded, from the server."""
    served = live.served
    here = urlsplit(served.url).netloc
    before = len(served.viewer_pids()[0])
    page = chromium.new_page(viewport={"width": 1400, "height": 900})
    asked: list[str] = []
    page.on("request", lambda request: asked.append(request.url))
    page.on("websocket", lambda websocket: asked.append(websocket.url))
    page.add_init_script(TERMINAL_HOOK)
    page.goto(served.url)
    wait_for_text(page, "Ranks", timeout_s=120)
    [pid] = served.viewer_pids()[0][before:]
    assert page.evaluate("document.fonts.check(\"16px 'Roboto Mono'\")")
    loaded = page.evaluate(
        "[...document.fonts].filter(f => f.status === 'loaded').map(f => f.family)"
    )
    assert any("Roboto Mono" in family for family in loaded), loaded
    page.close()
    _ended(served, pid)
    elsewhere = [url for url in asked if urlsplit(url).netloc != here]
    assert elsewhere == [], elsewhere
    paths = {urlsplit(url).path for url in asked}
    assert {"/", "/static/js/textual.js", "/ws"} <= paths, paths
    assert any(path.startswith("/static/fonts/RobotoMono") for path in paths), paths


def _workers_of(marker: Path) -> list[int]:
    """The PIDs whose command line names `marker` (a run's own trigger path)."""
    found = []
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            with contextlib.suppress(OSError):
                if str(marker).encode() in (proc / "cmdline").read_bytes():
                    found.append(int(proc.name))
    return found


def test_b_allow_control_gives_one_tab_the_teardown(tmp_path: Path, chromium: Any) -> None:
    """`--allow-control` on a detached run: the first tab gets the run as `ddptui attach`
    gives it (teardown in its footer), a second tab follows it read-only; a teardown asked
    and answered no changes nothing, answered yes from the page stops every process."""
    state, trigger = tmp_path / "state", tmp_path / "never"
    env = {**os.environ, "DDPTUI_STATE_DIR": str(state)}
    argv = [sys.executable, "-m", "ddptui.cli", "run", "--headless", str(SCRIPT)]
    run = subprocess.Popen(
        [*argv, "--when", str(trigger), "--limit", "900"],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, cwd=ROOT, env=env,
    )  # fmt: skip
    try:
        run_id = until_running(run)
        run.send_signal(signal.SIGUSR1)  # detached: the run is nobody's until a tab takes it
        assert run.wait(timeout=60) == 0
        workers = _workers_of(trigger)
        assert len(workers) >= 4  # the ranks (and their launchers) run on
        with serve(state, run_id, "--allow-control") as served:
            assert "control given to the token holder" in "\n".join(served.lines)
            first = open_console(chromium, served.url)
            wait_for_text(first, "running 4")
            first.locator(".xterm-screen").click()
            wait_for_text(first, "Tear down")  # offered in its footer
            second = open_console(chromium, served.url)
            wait_for_text(second, "another browser tab controls this run")
            second.locator(".xterm-screen").click()
            wait_for_text(second, "Quit")
            assert "Tear down" not in page_text(second)

            first.locator(".xterm-screen").click()
            first.keyboard.press("t")
            wait_for_text(first, "Tear down run")
            first.keyboard.press("n")
            deadline = time.monotonic() + 60
            while "Tear down run" in page_text(first) and time.monotonic() < deadline:
                time.sleep(0.2)
            assert "Tear down run" not in page_text(first)
            assert all(alive(pid) for pid in workers)  # no: nothing stopped

            first.keyboard.press("t")
            wait_for_text(first, "Tear down run")
            first.keyboard.press("y")
            wait_for_text(first, "stopped", timeout_s=120)
            wait_for_text(second, "stopped", timeout_s=120)  # the follower sees it too
            deadline = time.monotonic() + 60
            while any(alive(pid) for pid in workers) and time.monotonic() < deadline:
                time.sleep(0.2)
            assert not [pid for pid in workers if alive(pid)], "the teardown left processes"
            started, _ = served.viewer_pids()
            for page in (first, second):
                page.close()
            for pid in started:
                _ended(served, pid)
    finally:
        if run.poll() is None:
            run.kill()
            run.wait()
        for pid in _workers_of(trigger):  # a test that failed part way: its run's own
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


def test_c_crash_shows_the_culprit_to_every_viewer(live: LiveRun, chromium: Any) -> None:
    pages = [open_console(chromium, live.served.url) for _ in range(2)]
    for page in pages:
        wait_for_text(page, "running 4")
    live.trigger.touch()
    for page in pages:  # the story's lead names the culprit, with its error, as on the console
        wait_for_text(page, "▶ crash: rank 3", timeout_s=120)
        wait_for_text(page, "crash_on_file: rank 3 fails as asked", timeout_s=60)
    # The run's own session saw it through to its end, viewers or not.
    assert live.run.wait(timeout=180) == 1
    assert live.run.stdout is not None
    events = [json.loads(line) for line in live.run.stdout if line.startswith("{")]
    summary = events[-1]
    assert summary["event"] == "summary"
    [culprit] = [r for r in summary["ranks"] if r["culprit"]]
    assert culprit["rank"] == 3 and summary["headline"].startswith("crash: rank 3 on ")
    for page in pages:
        wait_for_text(page, "failed", timeout_s=60)


def test_d_closing_the_browser_leaves_no_console(live: LiveRun, chromium: Any) -> None:
    started, _ = live.served.viewer_pids()
    assert len(started) == 4  # this server's: b's two tabs and c's two
    chromium.close()
    for pid in started:
        _ended(live.served, pid)
