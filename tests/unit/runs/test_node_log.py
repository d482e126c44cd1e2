"""read_node_log: a node's log file read back with rank prefixes, the newest lines, the tail."""

from __future__ import annotations

from pathlib import Path

import pytest

from ddptui.core.runs import node_log
from ddptui.core.runs.node_log import read_node_log


def test_rank_lines_get_their_rank_and_agent_lines_stay_as_they_are(tmp_path: Path) -> None:
    path = tmp_path / "000-n0.log"
    path.write_bytes(
        b"I1126 agent starting\n"
        b"[ddptui:3:1]:[RANK 3] Epoch 0\n"
        b"[ddptui:0:0]:part[ddptui:3:1]:other\n"
        b"[ddptui:0:0]: two\n"
    )
    assert read_node_log(path) == [
        "I1126 agent starting",
        "[r3] [RANK 3] Epoch 0",
        "[r3] other",
        "[r0] part two",
    ]


def test_only_the_newest_lines_and_the_tail_of_a_big_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "000-n0.log"
    path.write_text("".join(f"line {i}\n" for i in range(100)))
    assert read_node_log(path, limit=3) == ["line 97", "line 98", "line 99"]
    monkeypatch.setattr(node_log, "TAIL_BYTES", 80)
    lines = read_node_log(path)
    assert lines[0].startswith("… (first ") and str(path) in lines[0]
    assert lines[-1] == "line 99" and len(lines) < 20


def test_a_missing_log_says_so(tmp_path: Path) -> None:
    assert read_node_log(tmp_path / "none.log")[0].startswith("(no log:")
