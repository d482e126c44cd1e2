"""Provides `ddptui serve`: a run's console in the browser, through textual-serve, behind a token.

Every browser tab gets a console of its own (textual-serve starts one app per websocket),
its own scroll and log choice; each follows the run from its directory (`RunFollower`), so
N tabs are N readers of the same files and no session more: the run's own session (the
console or headless run that launched or attached to it) is the one that asks the nodes.

Offline: the page, its script, stylesheet and font all come from this server (the font is the
one textual-serve ships), so a head node without internet access serves a working page.

Safe by default: it listens on 127.0.0.1; every request, page and websocket alike, carries
the access token printed with the URL (in the query, or the cookie the first page sets;
without it: 403); the consoles are read-only unless `--allow-control`. Each console is
started as an argument vector, never through a shell, and is ended with its tab.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import secrets
import signal
import sys
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from aiohttp import web
from aiohttp.typedefs import Middleware
from textual_serve.app_service import AppService
from textual_serve.server import Server

from ddptui.core.runs.run_dir import RunDir, state_dir

TOKEN_COOKIE = "ddptui_token"
PACKAGE_ROOT = Path(__file__).resolve().parents[2]
# The page: textual-serve's, with its font from textual-serve's own static folder (served
# here) instead of a public font host, so the page needs nothing beyond this server.
PAGE_TEMPLATES = Path(__file__).resolve().parent / "templates"
VIEWER_FPS = 20
QUIT_GRACE_S = 3.0  # a console told to quit (its tab closed) has this long before a kill
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


@dataclass(frozen=True)
class ServeOptions:
    """What `ddptui serve` was asked: the run, where to listen, whether tabs may control it."""

    run: RunDir
    host: str = "127.0.0.1"
    port: int = 8765
    allow_control: bool = False


def viewer_argv(run: RunDir, allow_control: bool) -> list[str]:
    """The exact console a tab runs: this interpreter, the viewer module, the run's path."""
    argv = [sys.executable, "-m", "ddptui.cli.view", str(run.path.resolve())]
    return [*argv, "--control"] if allow_control else argv


def newest_run(root: Path | None = None) -> RunDir:
    """The newest run directory (run ids begin with their start time)."""
    runs = root or state_dir() / "runs"
    found = sorted((p for p in runs.glob("*") if (p / "plan.json").is_file()), key=lambda p: p.name)
    if not found:
        raise FileNotFoundError(f"no run in {runs} to serve: launch one, or name it")
    return RunDir(found[-1])


def token_ok(request: web.Request, token: str) -> bool:
    given = request.query.get("token") or request.cookies.get(TOKEN_COOKIE) or ""
    return secrets.compare_digest(given.encode(), token.encode())


def same_origin(request: web.Request) -> bool:
    """A websocket opened from a page of this server (a browser always sends Origin)."""
    origin = request.headers.get("Origin")
    return origin is None or origin.split("://", 1)[-1] == request.host


def token_middleware(token: str) -> Middleware:
    """Every request needs the token; a page reached with it in the query sets the cookie
    that its assets and its websocket then carry (HttpOnly, SameSite=Strict)."""

    @web.middleware
    async def require_token(request: web.Request, handler: Handler) -> web.StreamResponse:
        if not token_ok(request, token) or not same_origin(request):
            raise web.HTTPForbidden(text="ddptui serve: the access token is missing or wrong\n")
        response = await handler(request)
        if request.query.get("token") and not response.prepared:
            response.set_cookie(TOKEN_COOKIE, token, httponly=True, samesite="Strict", path="/")
        return response

    return require_token


class ViewerService(AppService):
    """One tab's console: started from an argument vector (no shell), ended with its tab."""

    def __init__(self, argv: list[str], on_exit: Callable[[int, int | None], None], **kw: Any):
        super().__init__(" ".join(argv), **kw)
        self.argv = argv
        self._on_exit = on_exit

    def _build_environment(self, width: int = 80, height: int = 24) -> dict[str, str]:
        env = super()._build_environment(width, height)
        # textual-serve asks for 60 frames a second; a run's console changes at 15 (its log
        # flush), and every frame is drawn again by each tab's browser: at 10 tabs on a busy
        # head node that was most of the latency (bench/results/web_page_latency*.md).
        env["TEXTUAL_FPS"] = str(VIEWER_FPS)
        env["PYTHONPATH"] = os.pathsep.join(
            [str(PACKAGE_ROOT), *filter(None, [env.get("PYTHONPATH")])]
        )
        return env

    async def _open_app_process(self, width: int = 80, height: int = 24) -> Any:
        self._process = process = await asyncio.create_subprocess_exec(
            *self.argv,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            env=self._build_environment(width=width, height=height),
        )
        assert process.stdin is not None
        self._stdin = process.stdin
        print(f"viewer started: pid {process.pid}", flush=True)
        return process

    async def stop(self) -> None:
        """Ask the console to quit; one that does not within QUIT_GRACE_S is killed."""
        process = self._process
        with contextlib.suppress(Exception):
            await asyncio.wait_for(super().stop(), QUIT_GRACE_S)
        if process is None:
            return
        if process.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                process.kill()
        code = await process.wait()
        if self._process is process:  # told once, however often it is stopped
            self._process = None
            self._on_exit(process.pid, code)


class ConsoleServer(Server):
    """textual-serve's server with the token, relative websocket URLs and exec'd consoles."""

    def __init__(self, options: ServeOptions, token: str) -> None:
        super().__init__(
            " ".join(viewer_argv(options.run, options.allow_control)),
            host=options.host,
            port=options.port,
            title=f"ddptui · run {options.run.run_id}",
            templates_path=PAGE_TEMPLATES,
        )
        self.options = options
        self.token = token
        self.argv = viewer_argv(options.run, options.allow_control)
        self.viewers: dict[int, ViewerService] = {}

    async def _make_app(self) -> web.Application:
        app = await super()._make_app()
        app.middlewares.append(token_middleware(self.token))
        app.on_shutdown.append(self._stop_viewers)
        return app

    async def on_startup(self, app: web.Application) -> None:
        return None  # the URL is printed once the port is known (serve_forever)

    async def handle_index(self, request: web.Request) -> web.StreamResponse:
        """The page, its websocket and assets named from the address it was reached by (an
        SSH tunnel's local port, not the server's). Nothing awaits between this and the
        rendering: concurrent requests do not mix their addresses."""
        self.public_url = f"{request.scheme}://{request.host}"
        return await super().handle_index(request)

    async def handle_websocket(self, request: web.Request) -> web.WebSocketResponse:
        """A tab's console, as textual-serve runs it, but started by ViewerService."""
        websocket = web.WebSocketResponse(heartbeat=15)
        width = _int(request.query.get("width", "80"), 80)
        height = _int(request.query.get("height", "24"), 24)
        service: ViewerService | None = None
        try:
            await websocket.prepare(request)
            service = ViewerService(
                self.argv,
                self._viewer_ended,
                write_bytes=websocket.send_bytes,
                write_str=websocket.send_str,
                close=websocket.close,
                download_manager=self.download_manager,
                debug=self.debug,
            )
            await service.start(width, height)
            if service._process is not None:
                self.viewers[service._process.pid] = service
            await self._process_messages(websocket, service)
        except asyncio.CancelledError:
            await websocket.close()
        finally:
            if service is not None:
                await service.stop()
        return websocket

    def _viewer_ended(self, pid: int, code: int | None) -> None:
        self.viewers.pop(pid, None)
        print(f"viewer ended: pid {pid} (exit {code})", flush=True)

    async def _stop_viewers(self, app: web.Application) -> None:
        await asyncio.gather(*(v.stop() for v in list(self.viewers.values())))

    async def serve_forever(self) -> None:
        """Listen until SIGINT or SIGTERM; the URL (with the token) printed once listening."""
        runner = web.AppRunner(await self._make_app(), access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, self.options.host, self.options.port)
        await site.start()
        server = site._server
        sockets = getattr(server, "sockets", None) or []
        port = sockets[0].getsockname()[1] if sockets else self.options.port
        host = self.options.host
        shown = f"[{host}]" if ":" in host else host
        mode = "control given to the token holder" if self.options.allow_control else "read-only"
        print(f"ddptui serve: run {self.options.run.run_id} ({mode})", flush=True)
        print(f"  http://{shown}:{port}/?token={self.token}", flush=True)
        print(
            "  anyone with this URL sees the run; keep it private. Ctrl+C stops serving "
            "(the run goes on).",
            flush=True,
        )
        for note in serve_notes(self.options):
            print(f"  note: {note}", flush=True)
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        try:
            await stop.wait()
        finally:
            await runner.cleanup()


def serve_notes(options: ServeOptions) -> list[str]:
    """What the operator should know before sharing the URL."""
    notes = []
    if options.host not in ("127.0.0.1", "::1", "localhost"):
        notes.append(
            f"listening on {options.host}: reachable beyond this machine, over plain HTTP "
            "(an SSH tunnel to 127.0.0.1 keeps the token off the network)"
        )
    run = options.run
    try:
        backend = run.read_spec().backend
    except Exception:  # read before serving: a failure here was already reported
        backend = "local"
    if backend != "local" and not (run.path / "summary.json").exists():
        notes.append(
            f"a {backend} run is live in the browser while a console or headless session "
            f"follows it; detached, it shows what was recorded until `ddptui attach "
            f"{run.run_id}` (or --allow-control) follows it again"
        )
    return notes


def _int(value: str, default: int) -> int:
    try:
        return int(value)
    except ValueError:
        return default


def serve(options: ServeOptions) -> int:
    token = secrets.token_urlsafe(24)
    asyncio.run(ConsoleServer(options, token).serve_forever())
    return 0
