"""Following a node's log file until its exit file says the step ended."""

from __future__ import annotations

from pathlib import Path

from ddptui.core.backends.slurm.log_follow import follow_log


async def test_follow_log_reads_to_the_exit_file(tmp_path: Path) -> None:
    log = tmp_path / "000-node1.log"
    log.write_bytes(b"one\ntwo\n")
    (tmp_path / "000-node1.log.exit").write_text("3\n")
    got: list[bytes] = []
    assert await follow_log(log, 4, got.append) == 3
    assert b"".join(got) == b"two\n"


async def test_follow_log_stops_when_the_writer_is_gone(tmp_path: Path) -> None:
    import ddptui.core.backends.slurm.log_follow as lf

    log = tmp_path / "missing.log"
    asked: list[int] = []

    async def ended() -> int | None:
        asked.append(1)
        return 143

    old = lf.CHECK_EVERY_S, lf.EXIT_GRACE_S
    lf.CHECK_EVERY_S, lf.EXIT_GRACE_S = 0.2, 0.2
    try:
        assert await follow_log(log, 0, lambda _c: None, ended) == 143
    finally:
        lf.CHECK_EVERY_S, lf.EXIT_GRACE_S = old
    assert asked
