"""trainer/ft_ddp.py's comm hook when a peer group dies while this one waits in the
gradients' all-reduce: torchft's own `_ManagedWork` takes the failure (the Manager is told,
the step will not commit); the hook must still hand DDP a finished future, where torchft's
DistributedDataParallel asserts and the surviving group crashed (seen on a loaded host: the
killed group's peer restarted too, and the Lighthouse formed a quorum without it).

The work that fails is a `dist._Work` whose wait raises gloo's error; the Manager is a fake
that hands out works and records the errors it is told. torch's DDP reducer (which calls the
hook in the backward) and torchft's `_ManagedWork` (which takes the failure) are real.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta

import pytest
import torch
import torch.distributed as dist
from torch import nn
from torch._C._distributed_c10d import _create_work_from_future
from torchft import DistributedDataParallel
from torchft.manager import _ManagedWork

from tests.cases import load_trainer

LOST = "[gloo/transport/tcp/pair.cc:537] Read error [10.0.0.2]:18135: Connection reset by peer"


class _PeerGone(dist._Work):
    """The all-reduce whose peer's socket was reset: its wait raises gloo's error."""

    def wait(self, timeout: timedelta | None = None) -> bool:
        raise RuntimeError(LOST)


class _Logger:
    def __init__(self) -> None:
        self.said: list[str] = []

    def exception(self, message: str) -> None:
        self.said.append(message)


class _Manager:
    """What the hook and `_ManagedWork` call on torchft's Manager, recorded."""

    def __init__(self, work: Callable[[torch.Tensor], dist._Work]) -> None:
        self.work = work
        self.errors: list[Exception] = []
        self._logger = _Logger()

    def allreduce(self, tensor: torch.Tensor) -> _ManagedWork:
        return _ManagedWork(self, self.work(tensor), tensor)  # type: ignore[arg-type]

    def report_error(self, e: Exception) -> None:
        self.errors.append(e)


def _grads(wrap: Callable[[nn.Module], nn.Module]) -> list[torch.Tensor]:
    """One backward through `wrap(model)` (a DDP: torch's real reducer calls the comm hook,
    torchft's DDP soaks up its own set-up in a dummy group); the gradients it leaves."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 3), nn.ReLU(), nn.Linear(3, 1))
    ddp = wrap(model)  # held through the backward: DDP's hooks find it by weak reference
    ddp(torch.randn(5, 4)).sum().backward()
    return [p.grad for p in model.parameters()]


def _local_grads() -> list[torch.Tensor]:
    """The same backward with no all-reduce at all."""
    return _grads(lambda model: model)


def _trainers_ddp(manager: _Manager) -> Callable[[nn.Module], nn.Module]:
    return lambda model: load_trainer("ft_ddp.py")._DDP(manager, model)


def test_a_peer_lost_mid_allreduce_leaves_the_local_grads_and_the_manager_the_error() -> None:
    manager = _Manager(lambda tensor: _PeerGone())
    grads = _grads(_trainers_ddp(manager))
    assert all(torch.equal(a, b) for a, b in zip(grads, _local_grads(), strict=True))
    assert [str(e) for e in manager.errors] == [LOST]  # so the step is not committed
    assert "got exception waiting for work" in manager._logger.said[0]


def test_torchfts_own_ddp_fails_the_backward_on_the_same_loss() -> None:
    """Why the trainer has its own hook (torchft 0.2.0): once this backward goes through,
    torchft handles the loss itself and the trainer's hook can go."""
    manager = _Manager(lambda tensor: _PeerGone())
    with pytest.raises(AssertionError):
        _grads(lambda model: DistributedDataParallel(manager, model))
    assert len(manager.errors) == 1


def test_a_good_allreduce_gives_ddp_the_reduced_grads() -> None:
    def doubled(tensor: torch.Tensor) -> dist._Work:
        done: torch.futures.Future[torch.Tensor] = torch.futures.Future()
        done.set_result(tensor * 2)
        return _create_work_from_future(done)

    manager = _Manager(doubled)
    grads = _grads(_trainers_ddp(manager))
    assert all(torch.equal(a, 2 * b) for a, b in zip(grads, _local_grads(), strict=True))
    assert manager.errors == []
