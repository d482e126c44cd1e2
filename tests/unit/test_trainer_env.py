"""Unit tests of trainer/_dist.py: identity from torchrun or Slurm variables,
Slurm's per-node task counts, size parsing, and one-write line output.

No process group is created and torch is not imported: these run in
milliseconds and pin the rules the scripts rely on under every launcher.
"""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from tests.cases import load_trainer

D = load_trainer("_dist.py")

TORCHRUN_ENV = {
    "RANK": "5",
    "WORLD_SIZE": "8",
    "LOCAL_RANK": "1",
    "LOCAL_WORLD_SIZE": "4",
    "GROUP_RANK": "1",
    "MASTER_ADDR": "10.0.0.1",
    "MASTER_PORT": "29500",
}


def test_torchrun_env() -> None:
    ident = D.resolve_identity(TORCHRUN_ENV)
    assert ident == D.Identity(
        rank=5,
        world_size=8,
        local_rank=1,
        local_world_size=4,
        group_rank=1,
        master_addr="10.0.0.1",
        master_port=29500,
        source="torchrun",
    )


def test_torchrun_wins_over_slurm() -> None:
    """Under `srun torchrun`, SLURM_PROCID is the node's task id, not the rank."""
    env = dict(
        TORCHRUN_ENV, SLURM_PROCID="1", SLURM_NTASKS="2", SLURM_LOCALID="0", SLURM_NODEID="1"
    )
    ident = D.resolve_identity(env)
    assert (ident.source, ident.rank, ident.world_size) == ("torchrun", 5, 8)


def test_hand_set_rank_and_world_size_mean_one_node() -> None:
    ident = D.resolve_identity({"RANK": "1", "WORLD_SIZE": "2"})
    assert (ident.local_rank, ident.local_world_size, ident.group_rank) == (1, 2, 0)
    assert (ident.master_addr, ident.master_port) == (None, None)


def test_slurm_env_full() -> None:
    env = {
        "SLURM_PROCID": "3",
        "SLURM_NTASKS": "4",
        "SLURM_LOCALID": "1",
        "SLURM_NODEID": "1",
        "SLURM_NTASKS_PER_NODE": "2",
        "MASTER_ADDR": "node1",
        "MASTER_PORT": "29400",
    }
    ident = D.resolve_identity(env)
    assert ident == D.Identity(
        rank=3,
        world_size=4,
        local_rank=1,
        local_world_size=2,
        group_rank=1,
        master_addr="node1",
        master_port=29400,
        source="slurm",
    )


def test_slurm_minimal_env_is_one_node() -> None:
    """What a hand-written srun-style launch sets: procid, ntasks, localid."""
    env = {
        "SLURM_PROCID": "1",
        "SLURM_NTASKS": "2",
        "SLURM_LOCALID": "1",
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": "1234",
    }
    ident = D.resolve_identity(env)
    assert (ident.rank, ident.world_size, ident.local_rank) == (1, 2, 1)
    assert (ident.group_rank, ident.local_world_size, ident.source) == (0, 2, "slurm")


def test_slurm_tasks_per_node_uneven_layout() -> None:
    env = {
        "SLURM_PROCID": "6",
        "SLURM_NTASKS": "7",
        "SLURM_LOCALID": "0",
        "SLURM_NODEID": "3",
        "SLURM_TASKS_PER_NODE": "2(x3),1",
    }
    assert D.resolve_identity(env).local_world_size == 1
    env.update(SLURM_PROCID="2", SLURM_NODEID="1")
    assert D.resolve_identity(env).local_world_size == 2


def test_slurm_ntasks_per_node_beats_tasks_per_node() -> None:
    env = {
        "SLURM_PROCID": "0",
        "SLURM_NTASKS": "4",
        "SLURM_LOCALID": "0",
        "SLURM_NODEID": "0",
        "SLURM_NTASKS_PER_NODE": "2",
        "SLURM_TASKS_PER_NODE": "4",
    }
    assert D.resolve_identity(env).local_world_size == 2


def test_slurm_step_layout_beats_job_layout() -> None:
    """Inside srun the step's layout is the one the tasks run in."""
    env = {
        "SLURM_PROCID": "0",
        "SLURM_NTASKS": "2",
        "SLURM_LOCALID": "0",
        "SLURM_NODEID": "0",
        "SLURM_STEP_TASKS_PER_NODE": "1(x2)",
        "SLURM_TASKS_PER_NODE": "4(x2)",
    }
    assert D.resolve_identity(env).local_world_size == 1


def test_slurm_multi_node_without_layout_is_an_error() -> None:
    env = {
        "SLURM_PROCID": "0",
        "SLURM_NTASKS": "4",
        "SLURM_LOCALID": "0",
        "SLURM_NODEID": "0",
        "SLURM_NNODES": "2",
    }
    with pytest.raises(D.IdentityError, match="tasks per node"):
        D.resolve_identity(env)


def test_missing_both_is_a_clear_error() -> None:
    with pytest.raises(D.IdentityError) as info:
        D.resolve_identity({"PATH": "/usr/bin", "MASTER_ADDR": "x"})
    message = str(info.value)
    for hint in ("torchrun", "srun", "SLURM_PROCID", "MASTER_ADDR"):
        assert hint in message


def test_empty_values_count_as_missing() -> None:
    with pytest.raises(D.IdentityError, match="no distributed identity"):
        D.resolve_identity({"RANK": "", "SLURM_PROCID": " "})


@pytest.mark.parametrize(
    ("env", "pattern"),
    [
        ({"RANK": "0"}, "WORLD_SIZE is not"),
        ({"SLURM_PROCID": "0"}, "SLURM_NTASKS is not"),
        ({"RANK": "zero", "WORLD_SIZE": "2"}, "RANK='zero'"),
        ({"RANK": "2", "WORLD_SIZE": "2"}, "outside world size"),
        ({"RANK": "0", "WORLD_SIZE": "0"}, "world size must be"),
        (
            {"RANK": "0", "WORLD_SIZE": "4", "LOCAL_RANK": "2", "LOCAL_WORLD_SIZE": "2"},
            "local rank 2 is outside",
        ),
        ({"RANK": "0", "WORLD_SIZE": "2", "LOCAL_WORLD_SIZE": "3"}, "local world size 3"),
        ({"RANK": "0", "WORLD_SIZE": "2", "MASTER_PORT": "http"}, "MASTER_PORT='http'"),
        (
            {"SLURM_PROCID": "0", "SLURM_NTASKS": "2", "SLURM_TASKS_PER_NODE": "2(xx)"},
            "cannot parse",
        ),
    ],
)
def test_bad_values_name_the_problem(env: dict[str, str], pattern: str) -> None:
    with pytest.raises(D.IdentityError, match=pattern):
        D.resolve_identity(env)


def test_defaults_to_process_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in [*D.EXPORTED_VARS, "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID"]:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setenv("WORLD_SIZE", "1")
    assert D.resolve_identity().world_size == 1


@pytest.mark.parametrize(
    ("value", "expected"),
    [("4", [4]), ("2(x3),1", [2, 2, 2, 1]), ("1(x2)", [1, 1]), ("3, 5", [3, 5])],
)
def test_parse_tasks_per_node(value: str, expected: list[int]) -> None:
    assert D.parse_tasks_per_node(value) == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("1048576", 1 << 20),
        ("64K", 64 << 10),
        ("1M", 1 << 20),
        ("1MiB", 1 << 20),
        ("1mb", 1 << 20),
        ("1G", 1 << 30),
        ("0.5M", 1 << 19),
    ],
)
def test_parse_bytes(text: str, expected: int) -> None:
    assert D.parse_bytes(text) == expected


@pytest.mark.parametrize("text", ["", "lots", "-1M", "0"])
def test_parse_bytes_rejects(text: str) -> None:
    import argparse

    with pytest.raises(argparse.ArgumentTypeError):
        D.parse_bytes(text)


@pytest.mark.parametrize(
    ("addr", "loopback"),
    [
        ("127.0.0.1", True),
        ("127.0.1.1", True),
        ("::1", True),
        ("localhost", True),
        ("10.0.0.1", False),
        ("node1", False),
        (None, False),
    ],
)
def test_is_loopback(addr: str | None, loopback: bool) -> None:
    assert D._is_loopback(addr) is loopback


def test_say_is_one_write_per_line(monkeypatch: pytest.MonkeyPatch) -> None:
    """Ranks share one pipe; a line split over two writes can interleave."""
    calls: list[tuple[int, bytes]] = []

    def fake_write(fd: int, data: bytes) -> int:
        calls.append((fd, bytes(data)))
        return len(data)

    monkeypatch.setattr(D.os, "write", fake_write)
    D.say("envcheck rank=0 allreduce=ok sum=3")
    D.say("already terminated\n")
    assert calls == [(1, b"envcheck rank=0 allreduce=ok sum=3\n"), (1, b"already terminated\n")]


def test_say_finishes_a_partial_write(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[bytes] = []

    def short_write(fd: int, data: bytes) -> int:
        calls.append(bytes(data))
        return min(len(data), 4)

    monkeypatch.setattr(D.os, "write", short_write)
    D.say("abcdefghij")
    assert b"".join(c[:4] for c in calls) == b"abcdefghij\n"


def _raised(message: str) -> BaseException:
    try:
        raise ValueError(message)
    except ValueError as exc:
        return exc


def test_the_error_file_for_torchrun_is_whole(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "error.json"
    monkeypatch.setenv("TORCHELASTIC_ERROR_FILE", str(path))
    D._record_for_torchrun(_raised("rank 3 broke"))
    message = json.loads(path.read_text())["message"]  # what torchrun's agent reads
    assert message["message"] == "ValueError: rank 3 broke"
    assert "Traceback" in message["extraInfo"]["py_callstack"]
    assert list(tmp_path.iterdir()) == [path]


def test_an_error_file_cut_short_never_takes_the_name(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A rank stopped while writing leaves no half file where torchrun looks."""
    path = tmp_path / "error.json"
    monkeypatch.setenv("TORCHELASTIC_ERROR_FILE", str(path))

    def cut_short(data: object, fp: io.TextIOBase) -> None:
        fp.write('{"message": ')
        raise OSError("no space left on device")

    monkeypatch.setattr(D.json, "dump", cut_short)
    D._record_for_torchrun(_raised("rank 3 broke"))
    assert list(tmp_path.iterdir()) == []
