"""VGG-11 on CIFAR-10 under DDP, with torch alone (no torchvision, no numpy on the nodes).

Reads CIFAR-10's python batches (data_batch_1..5, test_batch) from --data DIR; without them
it trains on generated CIFAR-shaped data and says so on its first line. Launch it with
torchrun, or with srun alone (--launch srun: the rank is SLURM_PROCID, the world
SLURM_NTASKS, and MASTER_ADDR/MASTER_PORT come from the environment). NCCL on GPUs, gloo on
CPU. Output (one line per rank per epoch)::

    cifar10-vgg data=generated train=N test=M (no CIFAR-10 batches in DIR)
    rank R epoch=E/EPOCHS loss=L train_acc=A test_acc=T samples/s=S
    rank R finished
"""

from __future__ import annotations

import argparse
import codecs
import os
import pickle
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _dist  # noqa: E402
import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.nn as nn  # noqa: E402
from torch.nn.parallel import DistributedDataParallel as DDP  # noqa: E402
from torch.utils.data import DataLoader, TensorDataset  # noqa: E402
from torch.utils.data.distributed import DistributedSampler  # noqa: E402

VGG11 = (64, "M", 128, "M", 256, 256, "M", 512, 512, "M", 512, 512, "M")
MEAN = (0.4914, 0.4822, 0.4465)
STD = (0.2470, 0.2435, 0.2616)
TRAIN_FILES = tuple(f"data_batch_{i}" for i in range(1, 6))
TORCHRUN_VARS = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK")


class VGG(nn.Module):
    """VGG-11 with batch norm, sized for 32x32 inputs (one 512-wide linear head)."""

    def __init__(self, layers: tuple[int | str, ...] = VGG11, classes: int = 10) -> None:
        super().__init__()
        blocks: list[nn.Module] = []
        channels = 3
        for layer in layers:
            if layer == "M":
                blocks.append(nn.MaxPool2d(2))
            else:
                assert isinstance(layer, int)
                blocks += [
                    nn.Conv2d(channels, layer, 3, padding=1),
                    nn.BatchNorm2d(layer),
                    nn.ReLU(inplace=True),
                ]
                channels = layer
        self.features = nn.Sequential(*blocks)
        self.classifier = nn.Linear(channels, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.classifier(torch.flatten(self.features(x), 1))
        return out


# -- CIFAR-10's python batches without numpy --------------------------------------------------


class _Array:
    """Stands in for numpy.ndarray while unpickling: keeps the shape and the raw bytes."""

    def __init__(self, *_: Any) -> None:
        self.shape: tuple[int, ...] = ()
        self.raw = b""

    def __setstate__(self, state: tuple[Any, ...]) -> None:
        _, self.shape, _, _, raw = state  # (version, shape, dtype, fortran order, data)
        self.raw = raw.encode("latin1") if isinstance(raw, str) else bytes(raw)


class _Dtype:
    def __init__(self, *_: Any) -> None:
        pass

    def __setstate__(self, state: Any) -> None:
        pass


def _reconstruct(*_: Any) -> _Array:
    return _Array()


class _BatchUnpickler(pickle.Unpickler):
    """Only what a CIFAR batch holds: numpy's array reconstruction, nothing else."""

    NUMPY = {"_reconstruct": _reconstruct, "ndarray": _Array, "dtype": _Dtype}

    def find_class(self, module: str, name: str) -> Any:
        if module.split(".")[0] == "numpy" and name in self.NUMPY:
            return self.NUMPY[name]
        if (module, name) == ("_codecs", "encode"):  # bytes, as Python 3 pickles them
            return codecs.encode
        raise pickle.UnpicklingError(f"unexpected {module}.{name} in a CIFAR-10 batch")


def read_batch(path: Path) -> tuple[torch.Tensor, torch.Tensor]:
    """One python batch: uint8 images (N, 3, 32, 32) and int64 labels (N,)."""
    with path.open("rb") as f:
        batch = _BatchUnpickler(f, encoding="bytes").load()
    batch = {k.decode() if isinstance(k, bytes) else k: v for k, v in batch.items()}
    data = batch["data"]
    images = torch.frombuffer(bytearray(data.raw), dtype=torch.uint8).view(-1, 3, 32, 32)
    return images, torch.tensor(list(batch["labels"]), dtype=torch.int64)


def normalize(images: torch.Tensor) -> torch.Tensor:
    x = images.float().div_(255)
    mean = torch.tensor(MEAN).view(1, 3, 1, 1)
    std = torch.tensor(STD).view(1, 3, 1, 1)
    return (x - mean) / std


def load_data(args: argparse.Namespace) -> tuple[TensorDataset, TensorDataset, str]:
    """The real batches if all of them are in --data; otherwise a generated set, seeded
    the same on every rank (each rank then takes its own shard), with a learnable signal:
    each class brightens its own stripe of the image."""
    root = Path(args.data) if args.data else None
    names = [*TRAIN_FILES, "test_batch"]
    if root is not None and all((root / n).is_file() for n in names):
        parts = [read_batch(root / n) for n in TRAIN_FILES]
        train_x = torch.cat([p[0] for p in parts])
        train_y = torch.cat([p[1] for p in parts])
        test_x, test_y = read_batch(root / "test_batch")
        if args.samples:
            train_x, train_y = train_x[: args.samples], train_y[: args.samples]
            test_x, test_y = test_x[: args.samples // 4], test_y[: args.samples // 4]
        how = f"data=cifar10 dir={root}"
    else:
        gen = torch.Generator().manual_seed(0)
        total = args.samples or 50000
        count = total + max(total // 4, 1)
        labels = torch.randint(0, 10, (count,), generator=gen)
        images = torch.randint(0, 160, (count, 3, 32, 32), generator=gen, dtype=torch.uint8)
        for cls in range(10):
            rows = slice(cls * 3, cls * 3 + 3)
            images[labels == cls, :, rows, :] += 90
        train_x, train_y = images[:total], labels[:total]
        test_x, test_y = images[total:], labels[total:]
        where = f"no CIFAR-10 batches in {root}" if root else "no --data"
        how = f"data=generated ({where})"
    train = TensorDataset(normalize(train_x), train_y)
    test = TensorDataset(normalize(test_x), test_y)
    return train, test, f"{how} train={len(train)} test={len(test)}"


# -- training -------------------------------------------------------------------------------------


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data", help="directory holding CIFAR-10's python batches")
    p.add_argument("--epochs", type=int, default=1, help="epochs (default: 1)")
    p.add_argument("--batch-size", type=int, default=128, help="per rank (default: 128)")
    p.add_argument("--lr", type=float, default=0.05, help="SGD learning rate (default: 0.05)")
    p.add_argument(
        "--samples", type=int, default=0, help="use only this many training samples (0: all)"
    )
    p.add_argument(
        "--launch",
        choices=["auto", "torchrun", "srun"],
        default="auto",
        help="where the rank comes from: torchrun's RANK..., or srun's SLURM_PROCID/"
        "SLURM_NTASKS (auto: torchrun's if set)",
    )
    args = p.parse_args(argv)
    if args.epochs < 1 or args.batch_size < 1 or args.lr <= 0 or args.samples < 0:
        p.error("--epochs and --batch-size must be >= 1, --lr > 0, --samples >= 0")
    return args


def identity(launch: str) -> _dist.Identity:
    env = dict(os.environ)
    if launch == "srun":
        for name in TORCHRUN_VARS:
            env.pop(name, None)
        if "SLURM_PROCID" not in env:
            raise _dist.IdentityError("--launch srun: SLURM_PROCID is not set (run under srun)")
    elif launch == "torchrun" and "RANK" not in env:
        raise _dist.IdentityError("--launch torchrun: RANK is not set (run under torchrun)")
    return _dist.resolve_identity(env)


def evaluate(model: nn.Module, loader: DataLoader, device: torch.device) -> tuple[int, int]:
    model.eval()
    correct = total = 0
    with torch.no_grad():
        for x, y in loader:
            pred = model(x.to(device, non_blocking=True)).argmax(1)
            correct += int((pred == y.to(device)).sum())
            total += len(y)
    model.train()
    return correct, total


def main() -> int:
    args = parse_args()
    ident = identity(args.launch)
    train, test, described = load_data(args)
    if ident.rank == 0:
        _dist.say(f"cifar10-vgg {described}")
    d = _dist.setup(ident=ident)
    rank = ident.rank
    if d.device.type == "cpu":  # ranks of one node share its cores
        torch.set_num_threads(max(1, (os.cpu_count() or 1) // ident.local_world_size))
    torch.manual_seed(0)
    model = VGG().to(d.device)
    ddp = DDP(model, device_ids=[d.device.index] if d.device.type == "cuda" else None)
    optimizer = torch.optim.SGD(ddp.parameters(), lr=args.lr, momentum=0.9, weight_decay=5e-4)
    loss_fn = nn.CrossEntropyLoss()
    sampler = DistributedSampler(train, ident.world_size, rank, shuffle=True, seed=0)
    pin = d.device.type == "cuda"
    loader = DataLoader(train, batch_size=args.batch_size, sampler=sampler, pin_memory=pin)
    test_loader = DataLoader(
        test,
        batch_size=args.batch_size,
        sampler=DistributedSampler(test, ident.world_size, rank, shuffle=False),
        pin_memory=pin,
    )
    _dist.say(f"rank {rank} start: device={d.device} backend={d.backend} world={ident.world_size}")
    for epoch in range(1, args.epochs + 1):
        sampler.set_epoch(epoch)
        seen = correct = 0
        loss_sum = torch.zeros((), device=d.device)
        start = time.perf_counter()
        for x, y in loader:
            x, y = x.to(d.device, non_blocking=True), y.to(d.device, non_blocking=True)
            optimizer.zero_grad(set_to_none=True)
            out = ddp(x)
            loss = loss_fn(out, y)
            loss.backward()
            optimizer.step()
            loss_sum += loss.detach() * len(y)
            correct += int((out.argmax(1) == y).sum())
            seen += len(y)
        if d.device.type == "cuda":
            torch.cuda.synchronize(d.device)
        secs = time.perf_counter() - start
        test_correct, test_total = evaluate(ddp, test_loader, d.device)
        _dist.say(
            f"rank {rank} epoch={epoch}/{args.epochs} loss={float(loss_sum) / max(seen, 1):.4f} "
            f"train_acc={correct / max(seen, 1):.4f} "
            f"test_acc={test_correct / max(test_total, 1):.4f} "
            f"samples/s={seen / secs:.1f}"
        )
    dist.barrier()
    _dist.say(f"rank {rank} finished")
    return 0


if __name__ == "__main__":
    _dist.run_main(main)
