"""Metric reading in CPU time per line, by kind of line, beside Monitor.feed's cost per line.

`MetricReader.read` on 20,000 copies of each kind of line (best of N, CPU time: wall-clock
rates move several-fold on a shared machine), and the monitor's whole ingest of the flood's
lines for scale: `python -m bench.flood.metrics_parse --reps 5`.
"""

from __future__ import annotations

import argparse
import time

from bench.flood_node import _batch
from ddptui.core.diagnose.job_watch import JobWatch
from ddptui.core.metrics.reader import MetricReader

LINES = {
    "no digit": "Loading snapshot from the checkpoint directory, please wait",
    "digits, no metric": "[2024-05-01 10:00:00] NCCL INFO Channel 00/02 : 0[0] -> 1[1] via P2P",
    "cpu_ddp epoch": "[RANK 3] Epoch 49 | Batchsize: 32 | Steps: 8",
    "flood line": "t=1700000000.123 seq=5 loss=0.0005 lr=3.0e-04 tok/s=51234.5 step-ok",
    "cifar10_vgg": "rank 1 epoch=3/10 loss=1.2345 train_acc=0.5123 test_acc=0.4987 samples/s=812.5",
    "torchtitan": "step: 10  loss: 7.2345  grad_norm: 1.2345  memory: 30.12GiB(38.05%)  "
    "tps: 12,345  tflops: 345.67  mfu: 34.95%",
    "megatron": " iteration      100/   10000 | consumed samples:        12800 | elapsed time per "
    "iteration (ms): 1234.5 | learning rate: 1.000000E-04 | global batch size:   128 | lm loss: "
    "7.123456E+00 | loss scale: 1.0 | grad norm: 1.234 | number of skipped iterations:   0 |",
    "hf trainer": "{'loss': 1.23, 'grad_norm': 4.5, 'learning_rate': 2e-05, 'epoch': 0.5}",
}
COUNT = 20_000


def _best(reps: int, run: object) -> float:
    best = float("inf")
    for _ in range(reps):
        start = time.process_time()
        run()  # type: ignore[operator]
        best = min(best, time.process_time() - start)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=5)
    args = parser.parse_args()
    chunk = _batch("[ddptui:0:0]:", 0, COUNT)
    feed = _best(args.reps, lambda: JobWatch(["local0"], 1).feed("local0", chunk)) / COUNT
    print(f"{'Monitor.feed, flood line':28s} {feed * 1e9:7.0f} ns/line (for scale)")
    for kind, line in LINES.items():
        lines = [line] * COUNT

        def read(lines: list[str] = lines) -> None:
            reader = MetricReader().read
            for i, text in enumerate(lines):
                reader(i & 15, text, 0.0)

        cost = _best(args.reps, read) / COUNT
        print(f"{kind:28s} {cost * 1e9:7.0f} ns/line  {cost / feed:5.2f}x Monitor.feed")
    flood = [LINES["flood line"]] * COUNT

    def capped() -> None:  # one block's lines, read at one time: a sample per rank, the rest cut
        reader = MetricReader(min_interval=0.05).read
        for i, text in enumerate(flood):
            reader(i & 15, text, 0.0)

    cost = _best(args.reps, capped) / COUNT
    label = "flood line, min_interval"
    print(f"{label:28s} {cost * 1e9:7.0f} ns/line  {cost / feed:5.2f}x Monitor.feed")


if __name__ == "__main__":
    main()
