"""Provides the GPU stall capture and the flight recorder's cost, in one run.

On a machine with 2+ GPUs (NCCL): `python bench/gpu/stall.py OUT_DIR`.

1. `ddptui run --headless` of trainer/hang.py --skip-rank 1 (rank 1 skips the last
   all_reduce): waits for the stall event with its stacks, takes the node collector's raw
   report once more (for the CI tests' replay), then stops the job (SIGINT, the operator's
   stop). Keeps the console's JSON lines, the node log, the raw report and the flight
   recorder's dumps.
2. The same skip with the collectives' own timeout (`--pg-timeout`) and no stall detection:
   the watchdog's timeout gathers the flight recorder's dumps (and the teardown once more).
   Keeps the console's JSON lines and the dumps.
3. all-reduce busbw at `--bytes` (1 GiB) with the flight recorder on (TORCH_FR_BUFFER_SIZE=2000)
   and off (0), interleaved, `--rounds` each, through trainer/allreduce_bench.py under torchrun.

Writes into OUT_DIR: gpu_stall_console.jsonl, gpu_stall_node.log, gpu_stall_collect.json,
gpu_stall_fr.tar.gz, gpu_watchdog_console.jsonl, gpu_watchdog_fr.tar.gz, gpu_fr_busbw.json,
and prints a summary. On a CPU-only machine it runs
the same on gloo (`--nproc 2 --bytes 4194304`), which is how it is tested before a GPU run.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import signal
import statistics
import subprocess
import sys
import tarfile
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
GiB = 1 << 30


def stall_capture(out: Path, nproc: int, hang_timeout: float, limit_s: float) -> dict:
    """The headless run of the skipped all_reduce, until the stall's stacks are in."""
    state = Path(tempfile.mkdtemp(prefix="ddptui-gpu-stall-"))
    env = {**os.environ, "DDPTUI_STATE_DIR": str(state), "PYTHONPATH": str(ROOT)}
    argv = [
        sys.executable,
        "-m",
        "ddptui.cli",
        "run",
        "--headless",
        "--nodes",
        "1",
        "--nproc-per-node",
        str(nproc),
        "--hang-timeout",
        str(hang_timeout),
        str(ROOT / "trainer" / "hang.py"),
        "--skip-rank",
        "1",
        "--steps",
        "5",
        "--numel",
        str(1 << 20),
    ]
    started = time.time()
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True, env=env, cwd=state)
    assert proc.stdout is not None
    lines: list[str] = []
    stalled_at = None
    run_dir = None
    for line in proc.stdout:
        lines.append(line)
        event = json.loads(line) if line.startswith("{") else {}
        if event.get("event") == "plan":
            run_dir = state / "runs" / event["run_id"]
        if event.get("event") == "stall" and event.get("groups"):
            stalled_at = time.time() - started
            break
        if time.time() - started > limit_s:
            break
    raw = collect_again(run_dir) if run_dir else {}
    proc.send_signal(signal.SIGINT)
    rest, _ = proc.communicate(timeout=120)
    lines += rest.splitlines(keepends=True)
    (out / "gpu_stall_console.jsonl").write_text("".join(lines))
    (out / "gpu_stall_collect.json").write_text(json.dumps(raw, indent=1))
    if run_dir:
        logs = sorted((run_dir / "nodes").glob("*.log"))
        if logs:
            (out / "gpu_stall_node.log").write_bytes(logs[0].read_bytes())
        with tarfile.open(out / "gpu_stall_fr.tar.gz", "w:gz") as tar:
            for dump in sorted((run_dir / "nodes").glob("*.debug/fr/*")):
                if not dump.name.endswith(".pipe"):
                    tar.add(dump, arcname=dump.name)
    return {"stalled_after_s": stalled_at, "exit": proc.returncode, "run_dir": str(run_dir)}


def watchdog_capture(out: Path, nproc: int, pg_timeout: float, limit_s: float) -> dict:
    """The skip again, stall detection off: the collectives time out after `pg_timeout`."""
    state = Path(tempfile.mkdtemp(prefix="ddptui-gpu-watchdog-"))
    env = {**os.environ, "DDPTUI_STATE_DIR": str(state), "PYTHONPATH": str(ROOT)}
    argv = [sys.executable, "-m", "ddptui.cli", "run", "--headless", "--nodes", "1"]
    argv += ["--nproc-per-node", str(nproc), "--hang-timeout", "0"]
    argv += [str(ROOT / "trainer" / "hang.py"), "--skip-rank", "1", "--steps", "5"]
    argv += ["--numel", str(1 << 20), "--pg-timeout", str(pg_timeout), "--linger"]
    started = time.time()
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True, env=env, cwd=state)
    assert proc.stdout is not None
    lines: list[str] = []
    gathered_at = run_dir = None
    stop = threading.Timer(limit_s, proc.send_signal, [signal.SIGINT])
    stop.start()
    for line in proc.stdout:
        lines.append(line)
        event = json.loads(line) if line.startswith("{") else {}
        if event.get("event") == "plan":
            run_dir = state / "runs" / event["run_id"]
        if event.get("event") == "flight_recorder" and gathered_at is None:
            gathered_at = time.time() - started
            stop.cancel()
            proc.send_signal(signal.SIGINT)  # the operator's stop, once the dumps are read
    stop.cancel()
    proc.wait(timeout=120)
    (out / "gpu_watchdog_console.jsonl").write_text("".join(lines))
    if run_dir:
        with tarfile.open(out / "gpu_watchdog_fr.tar.gz", "w:gz") as tar:
            for dump in sorted((run_dir / "nodes").glob("*.debug/fr/*")):
                if not dump.name.endswith(".pipe"):
                    tar.add(dump, arcname=dump.name)
    return {"gathered_after_s": gathered_at, "exit": proc.returncode}


def console_works() -> bool:
    """Whether ddptui's console runs here (its dependencies installed)."""
    probe = [sys.executable, "-c", "import ddptui.cli.main, ddptui.core.session.session"]
    done = subprocess.run(probe, capture_output=True, env={**os.environ, "PYTHONPATH": str(ROOT)})
    return done.returncode == 0


def bare_capture(out: Path, nproc: int, wait_s: float) -> dict:
    """Without the console: torchrun with the hook and the recorder set up as the job helper
    does, the node collector run by hand once rank 1 skipped. The CI tests replay the log
    through the Monitor, which is what the console would have done."""
    base = Path(tempfile.mkdtemp(prefix="ddptui-gpu-bare-")) / "node.debug"
    (base / "hook").mkdir(parents=True)
    (base / "fr").mkdir()
    hook_source = (ROOT / "ddptui" / "core" / "node" / "worker_hook.py").read_bytes()
    (base / "hook" / "sitecustomize.py").write_bytes(hook_source)
    tag = "gpu-bare"
    env = {
        **os.environ,
        "PYTHONPATH": str(base / "hook"),
        "DDPTUI_DEBUG_DIR": str(base),
        "DDPTUI_TAG": tag,
        "TORCH_FR_BUFFER_SIZE": "2000",
        "TORCH_NCCL_DUMP_ON_TIMEOUT": "1",
        "TORCH_NCCL_DEBUG_INFO_TEMP_FILE": str(base / "fr" / "nccl_rank_"),
        "TORCH_NCCL_DEBUG_INFO_PIPE_FILE": str(base / "fr" / "pipe_rank_"),
        "TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE": "[ddptui:${rank}:${local_rank}]:",
        "PYTHONUNBUFFERED": "1",
        "LOGLEVEL": "INFO",
    }
    log = out / "gpu_stall_node.log"
    argv = ["torchrun", "--standalone", f"--nproc_per_node={nproc}", "--tee=3"]
    argv += [str(ROOT / "trainer" / "hang.py"), "--skip-rank", "1", "--steps", "5"]
    argv += ["--numel", str(1 << 20)]
    with log.open("wb") as sink:
        proc = subprocess.Popen(argv, stdout=sink, stderr=subprocess.STDOUT, env=env,
                                start_new_session=True)  # fmt: skip
        started = time.time()
        while b"skips all_reduce" not in log.read_bytes() and time.time() - started < 180:
            time.sleep(0.5)
        time.sleep(wait_s)
        done = subprocess.run(
            [sys.executable, "-", "collect", str(base), tag, "auto"],
            input=hook_source,
            capture_output=True,
            timeout=60,
        )
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=60)
    text = done.stdout.decode().strip().splitlines()
    raw = json.loads(text[-1]) if text else {"error": done.stderr.decode()[-2000:]}
    (out / "gpu_stall_collect.json").write_text(json.dumps(raw, indent=1))
    with tarfile.open(out / "gpu_stall_fr.tar.gz", "w:gz") as tar:
        for dump in sorted((base / "fr").iterdir()):
            if not dump.name.endswith(".pipe"):
                tar.add(dump, arcname=dump.name)
    return {"bare": True, "exit": proc.returncode, "skipped_after_s": time.time() - started}


def collect_again(run_dir: Path) -> dict:
    """The node collector's raw report (worker_hook.py collect), as the session got it."""
    plan = json.loads((run_dir / "plan.json").read_text())
    command = plan["commands"][0]
    debug = run_dir / "nodes" / f"{command['index']:03d}-{command['node']}.debug"
    hook = (ROOT / "ddptui" / "core" / "node" / "worker_hook.py").read_bytes()
    done = subprocess.run(
        [sys.executable, "-", "collect", str(debug), command["tag"], "auto"],
        input=hook,
        capture_output=True,
        timeout=60,
    )
    text = done.stdout.decode().strip().splitlines()
    return json.loads(text[-1]) if text else {"error": done.stderr.decode()[-2000:]}


def busbw(nproc: int, size: int, recorder: bool) -> float:
    env = {**os.environ, "TORCH_FR_BUFFER_SIZE": "2000" if recorder else "0"}
    done = subprocess.run(
        [
            "torchrun",
            "--standalone",
            f"--nproc_per_node={nproc}",
            str(ROOT / "trainer" / "allreduce_bench.py"),
            "--min-bytes",
            str(size),
            "--max-bytes",
            str(size),
            "--iters",
            "20",
            "--warmup",
            "5",
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    for line in done.stdout.splitlines():
        if line.startswith("ALLREDUCE_RESULT "):
            return float(json.loads(line.split(" ", 1)[1])["results"][-1]["busbw_gbps"])
    raise RuntimeError(done.stdout[-2000:] + done.stderr[-2000:])


def recorder_cost(out: Path, nproc: int, size: int, rounds: int) -> dict:
    on: list[float] = []
    off: list[float] = []
    for _ in range(rounds):  # interleaved: on, off, on, off ...
        on.append(busbw(nproc, size, True))
        off.append(busbw(nproc, size, False))
    result = {
        "bytes": size,
        "nproc": nproc,
        "on_gbps": on,
        "off_gbps": off,
        "on_median": statistics.median(on),
        "off_median": statistics.median(off),
    }
    result["on_vs_off"] = result["on_median"] / result["off_median"]
    (out / "gpu_fr_busbw.json").write_text(json.dumps(result, indent=1))
    return result


def environment() -> dict:
    probe = (
        "import json, torch; print(json.dumps({'torch': torch.__version__, "
        "'cuda': torch.cuda.is_available(), 'gpus': torch.cuda.device_count(), "
        "'nccl': '.'.join(map(str, torch.cuda.nccl.version())) if torch.cuda.is_available() "
        "else None, 'name': torch.cuda.get_device_name(0) if torch.cuda.is_available() "
        "else None}))"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True)
    info = json.loads(done.stdout) if done.stdout.startswith("{") else {"error": done.stderr}
    info.update(python=platform.python_version(), cpus=os.cpu_count())
    return info


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("out", type=Path)
    p.add_argument("--nproc", type=int, default=2)
    p.add_argument("--bytes", type=int, default=GiB)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--hang-timeout", type=float, default=10.0)
    p.add_argument("--pg-timeout", type=float, default=20.0)
    p.add_argument("--skip-bench", action="store_true")
    p.add_argument("--bare", action="store_true", help="without the console, even if it runs")
    args = p.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    report = {"env": environment()}
    print(json.dumps(report["env"]), flush=True)
    if console_works() and not args.bare:
        report["stall"] = stall_capture(args.out, args.nproc, args.hang_timeout, 240)
        report["watchdog"] = watchdog_capture(args.out, args.nproc, args.pg_timeout, 150)
    else:
        report["stall"] = bare_capture(args.out, args.nproc, args.hang_timeout)
    print(json.dumps({k: report[k] for k in ("stall", "watchdog") if k in report}), flush=True)
    if not args.skip_bench:
        report["busbw"] = recorder_cost(args.out, args.nproc, args.bytes, args.rounds)
        print(json.dumps(report["busbw"]), flush=True)
    (args.out / "gpu_stall_env.json").write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
