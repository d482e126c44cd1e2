# mypy: disallow-untyped-defs=False, disallow-incomplete-defs=False
"""Provides the workers' collective sampler: each rank's new flight-recorder records, to a file.

Standard library only; it runs inside the worker hook (worker_hook.py, sent ahead of it) and
never imports torch: a worker that has not imported torch has no collectives to read. A
daemon thread wakes every DDPTUI_COLLECTIVES_S seconds (1 by default; 0: off), dumps the
flight recorder without stack traces, and appends one JSON line to
`<debug dir>/collectives/rank_<RANK>.jsonl` with the records it had not written yet:

    {"v": 1, "rank", "local_rank", "host", "pid", "wall_ns", "mono_ns", "period_s",
     "cost_us", "cpu_us", "lost", "rows": [[pg, seq, op, sizes, created_ns, started_ns,
     completed_ns, duration_ms, dtypes, output_sizes], ...]}

`created_ns` is when the rank enqueued the collective (wall clock of its node); NCCL fills
`started_ns`/`completed_ns` and, with TORCH_NCCL_ENABLE_TIMING=1, `duration_ms` (the GPU's own
start to end, which needs no clock across nodes); gloo leaves them null. An NCCL record is
written once it has completed, so its times are final; but one still pending IN_FLIGHT_S
after it was enqueued is written once as it stands, an eleventh field `1` marking it (no
times to score; what it passed, for the collective audit): a collective some ranks called
with another size may never complete (NCCL 2.28 hangs on it), and the audit must see it.
A dump costs about 10 us per record in the buffer (20-60 ms for a full one of 2,000 on a
busy core), so the sampler stretches its period until its own CPU time stays under
COST_BUDGET of the wall time.
"""

import os
import sys
import time

PERIOD_VAR = "DDPTUI_COLLECTIVES_S"
COLLECTIVES_DIR = "collectives"
COST_BUDGET = 0.002  # the sampler's share of a rank's wall time, at most
MAX_PERIOD_S = 30.0
ROTATE_BYTES = 16 << 20  # a rank's file past this is moved to .1 (one old file kept)
IN_FLIGHT_S = 3.0  # a collective pending this long is written as it stands (once)
IN_FLIGHT = 1  # the in-flight row's eleventh field


def start_sampler(base, rank, local_rank):
    """Start the sampler's thread for this worker (no thread when the period is 0)."""
    try:
        period = float(os.environ.get(PERIOD_VAR, "1"))
    except ValueError:
        period = 1.0
    if period <= 0:
        return None
    import threading

    folder = os.path.join(base, COLLECTIVES_DIR)
    os.makedirs(folder, mode=0o700, exist_ok=True)
    sampler = CollectiveSampler(os.path.join(folder, f"rank_{rank}.jsonl"), rank, local_rank)
    thread = threading.Thread(target=sampler.run, args=(period,), daemon=True)
    thread.name = "ddptui-collectives"
    thread.start()
    import atexit

    # A rank that ends writes what it did last: torchrun stops the others within 0.1 s of
    # the first one's end, less than a period, and the audit needs the odd rank's own record
    # of the collective it got wrong (a gloo size mismatch: the odd rank ends by an exception
    # once its peer aborted). An uncaught exception first (before the traceback is printed
    # and torch's own exit handlers run), any other end at exit.
    shown = sys.excepthook

    def excepthook(*exc_info):
        sampler.last_sample(period)
        shown(*exc_info)

    sys.excepthook = excepthook
    atexit.register(sampler.last_sample, period)
    return sampler


def _dumps():
    """The flight recorder's dump functions this worker has (NCCL's and the one gloo fills),
    or none while torch is not imported."""
    torch = sys.modules.get("torch")
    c10d = getattr(getattr(torch, "_C", None), "_distributed_c10d", None)
    found = []
    for name in ("_dump_nccl_trace", "_dump_fr_trace"):
        dump = getattr(c10d, name, None)
        if dump is not None:
            found.append((name, dump))
    return found


def _plain_load(data):
    """A dump unpickled as plain containers: nothing of torch is needed to read it."""
    import io
    import pickle

    class Plain(pickle.Unpickler):
        def find_class(self, module, name):
            raise pickle.UnpicklingError(f"{module}.{name} is not plain data")

    return Plain(io.BytesIO(data)).load()


def _row(entry):
    """One collective's record, compact: [pg, seq, op, sizes, created, started, completed,
    duration_ms, dtypes, output_sizes] (times in ns of the node's wall clock; 0 from the
    recorder becomes null; dtypes and output sizes for the collective audit)."""
    duration = entry.get("duration_ms")
    return [
        entry.get("pg_id"),
        entry.get("collective_seq_id"),
        entry.get("profiling_name"),
        entry.get("input_sizes"),
        entry.get("time_created_ns"),
        entry.get("time_discovered_started_ns") or None,
        entry.get("time_discovered_completed_ns") or None,
        float(duration) if duration is not None else None,
        entry.get("input_dtypes"),
        entry.get("output_sizes"),
    ]


class CollectiveSampler:
    """One rank's sampler: the records it has written so far, per dump, and its file."""

    def __init__(self, path, rank, local_rank):
        import socket

        self.path = path
        self.head = {"v": 1, "rank": rank, "local_rank": local_rank}
        self.head["host"], self.head["pid"] = socket.gethostname(), os.getpid()
        self.last = {}  # dump name -> the newest record_id written
        self.in_flight = {}  # dump name -> the record_id written while it was pending
        self.samples = 0
        self.cpu_ns = 0  # the sampler's own CPU time, all samples
        import threading

        self.lock = threading.Lock()  # the thread's samples and the last one at exit

    def new_rows(self, name, dump, now_ns=None):
        """The records of `dump` newer than those written: (rows, lost). An NCCL record not
        yet completed holds back itself and those after it, until a later sample; pending
        IN_FLIGHT_S since it was enqueued (`now_ns`: the wall clock), it is written once as
        an in-flight row, and again once it completed."""
        entries = dump.get("entries") or []
        last = self.last.get(name, -1)
        rows, lost, newest = [], 0, last
        for entry in entries:
            rid = entry.get("record_id", -1)
            if rid <= last:
                continue
            if newest >= 0 and rid > newest + 1:
                lost += rid - newest - 1  # overwritten in the ring before it was read
            pending = str(entry.get("profiling_name", "")).startswith("nccl:") and entry.get(
                "state"
            ) not in ("completed", None)
            if pending:
                created = entry.get("time_created_ns") or 0
                now_ns = time.time_ns() if now_ns is None else now_ns
                late = created and now_ns - created >= IN_FLIGHT_S * 1e9
                if late and self.in_flight.get(name) != rid and not entry.get("is_p2p"):
                    self.in_flight[name] = rid
                    rows.append([*_row(entry), IN_FLIGHT])
                break
            newest = rid
            if not entry.get("is_p2p"):
                rows.append(_row(entry))
        self.last[name] = newest
        return rows, lost

    def sample(self, period):
        """Read every dump once; append one line if there is anything new. Returns the
        seconds of CPU the read took: what it took from the rank. Its wall time is longer
        where it waits for the GIL while the rank runs Python, which costs the rank nothing
        (stretching the period by it made a loaded machine's samples 20 s apart)."""
        with self.lock:
            return self._sample(period)

    def last_sample(self, period):
        """The sample at the rank's end (an uncaught exception's, else at exit): never an
        error of its own, and never a wait of more than a second for the thread's sample."""
        if not self.lock.acquire(timeout=1.0):
            return
        try:
            self._sample(period)
        except Exception:  # noqa: BLE001 - the rank's exit must not change
            pass
        finally:
            self.lock.release()

    def _sample(self, period):
        wall0, cpu0 = time.perf_counter_ns(), time.thread_time_ns()
        rows, lost = [], 0
        for name, dump in _dumps():
            try:
                data = dump(includeCollectives=True, includeStackTraces=False, onlyActive=False)
                got, missed = self.new_rows(name, _plain_load(data))
            except Exception:  # noqa: BLE001 - no process group yet, no recorder: nothing
                continue
            rows.extend(got)
            lost += missed
        cost_ns = time.perf_counter_ns() - wall0
        if rows or lost:
            self.write(rows, lost, period, cost_ns, time.thread_time_ns() - cpu0)
        cpu_ns = time.thread_time_ns() - cpu0
        self.cpu_ns += cpu_ns
        self.samples += 1
        return cpu_ns / 1e9

    def write(self, rows, lost, period, cost_ns, cpu_ns):
        import json

        record = dict(self.head)
        record["wall_ns"], record["mono_ns"] = time.time_ns(), time.monotonic_ns()
        record["period_s"], record["cost_us"] = round(period, 3), cost_ns // 1000
        record["cpu_us"], record["lost"], record["rows"] = cpu_ns // 1000, lost, rows
        line = (json.dumps(record, separators=(",", ":")) + "\n").encode()
        try:
            if os.path.getsize(self.path) > ROTATE_BYTES:
                os.replace(self.path, self.path + ".1")
        except OSError:
            pass
        fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        try:
            os.write(fd, line)  # one write per line: a reader never sees half of one
        finally:
            os.close(fd)

    def run(self, period):
        """Sample forever; the period grows while a dump costs more than the budget."""
        wait = period
        while True:
            time.sleep(wait)
            try:
                cost = self.sample(wait)
            except Exception:  # noqa: BLE001 - the sampler must never disturb the rank
                cost = 0.0
            wait = min(MAX_PERIOD_S, max(period, cost / COST_BUDGET))
