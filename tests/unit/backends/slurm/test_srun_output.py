"""srun's output demultiplexed per node and rank, its task lines and Slurm's complaints."""

from __future__ import annotations

import pytest

from ddptui.core.backends.errors import NodeLost
from ddptui.core.backends.slurm.srun_output import (
    LostWatch,
    SrunDemux,
    expand_tasks,
    slurm_complaint,
    task_exit,
)
from ddptui.core.diagnose.failures import culprit_cell
from ddptui.core.events import RankState
from ddptui.core.monitor.monitor import Monitor


def test_demux_sends_each_rank_to_its_node_in_the_prefix_format() -> None:
    demux = SrunDemux(["node1", "node2"], 2)
    out = demux.feed(b"0: hello\n 3: from three\n2: partial")
    assert out == {0: b"[ddptui:0:0]:hello\n", 1: b"[ddptui:3:1]:from three\n"}
    out = demux.feed(
        b" line\nsrun: error: node2: tasks 2-3: Terminated\nsrun: Force Terminated StepId=6.0\n"
    )
    assert out[1] == (
        b"[ddptui:2:0]:partial line\n"
        b"[ddptui:2:0]:ddptui: worker ended: exit -15, stopped by the launcher"
        b" | srun: error: node2: task 2: Terminated\n"
        b"[ddptui:3:1]:ddptui: worker ended: exit -15, stopped by the launcher"
        b" | srun: error: node2: task 3: Terminated\n"
    )
    assert out[0] == b"srun: Force Terminated StepId=6.0\n"
    assert demux.feed(b"1: no newline yet") == {}
    assert demux.flush() == {0: b"[ddptui:1:1]:no newline yet"}


def test_srun_task_lines() -> None:
    assert expand_tasks("0-1,3") == [0, 1, 3]
    assert task_exit("srun: error: node2: task 3: Exited with exit code 1") == (1, True)
    assert task_exit("srun: error: node1: task 0: Terminated") == (-15, False)
    assert task_exit("srun: error: node1: task 0: Killed") == (-9, False)
    assert task_exit("srun: error: node1: task 0: Segmentation fault (core dumped)") == (-11, True)
    assert task_exit("srun: error: Unable to create step for job 5: More processors") is None


def test_slurms_complaints_are_found() -> None:
    assert slurm_complaint(["x", "srun: unrecognized option '--container-image=a'", "y"]) == (
        "srun: unrecognized option '--container-image=a'"
    )
    assert (
        slurm_complaint(
            [
                "srun: error: Unable to create step for job 5: More processors "
                "requested than permitted"
            ]
        )
        is not None
    )
    assert slurm_complaint(["srun: error: node2: task 0: Exited with exit code 1"]) is None


def test_monitor_learns_exit_codes_from_srun_direct_lines() -> None:
    demux = SrunDemux(["node1", "node2"], 2)
    m = Monitor(["node1", "node2"], 2)
    raw = (
        b"0: ok\n1: ok\n2: ok\n3: Traceback (most recent call last):\n"
        b'3:   File "x.py", line 1, in <module>\n'
        b"2: a stdout line between the traceback's lines\n"
        b"3: RuntimeError: boom\n"
        b"srun: error: node1: tasks 0-1: Terminated\n"
        b"srun: error: node2: task 3: Exited with exit code 1\n"
        b"srun: error: node2: task 2: Terminated\n"
    )
    for index, data in demux.feed(raw).items():
        m.feed(["node1", "node2"][index], data)
    cells = {c.rank: c for c in m.board.all_cells()}
    assert (cells[3].state, cells[3].exit_code, cells[3].error) == (
        RankState.FAILED,
        1,
        "RuntimeError: boom",
    )
    assert cells[3].traceback[0].startswith("Traceback") and len(cells[3].traceback) == 3
    assert (cells[0].state, cells[0].exit_code) == (RankState.FAILED, -15)
    assert (cells[2].node, cells[2].exit_code) == ("node2", -15)
    assert culprit_cell(m.board) is cells[3]


# -- following a log the job writes ---------------------------------------------------------------


def test_a_task_ended_by_an_operators_stop_signal_keeps_its_number() -> None:
    """srun names a signal as strsignal does: USR1/USR2/QUIT (`--stop-signal`) are -10/-12/-3,
    as torchrun reports a worker they ended, not a plain 1."""
    assert task_exit("srun: error: node1: task 0: User defined signal 1") == (-10, True)
    assert task_exit("srun: error: node2: task 1: User defined signal 2") == (-12, True)
    assert task_exit("srun: error: node2: task 1: Quit (core dumped)") == (-3, True)


def test_the_node_slurm_lost_is_told_once_by_whichever_log_says_it_first() -> None:
    """srun's word that Slurm lost node3 lands in every node's log: node1's, read first,
    tells it (after handing the line on); node1's own following goes on past it; node3's
    own log, told or not, ends node3's following."""
    told: set[str] = set()
    shown: list[bytes] = []
    first = LostWatch("node1", shown.append, told)
    first.feed(b"step 4\nsrun: error: Node fail")
    with pytest.raises(NodeLost) as lost:
        first.feed(b"ure on node3\nsrun: error: node1: task 0: Killed\n")
    assert (lost.value.node, str(lost.value), lost.value.said) == (
        "node3",
        "Slurm lost the node (srun: error: Node failure on node3)",
        "srun: error: Node failure on node3",
    )
    assert b"".join(shown).endswith(b"task 0: Killed\n")  # every byte handed on first
    LostWatch("node2", shown.append, told).feed(b"srun: error: Node failure on node3\n")
    with pytest.raises(NodeLost):
        LostWatch("node3", shown.append, told).feed(b"srun: error: Node failure on node3\n")
    again = LostWatch("node2", shown.append, told)
    with pytest.raises(NodeLost) as lost:  # a hostlist: each node in it
        again.feed(b"srun: error: Node failure on node[3-4]\n")
    assert lost.value.node == "node4"
    # a line that only quotes the words is no node's loss
    LostWatch("node1", shown.append, set()).feed(b"print('Node failure on node9')\n")
