"""torchft's Lighthouse, read from its own log (captures of the real torchft_lighthouse, see
tests/data/torchft/capture.sh): the quorums, the changes of membership and each group's lag."""

from __future__ import annotations

from ddptui.core.monitor.lighthouse import LighthouseWatch, ReplicaStep, read_quorum, replica_name
from tests.cases import DATA

TWO_GROUPS = DATA / "torchft" / "lighthouse_two_groups.log"


def test_a_quorum_line_reads_as_its_id_and_members() -> None:
    line = next(line for line in TWO_GROUPS.read_text().splitlines() if "Quorum! " in line)
    read = read_quorum(line)
    assert read is not None
    quorum_id, members = read
    assert quorum_id == 1
    assert members == (ReplicaStep("ft_1", 0, 1, 0, "dd5a0f71-6010-4104-a456-ae3265e54526"),)
    assert read_quorum("Quorum status: Fast quorum found! [2/2 participants healthy]") is None
    assert replica_name("ft_0:7358e2ca-36ff-4325-932d-84fa8f8ab8b5") == "ft_0"


def test_two_groups_joining_are_two_changes_then_none_while_they_step() -> None:
    watch = LighthouseWatch()
    changes = [
        change
        for n, line in enumerate(TWO_GROUPS.read_text().splitlines())
        if (change := watch.feed(line, float(n))) is not None
    ]
    assert [(c.quorum_id, c.members, c.joined, c.left) for c in changes] == [
        (1, ("ft_1",), ("ft_1",), ()),
        (2, ("ft_0", "ft_1"), ("ft_0",), ()),
    ]
    assert watch.quorum_id == 2
    assert {m.replica for m in watch.members} == {"ft_0", "ft_1"}
    assert watch.lag() == {"ft_0": 0, "ft_1": 0}  # they step together


def test_a_group_that_left_and_one_behind() -> None:
    watch = LighthouseWatch()
    member = (
        'QuorumMember {{ replica_id: "{}:u", address: "http://h:1", store_address: "h:2", '
        'step: {}, world_size: 1, shrink_only: false, commit_failures: {}, data: "" }}'
    )

    def line(quorum_id: int, *members: tuple[str, int, int]) -> str:
        inner = ", ".join(member.format(*m) for m in members)
        return (
            f"- Quorum! Quorum {{ quorum_id: {quorum_id}, participants: [{inner}], created: None }}"
        )

    assert watch.feed(line(1, ("ft_0", 10, 0), ("ft_1", 10, 0)), 1.0) is not None
    left = watch.feed(line(2, ("ft_0", 11, 0)), 2.0)
    assert left is not None and (left.left, left.joined) == (("ft_1",), ())
    back = watch.feed(line(3, ("ft_0", 14, 0), ("ft_1", 3, 1)), 3.0)
    assert back is not None and back.joined == ("ft_1",)
    assert watch.lag() == {"ft_0": 0, "ft_1": 11}
    assert watch.members[1].commit_failures == 1


def test_a_replica_group_killed_and_started_again_leaves_then_heals_behind() -> None:
    """The capture: group 1's torchrun killed once both stepped, started again 6 s later;
    it heals from group 0 (its log: `healing is required step=0, max_step=42`)."""
    watch = LighthouseWatch()
    story = []
    log = DATA / "torchft" / "kill_heal" / "lighthouse.log"
    for n, line in enumerate(log.read_text().splitlines()):
        change = watch.feed(line, float(n))
        if change is not None:
            story.append((change.quorum_id, change.joined, change.left, watch.lag()))
    assert [s[:3] for s in story] == [
        (1, ("ft_0",), ()),
        (2, ("ft_1",), ()),
        (3, (), ("ft_1",)),
        (4, ("ft_1",), ()),
    ]
    back = story[-1][3]
    healed = DATA / "torchft" / "kill_heal" / "group1_again.log"
    assert f"max_step={back['ft_1']}," in healed.read_text()  # as far behind as it healed
