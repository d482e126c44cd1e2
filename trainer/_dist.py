"""Shared plumbing for the trainer scripts.

Provides: identity resolution from torchrun's or Slurm's environment
(:func:`resolve_identity`), backend and device choice, process-group setup
(:func:`setup`), a clean exit path (:func:`finish`, :func:`run_main`), and
:func:`say`, which writes each output line with a single ``os.write``.

The scripts must run unchanged under ``torchrun`` and under plain ``srun``, and
they must exit cleanly: on torch 2.13 with gloo a fair share of runs abort at
interpreter shutdown after ``destroy_process_group`` (a gloo thread frees the last
work object during shutdown: SIGABRT), so every
exit goes through a barrier, the destroy, and ``os._exit``.
"""

from __future__ import annotations

import argparse
import contextlib
import ipaddress
import json
import os
import sys
import time
import traceback
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING, NoReturn

if TYPE_CHECKING:  # torch is heavy; the identity logic must not need it
    import torch

# What setup() writes back, so code reading torchrun's variables works under srun too.
EXPORTED_VARS = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK",
                 "MASTER_ADDR", "MASTER_PORT")  # fmt: skip
# Exit code for a launch environment we cannot make sense of (argparse uses 2 too).
EXIT_USAGE = 2


class IdentityError(RuntimeError):
    """The environment does not say who this process is in the job."""


@dataclass(frozen=True)
class Identity:
    """Where this process sits in the job, whichever launcher started it."""

    rank: int
    world_size: int
    local_rank: int
    local_world_size: int
    group_rank: int
    master_addr: str | None
    master_port: int | None
    source: str  # "torchrun" or "slurm"


def _int(env: Mapping[str, str], name: str, default: int | None = None) -> int:
    """Read an integer variable, naming the variable in the error so a bad
    launch script is easy to fix."""
    raw = env.get(name)
    if raw is None or raw.strip() == "":
        if default is None:
            raise IdentityError(f"{name} is not set")
        return default
    try:
        return int(raw.strip())
    except ValueError:
        raise IdentityError(f"{name}={raw!r} is not an integer") from None


def parse_tasks_per_node(value: str) -> list[int]:
    """Expand Slurm's compressed task counts, e.g. ``"2(x3),1"`` -> [2, 2, 2, 1].

    SLURM_TASKS_PER_NODE is the only place srun reports per-node counts when
    the job did not ask for ``--ntasks-per-node``.
    """
    counts: list[int] = []
    for part in value.split(","):
        part = part.strip()
        if not part:
            continue
        try:
            if "(x" in part:
                num, rep = part.split("(x", 1)
                counts.extend([int(num)] * int(rep.rstrip(")")))
            else:
                counts.append(int(part))
        except ValueError:
            raise IdentityError(f"cannot parse tasks-per-node value {value!r}") from None
    if not counts:
        raise IdentityError(f"cannot parse tasks-per-node value {value!r}")
    return counts


def _slurm_local_world_size(env: Mapping[str, str], group_rank: int, world_size: int) -> int:
    """Tasks on this node: explicit --ntasks-per-node, else the step's or the
    job's per-node layout, else (one node) the whole job."""
    if env.get("SLURM_NTASKS_PER_NODE", "").strip():
        return _int(env, "SLURM_NTASKS_PER_NODE")
    for name in ("SLURM_STEP_TASKS_PER_NODE", "SLURM_TASKS_PER_NODE"):
        if env.get(name, "").strip():
            counts = parse_tasks_per_node(env[name])
            return counts[group_rank] if group_rank < len(counts) else counts[0]
    nnodes = (
        env.get("SLURM_STEP_NUM_NODES") or env.get("SLURM_NNODES") or env.get("SLURM_JOB_NUM_NODES")
    )
    if nnodes is None or nnodes.strip() == "1":
        return world_size
    raise IdentityError(
        "cannot tell tasks per node: set SLURM_NTASKS_PER_NODE or SLURM_TASKS_PER_NODE"
    )


def _master(env: Mapping[str, str]) -> tuple[str | None, int | None]:
    addr = env.get("MASTER_ADDR") or None
    port = _int(env, "MASTER_PORT") if env.get("MASTER_PORT") else None
    return addr, port


def _check(ident: Identity) -> Identity:
    """Reject impossible combinations now, rather than as a hang in rendezvous."""
    if ident.world_size < 1:
        raise IdentityError(f"world size must be >= 1, got {ident.world_size}")
    if not 0 <= ident.rank < ident.world_size:
        raise IdentityError(f"rank {ident.rank} is outside world size {ident.world_size}")
    if ident.local_world_size < 1 or ident.local_world_size > ident.world_size:
        raise IdentityError(
            f"local world size {ident.local_world_size} is not in 1..{ident.world_size}"
        )
    if not 0 <= ident.local_rank < ident.local_world_size:
        raise IdentityError(
            f"local rank {ident.local_rank} is outside local world size {ident.local_world_size}"
        )
    if ident.group_rank < 0:
        raise IdentityError(f"group rank must be >= 0, got {ident.group_rank}")
    return ident


def resolve_identity(env: Mapping[str, str] | None = None) -> Identity:
    """Work out rank, world size, local rank, node rank and rendezvous address.

    torchrun's variables win over Slurm's: under ``srun torchrun`` the workers
    inherit SLURM_PROCID (the node's task id), which is not their rank.
    """
    env = os.environ if env is None else env
    addr, port = _master(env)
    if env.get("RANK", "").strip():
        if not env.get("WORLD_SIZE", "").strip():
            raise IdentityError("RANK is set but WORLD_SIZE is not")
        rank = _int(env, "RANK")
        world = _int(env, "WORLD_SIZE")
        # A hand-set RANK/WORLD_SIZE (no torchrun) means one node.
        local_rank = _int(env, "LOCAL_RANK", rank)
        return _check(
            Identity(
                rank=rank,
                world_size=world,
                local_rank=local_rank,
                local_world_size=_int(env, "LOCAL_WORLD_SIZE", world),
                group_rank=_int(env, "GROUP_RANK", 0),
                master_addr=addr,
                master_port=port,
                source="torchrun",
            )
        )
    if env.get("SLURM_PROCID", "").strip():
        if not env.get("SLURM_NTASKS", "").strip():
            raise IdentityError("SLURM_PROCID is set but SLURM_NTASKS is not")
        rank = _int(env, "SLURM_PROCID")
        world = _int(env, "SLURM_NTASKS")
        group_rank = _int(env, "SLURM_NODEID", 0)
        return _check(
            Identity(
                rank=rank,
                world_size=world,
                local_rank=_int(env, "SLURM_LOCALID", 0),
                local_world_size=_slurm_local_world_size(env, group_rank, world),
                group_rank=group_rank,
                master_addr=addr,
                master_port=port,
                source="slurm",
            )
        )
    raise IdentityError(
        "no distributed identity in the environment: launch with torchrun "
        "(sets RANK, WORLD_SIZE, LOCAL_RANK, ...) or srun (sets SLURM_PROCID, "
        "SLURM_NTASKS, SLURM_LOCALID, ... plus MASTER_ADDR/MASTER_PORT you export)"
    )


def choose_backend() -> str:
    """NCCL when this process can see a GPU, gloo otherwise."""
    import torch

    return "nccl" if torch.cuda.is_available() else "gloo"


def choose_device(ident: Identity, backend: str) -> torch.device:
    """The GPU of this local rank for NCCL, the CPU for gloo.

    With one visible GPU (Slurm's per-task GPU binding) that GPU is used
    whatever the local rank is.
    """
    import torch

    if backend != "nccl":
        return torch.device("cpu")
    count = torch.cuda.device_count()
    if count == 1:
        return torch.device("cuda", 0)
    if ident.local_rank >= count:
        raise IdentityError(f"LOCAL_RANK={ident.local_rank} but only {count} GPUs are visible")
    return torch.device("cuda", ident.local_rank)


def _is_loopback(addr: str | None) -> bool:
    if not addr:
        return False
    if addr == "localhost":
        return True
    try:
        return ipaddress.ip_address(addr).is_loopback
    except ValueError:
        return False


@dataclass(frozen=True)
class Dist:
    """A joined process group: who we are, and what we run on."""

    ident: Identity
    backend: str
    device: torch.device


def round_store(ident: Identity) -> object | None:
    """Under torchrun's agent store, a store prefix every worker of one rendezvous round
    agrees on; None elsewhere (then ``env://`` as usual).

    Workers find each other under ``/worker/attempt_<TORCHELASTIC_RESTART_COUNT>``, but the
    count is each agent's own: when a node is lost, an agent whose workers failed counts a
    restart and one that restarts them for the membership change does not, so the ranks of
    the new round look under different prefixes (a hang) or read the last round's addresses
    (gloo: "Connection refused"). Each rank instead counts how often a rank of its number
    joined a world of its size; every rank of a round gets the same count.
    """
    if os.environ.get("TORCHELASTIC_USE_AGENT_STORE") != "True":
        return None
    import torch.distributed as dist

    assert ident.master_addr is not None and ident.master_port is not None
    store = dist.TCPStore(ident.master_addr, int(ident.master_port), is_master=False)
    joined = store.add(f"ddptui/join/{ident.world_size}/{ident.rank}", 1)
    return dist.PrefixStore(f"/ddptui/world{ident.world_size}/join{joined}", store)


def setup(
    timeout_s: float | None = None, ident: Identity | None = None, elastic: bool = False
) -> Dist:
    """Join the process group through ``env://`` (`elastic`: through `round_store`).

    The identity is exported back as RANK/WORLD_SIZE/... so code that reads
    torchrun's variables also works under srun. ``env://`` keeps torchrun's
    agent store when torchrun is the launcher.
    """
    import torch
    import torch.distributed as dist

    ident = resolve_identity() if ident is None else ident
    if ident.master_addr is None or ident.master_port is None:
        raise IdentityError(
            "MASTER_ADDR and MASTER_PORT must be set (under srun: "
            "export MASTER_ADDR=$(scontrol show hostnames $SLURM_JOB_NODELIST | head -n1) "
            "MASTER_PORT=29500)"
        )
    backend = choose_backend()
    device = choose_device(ident, backend)
    exported = (ident.rank, ident.world_size, ident.local_rank, ident.local_world_size,
                ident.group_rank, ident.master_addr, ident.master_port)  # fmt: skip
    os.environ.update(zip(EXPORTED_VARS, map(str, exported), strict=True))
    # Gloo picks its interface from the hostname, which often resolves to
    # 127.0.1.1; a loopback master means every rank is on this host anyway.
    if backend == "gloo" and _is_loopback(ident.master_addr):
        os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    if device.type == "cuda":
        torch.cuda.set_device(device)
    store = round_store(ident) if elastic else None
    dist.init_process_group(
        backend=backend,
        init_method=None if store is not None else "env://",
        store=store,  # type: ignore[arg-type]
        rank=ident.rank,
        world_size=ident.world_size,
        timeout=None if timeout_s is None else timedelta(seconds=timeout_s),
        device_id=device if device.type == "cuda" else None,
    )
    return Dist(ident=ident, backend=backend, device=device)


def say(line: str) -> None:
    """Write one line with one ``os.write`` so ranks sharing a pipe never
    interleave inside a line (``print`` under ``python -u`` writes the text
    and the newline separately)."""
    sys.stdout.flush()  # keep order with anything print()ed before
    data = (line.rstrip("\n") + "\n").encode("utf-8", "replace")
    while data:
        written = os.write(1, data)
        data = data[written:]


def finish(code: int = 0) -> NoReturn:
    """Leave without the gloo shutdown abort.

    On success all ranks meet at a barrier before the destroy (no rank tears
    down while a peer still talks to it); on failure peers may be stuck in a
    collective, so we skip both and just go. ``os._exit`` skips the
    interpreter teardown in which gloo's threads abort.
    """
    try:
        # Only a script that imported torch.distributed can have a group; don't
        # pay torch's import time to find out on an early error.
        dist = sys.modules.get("torch.distributed")
        if code == 0 and dist is not None and dist.is_available() and dist.is_initialized():
            try:
                dist.barrier()
                dist.destroy_process_group()
            except Exception:  # a peer died between our last op and here
                traceback.print_exc()
                code = 1
    finally:
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):
                stream.flush()
        os._exit(code)


def _record_for_torchrun(exc: BaseException) -> None:
    """Write torchelastic's error file so torchrun's summary names the root
    cause (``@record`` would, but it relies on normal interpreter exit).

    Written whole or not at all (a temporary file renamed into place): when
    one rank fails, torchrun stops the others, and a rank stopped while it
    wrote its own file would leave it empty; torchrun's agent then dies on it
    (``JSONDecodeError``) instead of printing its failure summary."""
    path = os.environ.get("TORCHELASTIC_ERROR_FILE")
    if not path:
        return
    data = {
        "message": {  # the layout of torch's ErrorHandler.record_exception
            "message": f"{type(exc).__name__}: {exc}",
            "extraInfo": {
                "py_callstack": "".join(traceback.format_exception(exc)),
                "timestamp": str(int(time.time())),
            },
        }
    }
    partial = f"{path}.{os.getpid()}.partial"
    try:
        with open(partial, "w") as fp:
            json.dump(data, fp)
        os.replace(partial, path)
    except OSError:
        with contextlib.suppress(OSError):
            os.unlink(partial)


def run_main(main: Callable[[], int | None]) -> NoReturn:
    """Run a script's ``main`` and exit through :func:`finish` whatever happens.

    An uncaught exception prints its traceback and exits 1; a bad launch
    environment prints one ``error:`` line and exits 2.
    """
    try:
        code = main() or 0
    except SystemExit as exc:  # argparse, or an explicit sys.exit
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except IdentityError as exc:
        sys.stderr.write(f"error: {exc}\n")
        code = EXIT_USAGE
    except KeyboardInterrupt:
        traceback.print_exc()
        code = 130
    except BaseException as exc:
        traceback.print_exc()
        _record_for_torchrun(exc)
        code = 1
    finish(code)


def parse_bytes(text: str) -> int:
    """Parse ``1048576``, ``64K``, ``1M``, ``1MiB``, ``1G`` (binary units) for
    argparse, so sizes read the way people type them."""
    value = text.strip().upper().removesuffix("IB").removesuffix("B")
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}
    mult = 1
    if value and value[-1] in units:
        mult = units[value[-1]]
        value = value[:-1]
    try:
        number = float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a size: {text!r}") from None
    if number <= 0:
        raise argparse.ArgumentTypeError(f"size must be positive: {text!r}")
    return int(number * mult)
