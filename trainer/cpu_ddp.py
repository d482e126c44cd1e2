"""The CPU DDP job of the AWS ParallelCluster test case (PyTorch DDP tutorial).

A Linear(20, 1) trained with SGD on a synthetic dataset through
DistributedSampler + DDP, with snapshot save/resume. Output lines keep the
original's formats, since operators and the console's parser know them::

    Loading snapshot
    Resuming training from snapshot at Epoch N
    [RANK r] Epoch e | Batchsize: b | Steps: s
    Epoch e | Training snapshot saved at PATH

As in the original, the snapshot taken after epoch e records EPOCHS_RUN=e, so
a resumed run starts again at epoch e.

With ``--on-signal checkpoint`` a rank that gets SIGUSR1 or SIGTERM (a scheduler's
preemption warning, or its end) finishes its batch; the ranks agree to stop at the same
batch (an all-reduce of the flag after each), rank 0 saves the snapshot and every rank
exits 0, printing::

    [RANK r] SIGUSR1: snapshot saved at Epoch e, step s; exiting

Usage: ``torchrun --nproc_per_node 2 cpu_ddp.py TOTAL_EPOCHS SAVE_EVERY
[--batch_size 32] [--checkpoint_path snapshot.pt]``
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _dist  # noqa: E402
import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch.nn.parallel import DistributedDataParallel as DDP  # noqa: E402
from torch.utils.data import DataLoader, TensorDataset  # noqa: E402
from torch.utils.data.distributed import DistributedSampler  # noqa: E402

DATASET_SIZE = 2048
DATA_SEED = 1234


def make_dataset(size: int = DATASET_SIZE) -> TensorDataset:
    """(20-float, 1-float) samples, seeded: DistributedSampler assumes every
    rank holds the same dataset and only picks different indices."""
    gen = torch.Generator().manual_seed(DATA_SEED)
    features = torch.rand(size, 20, generator=gen)
    return TensorDataset(features, torch.rand(size, 1, generator=gen))


class Trainer:
    """Runs epochs and owns the snapshot (the tutorial's Trainer, on CPU or GPU)."""

    def __init__(
        self,
        d: _dist.Dist,
        loader: DataLoader,
        save_every: int,
        snapshot_path: str,
        on_signal: str = "none",
    ) -> None:
        self.d = d
        self.rank = d.ident.rank
        self.loader = loader
        self.save_every = save_every
        self.snapshot_path = snapshot_path
        self.epochs_run = 0
        self.on_signal = on_signal
        self.stop_asked = ""  # the signal that asked this rank to checkpoint and stop
        if on_signal == "checkpoint":
            for number in (signal.SIGUSR1, signal.SIGTERM):
                signal.signal(number, self._asked_to_stop)
        model = torch.nn.Linear(20, 1).to(d.device)
        self._resume(model)
        # DDP's constructor broadcasts rank 0's weights: ranks without the
        # snapshot file (another node's disk) start from rank 0's state.
        self.model = DDP(model, device_ids=[d.device.index] if d.device.type == "cuda" else None)
        self.optimizer = torch.optim.SGD(self.model.parameters(), lr=1e-3)

    def _resume(self, model: torch.nn.Module) -> None:
        """Load the snapshot if present; rank 0's epoch wins so every rank runs
        the same number of epochs (a mismatch would hang a collective)."""
        found = os.path.exists(self.snapshot_path)
        local_epoch = 0
        if found:
            _dist.say("Loading snapshot")
            snapshot = torch.load(self.snapshot_path, map_location=self.d.device)
            model.load_state_dict(snapshot["MODEL_STATE"])
            local_epoch = int(snapshot["EPOCHS_RUN"])
        state = torch.tensor([int(found), local_epoch], dtype=torch.int64, device=self.d.device)
        dist.broadcast(state, src=0)
        if int(state[0]):
            self.epochs_run = int(state[1])
            _dist.say(f"Resuming training from snapshot at Epoch {self.epochs_run}")

    def _asked_to_stop(self, number: int, _frame: object) -> None:
        self.stop_asked = self.stop_asked or signal.Signals(number).name

    def _stopping(self) -> bool:
        """Whether any rank was asked to stop: every rank asks after the same batch, so
        all stop there together (none is left waiting in the next batch's all-reduce)."""
        if self.on_signal != "checkpoint":
            return False
        flag = torch.tensor([1 if self.stop_asked else 0], device=self.d.device)
        dist.all_reduce(flag, op=dist.ReduceOp.MAX)
        return bool(flag.item())

    def _run_batch(self, source: torch.Tensor, targets: torch.Tensor) -> None:
        self.optimizer.zero_grad()
        loss = F.mse_loss(self.model(source), targets)
        loss.backward()
        self.optimizer.step()

    def _run_epoch(self, epoch: int) -> bool:
        """One epoch; False when the ranks stopped in it, asked to (`--on-signal`)."""
        b_sz = len(next(iter(self.loader))[0])
        steps = len(self.loader)
        _dist.say(f"[RANK {self.rank}] Epoch {epoch} | Batchsize: {b_sz} | Steps: {steps}")
        sampler = self.loader.sampler
        assert isinstance(sampler, DistributedSampler)
        sampler.set_epoch(epoch)
        for step, (source, targets) in enumerate(self.loader):
            self._run_batch(source.to(self.d.device), targets.to(self.d.device))
            if self._stopping():
                if self.rank == 0:
                    self._save_snapshot(epoch)
                why = self.stop_asked or "a peer's signal"
                _dist.say(
                    f"[RANK {self.rank}] {why}: snapshot saved at Epoch {epoch}, "
                    f"step {step}; exiting"
                )
                return False
        return True

    def _save_snapshot(self, epoch: int) -> None:
        """Write then rename, so a job killed mid-save leaves the old snapshot."""
        snapshot = {"MODEL_STATE": self.model.module.state_dict(), "EPOCHS_RUN": epoch}
        directory = os.path.dirname(os.path.abspath(self.snapshot_path))
        os.makedirs(directory, exist_ok=True)
        tmp = f"{self.snapshot_path}.tmp.{os.getpid()}"
        torch.save(snapshot, tmp)
        os.replace(tmp, self.snapshot_path)
        _dist.say(f"Epoch {epoch} | Training snapshot saved at {self.snapshot_path}")

    def train(self, max_epochs: int) -> None:
        start, samples = time.perf_counter(), 0
        for epoch in range(self.epochs_run, max_epochs):
            if not self._run_epoch(epoch):
                return
            samples += len(self.loader.sampler)  # type: ignore[arg-type]
            if self.rank == 0 and epoch % self.save_every == 0:
                self._save_snapshot(epoch)
        if self.d.device.type == "cuda":
            torch.cuda.synchronize(self.d.device)
        secs = time.perf_counter() - start
        if samples:
            _dist.say(
                f"[RANK {self.rank}] Throughput: {samples / secs:.1f} samples/s "
                f"({samples} samples in {secs:.3f} s)"
            )


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description="simple distributed training job (CPU DDP test case)")
    p.add_argument("total_epochs", type=int, help="Total epochs to train the model")
    p.add_argument("save_every", type=int, help="How often to save a snapshot")
    p.add_argument(
        "--batch_size", default=32, type=int, help="Input batch size on each device (default: 32)"
    )
    p.add_argument(
        "--checkpoint_path",
        default="snapshot.pt",
        type=str,
        help="Snapshot file to resume from and save to (default: snapshot.pt)",
    )
    p.add_argument(
        "--dataset_size",
        default=DATASET_SIZE,
        type=int,
        help=f"synthetic samples (default: {DATASET_SIZE})",
    )
    p.add_argument(
        "--on-signal",
        choices=["none", "checkpoint"],
        default="none",
        help="checkpoint: on SIGUSR1/SIGTERM save a snapshot and exit 0 (default: none, "
        "the signals' defaults end the rank)",
    )
    args = p.parse_args(argv)
    if args.save_every < 1:
        p.error("save_every must be >= 1")
    if args.batch_size < 1:
        p.error("--batch_size must be >= 1")
    return args


def main() -> int:
    args = parse_args()
    d = _dist.setup()
    dataset = make_dataset(args.dataset_size)
    loader = DataLoader(
        dataset,
        batch_size=args.batch_size,
        pin_memory=d.device.type == "cuda",
        shuffle=False,
        sampler=DistributedSampler(dataset, num_replicas=d.ident.world_size, rank=d.ident.rank),
    )
    trainer = Trainer(d, loader, args.save_every, args.checkpoint_path, args.on_signal)
    trainer.train(args.total_epochs)
    return 0


if __name__ == "__main__":
    _dist.run_main(main)
