"""Provides the `ddptui` command: the console, and headless subcommands."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from ddptui import __version__
from ddptui.cli.early import open_from_argv
from ddptui.cli.gc_policy import begin_startup, end_startup

if TYPE_CHECKING:
    from ddptui.core.job.spec import JobSpec
    from ddptui.core.runs.run_dir import RunDir

# The core is imported inside the functions, after `begin_startup`: its imports (pydantic,
# then the SSH engine) are most of start-up, and need no collections while they run.


WIDE_HELP = "every column at full width (a terminal's table is fitted to it; a pipe's is not)"


READ_ONLY_HELP = (
    "the console shows the job but hides every action that changes it (launch, teardown, "
    "detach, stacks, kill/drain a node), as k9s --readonly does"
)


# What `ddptui --help` and `ddptui run --help` end with: one job of each kind, each a command
# line the parser takes (tests/unit/test_cli_help.py parses every one).
EXAMPLES: tuple[tuple[str, str], ...] = (
    (
        "local: 2 pseudo-nodes x 2 processes on this machine (what `ddptui` alone opens)",
        "ddptui run --nodes 2 --nproc-per-node 2 trainer/envcheck.py",
    ),
    (
        "SSH: every host of a list, 8 processes each",
        "ddptui run --hosts 'node[01-04]' --nproc-per-node 8 train.py --epochs 3",
    ),
    (
        "Slurm: salloc 2 nodes x 4 GPUs for 30 minutes, one torchrun per node",
        "ddptui run --backend slurm --nodes 2 --nproc-per-node 4 --gres gpu:4 --time 30 train.py",
    ),
    (
        "headless: JSON events on stdout, the job's status as the exit status",
        "ddptui run --headless --hostfile hosts.txt train.py",
    ),
    (
        "elastic: 2 to 3 nodes, a fourth host waiting as a spare",
        "ddptui run --hosts 'node[1-4]' --nodes 2:3 --spares 1 trainer/elastic_ddp.py",
    ),
)
EPILOG = "examples:\n" + "\n".join(f"  # {what}\n  {line}\n" for what, line in EXAMPLES)
DESCRIPTION = """\
Operator console for multi-node PyTorch training. With no command, opens the
console on the job given by the flags (default: 2 local pseudo-nodes x 2
processes running trainer/envcheck.py)."""


def _parser() -> argparse.ArgumentParser:
    from ddptui.cli.jobargs import add_job_flags

    parser = argparse.ArgumentParser(
        prog="ddptui",
        description=DESCRIPTION,
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_job_flags(parser)
    parser.add_argument("--keymap", help="keymap file (TOML) to apply")
    parser.add_argument(
        "--compare",
        dest="compare_run",
        metavar="RUN_ID",
        help="lay this past run's curves over the metrics view's plot (M)",
    )
    parser.add_argument("--read-only", action="store_true", help=READ_ONLY_HELP)
    parser.add_argument("--version", action="version", version=f"ddptui {__version__}")
    sub = parser.add_subparsers(dest="command")
    run = sub.add_parser(
        "run",
        help="run SCRIPT on the nodes (console, or --headless)",
        description="Run SCRIPT on the job's nodes: in the console, or with --headless as "
        "JSON events.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_job_flags(run)
    run.add_argument("--headless", action="store_true", help="no UI: JSON events on stdout")
    run.add_argument("--lines", action="store_true", help="headless: include every log line")
    run.add_argument(
        "--detach",
        action="store_true",
        help="headless: return once launched, leave the job running",
    )
    run.add_argument("--keymap", help="keymap file (TOML) to apply")
    run.add_argument("--read-only", action="store_true", help=READ_ONLY_HELP)
    run.add_argument(
        "--again",
        metavar="RUN_ID",
        help="run that run's job again, as it ran: history lists it as another attempt of "
        "the same run (its job flags and script are the run's; give none)",
    )
    run.add_argument(
        "script", nargs="?", help="the training script (or the profile's; none: the default job)"
    )
    run.add_argument("script_args", nargs=argparse.REMAINDER)
    preflight = sub.add_parser(
        "preflight", help="check every node of the job before launch (exit 1 if any check fails)"
    )
    add_job_flags(preflight)
    preflight.add_argument("--headless", action="store_true", help="JSON lines on stdout")
    preflight.add_argument(
        "--no-gang",
        dest="gang",
        action="store_false",
        help="skip the gang test (a short all-reduce across the job, launched as the job is)",
    )
    preflight.add_argument(
        "--gang-min-busbw",
        type=float,
        default=0.0,
        metavar="GBPS",
        help="a node whose gang-test busbw is under this (GB/s) fails; without it, only a node "
        "under half the others' median does",
    )
    preflight.add_argument("--wide", action="store_true", help=WIDE_HELP)
    preflight.add_argument("script", nargs="?", help="also check the script is on every node")
    preflight.add_argument("script_args", nargs=argparse.REMAINDER)
    history = sub.add_parser("history", help="list past runs, newest first")
    history.add_argument("--limit", type=int, default=50, help="at most this many (default 50)")
    history.add_argument("--json", action="store_true", help="one JSON object per run")
    history.add_argument("--wide", action="store_true", help=WIDE_HELP)
    history.add_argument(
        "--refresh",
        action="store_true",
        help="ask the nodes of runs left detached on SSH or Slurm how they ended (runs on "
        "this machine are always brought up to date)",
    )
    history.add_argument(
        "--compare",
        nargs=2,
        metavar=("RUN_A", "RUN_B"),
        help="two runs' metrics side by side (last and best loss, mean throughput, ...)",
    )
    stacks = sub.add_parser("stacks", help="every rank's stacks of a running or detached run")
    stacks.add_argument("run_id")
    stacks.add_argument("--json", action="store_true", help="the stacks event as one JSON line")
    stacks.add_argument("--method", choices=["auto", "signal", "py-spy"])
    attach = sub.add_parser("attach", help="follow a run left running (detached, or sbatch)")
    attach.add_argument("run_id")
    attach.add_argument("--headless", action="store_true")
    attach.add_argument("--lines", action="store_true")
    attach.add_argument(
        "--watch",
        action="store_true",
        help="headless, in the background: follow the run to its end to notify (--notify), "
        "giving way to any console that attaches; a detached run that notifies gets one",
    )
    served = sub.add_parser(
        "serve",
        help="a run's console in the browser (read-only; needs `pip install 'ddptui[web]'`)",
        description="Serve the console of a running, detached or finished run to browsers: "
        "every tab sees the same run live, with its own scroll and log choice. Prints the URL "
        "with its access token; a request without the token gets 403.",
    )
    served.add_argument("run_id", nargs="?", help="the run (default: the newest)")
    served.add_argument(
        "--host",
        default="127.0.0.1",
        help="address to listen on (default 127.0.0.1: reach it through an SSH tunnel)",
    )
    served.add_argument(
        "--port", type=int, default=8765, help="port to listen on (default 8765; 0: any free)"
    )
    served.add_argument(
        "--allow-control",
        action="store_true",
        help="hand the run to the token holder: teardown, detach and stacks offered (one tab "
        "at a time holds control; the others follow read-only)",
    )
    attach.add_argument("--read-only", action="store_true", help=READ_ONLY_HELP)
    return parser


def main(argv: list[str] | None = None) -> int:
    begin_startup()
    # The first hosts' TCP connects go out now, before the job's models and the SSH engine
    # are imported (most of start-up): the backend claims them when it connects.
    open_from_argv(sys.argv[1:] if argv is None else argv)
    try:
        return _main(argv)
    finally:
        end_startup()
        if "ddptui.core.backends.ssh.early_connect" in sys.modules:
            from ddptui.core.backends.ssh.early_connect import discard_preopened

            discard_preopened()
        if "ddptui.core.backends.slurm.early_alloc" in sys.modules:
            from ddptui.core.backends.slurm import early_alloc, supervisor

            early_alloc.discard()  # an early allocation the run did not take
            supervisor.discard()  # and the step's supervisor started with it


def _main(argv: list[str] | None) -> int:
    from ddptui.cli.jobargs import spec_from_args
    from ddptui.core.backends.base import BackendError
    from ddptui.core.job.spec import SpecError, check_local_script

    parser = _parser()
    misplaced = _flags_before_command(sys.argv[1:] if argv is None else argv)
    if misplaced:
        command, flags = misplaced
        takes = {"run": flags, "preflight": [f for f in flags if f != "--keymap"]}
        after = takes.get(command, [])
        others = [f for f in flags if f not in after]
        parts = []
        if after:
            parts.append(f"{', '.join(after)} must come after `{command}`: ddptui {command} ...")
        if others:
            verb = "does" if len(others) == 1 else "do"
            parts.append(f"{', '.join(others)} {verb} not apply to `{command}`: leave it out")
        print(f"ddptui: error: {'; '.join(parts)}", file=sys.stderr)
        return 2
    args = parser.parse_args(argv)
    try:
        if args.command == "attach":
            run_dir = _open_run(args.run_id)
            spec = run_dir.read_spec()
            run_dir.read_plan()  # both readable, or one line now rather than a failed follow
            if args.headless or args.watch:
                from ddptui.cli.headless import run_headless

                return run_headless(spec, lines=args.lines, attach=run_dir, watching=args.watch)
            return _console(spec, None, attach=run_dir, read_only=args.read_only)
        if args.command == "serve":
            return _serve(args)
        if args.command == "stacks":
            from ddptui.cli.reports import print_stacks

            return print_stacks(_open_run(args.run_id), args.method, args.json)
        if args.command == "history":
            from ddptui.cli.reports import print_history
            from ddptui.cli.text_table import terminal_width

            if args.compare:
                from ddptui.cli.reports import print_compare

                return print_compare(args.compare[0], args.compare[1], args.json)
            width = terminal_width(sys.stdout, args.wide)
            return print_history(args.limit or None, args.json, width=width, refresh=args.refresh)
        if args.command == "preflight":
            from ddptui.cli.reports import run_preflight
            from ddptui.cli.text_table import terminal_width

            spec = spec_from_args(args, args.script, args.script_args)
            return run_preflight(
                spec,
                args.headless,
                gang=args.gang,
                min_busbw=args.gang_min_busbw,
                width=terminal_width(sys.stdout, args.wide),
            )
        if args.command == "run":
            again_of = None
            if args.again:
                spec, again_of = _job_again(args)
            else:  # no script and no profile: the default job, as `ddptui` alone launches it
                spec = spec_from_args(args, args.script, args.script_args)
            if spec.backend == "local":
                from ddptui.core.backends.local import local_gpus

                check_local_script(spec)
                local_gpus(spec)  # more GPUs than this machine has: refused now
            if args.headless:
                run_id = None
                if spec.backend == "slurm":  # salloc goes out while headless mode is imported
                    from ddptui.core.backends.slurm.early_alloc import allocate_ahead

                    run_id = allocate_ahead(spec)
                from ddptui.cli.headless import run_headless

                return run_headless(
                    spec, lines=args.lines, detach=args.detach, run_id=run_id, again_of=again_of
                )
            return _console(
                spec,
                args.keymap,
                compare=args.compare_run,
                read_only=args.read_only,
                again_of=again_of,
            )
        spec = spec_from_args(args, None, [])
        return _console(spec, args.keymap, compare=args.compare_run, read_only=args.read_only)
    except (SpecError, BackendError, FileNotFoundError) as exc:
        print(f"ddptui: error: {exc}", file=sys.stderr)
        return 2


COMMANDS = ("run", "preflight", "history", "attach", "serve")


def _flags_before_command(argv: list[str]) -> tuple[str, list[str]] | None:
    """Job flags typed before the command (`ddptui --nodes 7 run x.py`): argparse would
    drop them silently, the command having its own. The command and those flags, if any."""
    from ddptui.cli.jobargs import add_job_flags

    before = argparse.ArgumentParser(add_help=False)
    add_job_flags(before)
    before.add_argument("--keymap")
    before.add_argument("rest", nargs=argparse.REMAINDER)
    try:
        seen, _ = before.parse_known_args(argv)
    except SystemExit:
        return None  # the real parser reports it
    if not seen.rest or seen.rest[0] not in COMMANDS:
        return None
    given = [
        action.option_strings[0]
        for action in before._actions
        if action.option_strings and getattr(seen, action.dest) not in (None, [], False)
    ]
    return (seen.rest[0], given) if given else None


def _open_run(run_id: str) -> RunDir:
    """A run id, a run directory, or the id of the Slurm job a run used; a run relaunched
    since (history's one row for its attempts): its latest attempt's directory."""
    from ddptui.core.runs.run_dir import RunDir

    try:
        return _latest_attempt(RunDir.open(run_id))
    except FileNotFoundError:
        if not run_id.isdigit():
            raise
        from ddptui.core.backends.slurm.backend import run_for_job

        found = run_for_job(run_id)
        if found is None:
            raise FileNotFoundError(
                f"no run {run_id!r}, and no run used Slurm job {run_id}"
            ) from None
        return found


def _latest_attempt(run: RunDir) -> RunDir:
    import sqlite3

    from ddptui.core.runs.history import RunHistory
    from ddptui.core.runs.run_dir import RunDir

    try:
        latest = RunHistory().latest_attempt_dir(run.run_id)
    except (sqlite3.Error, OSError):
        return run  # the history is a convenience: the run directory given still opens
    return RunDir.open(latest) if latest and Path(latest, "plan.json").is_file() else run


def _job_again(args: argparse.Namespace) -> tuple[JobSpec, str]:
    """`ddptui run --again RUN_ID`: that run's job as it ran, and the run it is an attempt
    of (the first of a run relaunched before)."""
    from ddptui.core.job.spec import SpecError

    if args.script or args.script_args:
        raise SpecError(f"--again runs the job of run {args.again} as it ran: give no script")
    run = _open_run(args.again)
    return run.read_spec(), run.attempt_of() or run.run_id


def _serve(args: argparse.Namespace) -> int:
    try:
        from ddptui.cli.serve import ServeOptions, newest_run, serve
    except ImportError as exc:
        print(
            f"ddptui: error: serving needs the web extra ({exc.name} is missing): "
            "pip install 'ddptui[web]'",
            file=sys.stderr,
        )
        return 2
    run = _open_run(args.run_id) if args.run_id else newest_run()
    run.read_spec()
    run.read_plan()  # both readable, or one line now rather than a console that fails
    return serve(ServeOptions(run, args.host, args.port, args.allow_control))


def _console(
    spec: JobSpec,
    keymap: str | None,
    attach: RunDir | None = None,
    compare: str | None = None,
    read_only: bool = False,
    again_of: str | None = None,
) -> int:
    from ddptui.ui.app import DdpApp

    read_only = read_only or spec.read_only  # the flag, or the profile's `read_only = true`
    app = DdpApp(spec, keymap_path=keymap, attach=attach, compare=compare, read_only=read_only)
    app.job_screen.again_of = again_of  # its first launch is an attempt of that run
    end_startup()
    code = app.run() or 0
    if app.farewell:  # the run's outcome and its teardown's proof, left on the terminal
        print(app.farewell)
    return code


if __name__ == "__main__":
    raise SystemExit(main())
