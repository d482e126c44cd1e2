"""Provides a served console and a real browser on it: `ddptui serve` started and read, and
Chromium (Debian's package, driven by Playwright) with the terminal's text readable.

textual-serve draws the console with xterm.js on a canvas: the page has no text in its
DOM. TERMINAL_HOOK (an init script, for tests and benchmarks only: the served page is
left as it is) keeps each xterm `Terminal` the page makes in `window.ddptuiTerminals`, so
its buffer can be read as text (`page_text`) and its cells' colours (`cell_background`).
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

CHROMIUM = "/usr/bin/chromium"
# Root in a container: no sandbox (it needs user namespaces), no GPU, no /dev/shm limits.
CHROMIUM_ARGS = ["--no-sandbox", "--headless=new", "--disable-gpu", "--disable-dev-shm-usage"]
ROOT = Path(__file__).resolve().parents[1]

TERMINAL_HOOK = """
window.ddptuiTerminals = [];
Object.defineProperty(Object.prototype, 'terminal', {
  configurable: true,
  set(value) {
    Object.defineProperty(this, 'terminal',
      {value, writable: true, configurable: true, enumerable: true});
    window.ddptuiTerminals.push(value);
  },
});
"""

_TEXT_JS = """() => {
  const t = (window.ddptuiTerminals || [])[0];
  if (!t) return '';
  const b = t.buffer.active, out = [];
  for (let i = 0; i < b.length; i++) {
    const line = b.getLine(i);
    if (line) out.push(line.translateToString(true));
  }
  return out.join('\\n');
}"""

_HAS_JS = _TEXT_JS.replace("return out.join('\\n');\n}", "return out.join('\\n').includes(arg);\n}")
_HAS_JS = _HAS_JS.replace("() => {", "(arg) => {", 1)

_BACKGROUND_JS = """([needle, word]) => {
  const t = (window.ddptuiTerminals || [])[0];
  if (!t) return null;
  const b = t.buffer.active;
  for (let i = 0; i < b.length; i++) {
    const line = b.getLine(i);
    const text = line ? line.translateToString(false) : '';
    if (!text.includes(needle)) continue;
    const x = text.indexOf(word, text.indexOf(needle));
    if (x < 0) continue;
    const cell = line.getCell(x);
    if (!cell || !cell.isBgRGB()) return null;
    const c = cell.getBgColor();
    return [(c >> 16) & 255, (c >> 8) & 255, c & 255];
  }
  return null;
}"""


def page_text(page: Any) -> str:
    """The console's screen as the page shows it, one line a row."""
    text: str = page.evaluate(_TEXT_JS)
    return text


def wait_for_text(page: Any, needle: str, timeout_s: float = 120.0) -> None:
    """Until the page shows `needle` (polled in the page every 50 ms); AssertionError with
    what the page shows when it does not in time."""
    try:
        page.wait_for_function(_HAS_JS, arg=needle, timeout=timeout_s * 1000, polling=50)
    except Exception as exc:
        if type(exc).__name__ != "TimeoutError":
            raise
        shows = page_text(page)
        raise AssertionError(f"the page never showed {needle!r}; it shows:\n{shows}") from None


def cell_background(page: Any, row_with: str, word: str) -> tuple[int, int, int] | None:
    """The background (RGB) of the first cell of `word` on the row that shows `row_with`."""
    found = page.evaluate(_BACKGROUND_JS, [row_with, word])
    return tuple(found) if found else None


@dataclass
class Served:
    """A `ddptui serve` process; its output read as it comes (the URL, the viewers)."""

    process: subprocess.Popen[str]
    lines: list[str] = field(default_factory=list)

    @property
    def url(self) -> str:
        for line in self.lines:
            found = re.search(r"http://\S+\?token=\S+", line)
            if found:
                return found.group(0)
        return ""

    @property
    def base(self) -> str:
        return self.url.split("?", 1)[0].rstrip("/")

    def viewer_pids(self) -> tuple[list[int], list[int]]:
        """PIDs of the consoles started, and of those that ended, so far."""
        text = "\n".join(self.lines)
        started = [int(m) for m in re.findall(r"viewer started: pid (\d+)", text)]
        ended = [int(m) for m in re.findall(r"viewer ended: pid (\d+)", text)]
        return started, ended

    def wait_for(self, pattern: str, timeout_s: float = 60.0) -> str:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            for line in list(self.lines):
                if re.search(pattern, line):
                    return line
            if self.process.poll() is not None:
                break
            time.sleep(0.05)
        raise AssertionError(f"ddptui serve never said {pattern!r}: {self.lines}")


def alive(pid: int) -> bool:
    """Whether `pid` runs (a zombie does not count: it is only waiting to be reaped)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


@contextmanager
def serve(state_dir: Path, *args: str, env: dict[str, str] | None = None) -> Iterator[Served]:
    """`ddptui serve ARGS` on a free port of 127.0.0.1 until the block ends (SIGTERM, then
    the server's own shutdown ends every console it started)."""
    environ = {**os.environ, **(env or {}), "DDPTUI_STATE_DIR": str(state_dir)}
    environ["PYTHONPATH"] = os.pathsep.join([str(ROOT), *filter(None, [environ.get("PYTHONPATH")])])
    process = subprocess.Popen(
        [sys.executable, "-m", "ddptui.cli", "serve", "--port", "0", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=environ,
        cwd=ROOT,
    )
    served = Served(process)

    def read() -> None:
        assert process.stdout is not None
        for line in process.stdout:
            served.lines.append(line.rstrip("\n"))

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        served.wait_for(r"\?token=", timeout_s=120)
        yield served
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        reader.join(timeout=5)


def launch_browser(playwright: Any, extra_args: list[str] | None = None) -> Any:
    """Chromium from Debian's package (Playwright's own download cannot work here)."""
    args = [*CHROMIUM_ARGS, *(extra_args or [])]
    return playwright.chromium.launch(executable_path=CHROMIUM, args=args)


def open_console(browser: Any, url: str, size: tuple[int, int] = (1400, 900)) -> Any:
    """A new page on `url`, its terminal readable, once the console has drawn its grid."""
    page = browser.new_page(viewport={"width": size[0], "height": size[1]})
    page.add_init_script(TERMINAL_HOOK)
    page.goto(url)
    wait_for_text(page, "Ranks", timeout_s=120)
    return page
