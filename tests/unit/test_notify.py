"""`--notify CMD`: which incidents are told, each once; the command's JSON, environment, process
group and timeout; its failure a warning notice; the job's keys checked like every other."""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import time
from pathlib import Path

import pytest

from ddptui.cli.jobargs import add_job_flags, spec_from_args
from ddptui.core.diagnose.stall_events import StallReport
from ddptui.core.events import Event, Notice, StopReason
from ddptui.core.job.profiles import ProfileError, ProfileSet, parse_profiles
from ddptui.core.job.spec import DEFAULT_NOTIFY_ON, NOTIFY_TRIGGERS, SpecError, make_spec
from ddptui.core.monitor.cycles import CycleMember, CycleReport, RestartCycle
from ddptui.core.preflight.gang import gang_spec
from ddptui.core.runs.run_dir import RunDir
from ddptui.core.runs.summary import RunSummary
from ddptui.core.session.notify import (
    ENDED,
    RESTART_STORM,
    TOLD_FILE,
    Notification,
    Notifier,
    NotifySelection,
    run_command,
)
from ddptui.core.story.incident import Incident, IncidentKind, IncidentReport
from ddptui.core.story.story import Story


def incident(number: int, kind: IncidentKind, began: float = 0.0, **more: object) -> Incident:
    return Incident(number, kind, f"{kind} happened", began=began, **more)  # type: ignore[arg-type]


def summary(
    ok: bool = False, stopped_by: StopReason = StopReason.FAILURE, detached: bool = False
) -> RunSummary:
    return RunSummary(
        ok, 4, (), "/runs/r1", "r1", "crash: rank 1\nmore", detached, stopped_by,
        headline="crash: rank 1",
    )  # fmt: skip


# -- the selection: what is told, and once -------------------------------------------------------


def test_the_defaults_are_the_run_ended_a_hang_a_restart_storm_and_a_wrong_number() -> None:
    assert DEFAULT_NOTIFY_ON == (ENDED, "hang", RESTART_STORM, "non_finite")
    chosen = NotifySelection(DEFAULT_NOTIFY_ON)
    told = [chosen.incident(incident(n, kind)) for n, kind in enumerate(IncidentKind, 1)]
    reasons = {reason for due in told for reason, _ in due}
    assert reasons == {"hang", "non_finite"}  # a crash alone is told by the run's end


def test_every_choice_is_the_run_end_a_storm_or_an_incident_kind() -> None:
    assert set(NOTIFY_TRIGGERS) == {ENDED, RESTART_STORM} | {str(k) for k in IncidentKind}


def test_an_incident_is_told_once_however_often_the_story_updates_it() -> None:
    chosen = NotifySelection(["hang"])
    hang = incident(2, IncidentKind.HANG)
    assert chosen.incident(hang) == [("hang", "incident:2")]
    for update in (
        Incident(2, IncidentKind.HANG, "no rank progresses", blamed=(1,), count=3),
        Incident(2, IncidentKind.HANG, "the stacks single out the suspect", over=True),
    ):
        assert chosen.incident(update) == []
    assert chosen.incident(incident(5, IncidentKind.HANG)) == [("hang", "incident:5")]


def test_an_incident_judged_later_as_a_picked_kind_is_told_then() -> None:
    chosen = NotifySelection(["out_of_memory"])
    assert chosen.incident(incident(1, IncidentKind.CRASH)) == []
    oom = incident(1, IncidentKind.OUT_OF_MEMORY)
    assert chosen.incident(oom) == [("out_of_memory", "incident:1")]
    assert chosen.incident(oom) == []


def test_what_an_earlier_session_of_the_run_told_is_not_told_again() -> None:
    chosen = NotifySelection(DEFAULT_NOTIFY_ON, told=["incident:1", ENDED])
    assert chosen.incident(incident(1, IncidentKind.HANG)) == []
    assert chosen.ended(summary()) is None
    assert chosen.incident(incident(2, IncidentKind.HANG)) == [("hang", "incident:2")]


def restart(number: int, began: float) -> Incident:
    return incident(number, IncidentKind.RESTARTED, began)


def test_a_restart_storm_is_three_rounds_within_ten_minutes_told_once() -> None:
    chosen = NotifySelection([RESTART_STORM])
    assert chosen.incident(restart(1, 0.0)) == []
    assert chosen.incident(restart(2, 100.0)) == []
    assert chosen.incident(restart(3, 500.0)) == [(RESTART_STORM, "restart_storm:3")]
    assert chosen.restarts_within(500.0) == 3
    assert chosen.incident(restart(3, 500.0)) == []  # the same round's update
    assert chosen.incident(restart(4, 900.0)) == []  # the same storm going on
    assert chosen.incident(restart(5, 1400.0)) == []
    # quiet for more than the window: the next three rounds are a new storm
    assert chosen.incident(restart(6, 2100.0)) == []
    assert chosen.incident(restart(7, 2200.0)) == []
    assert chosen.incident(restart(8, 2300.0)) == [(RESTART_STORM, "restart_storm:8")]


def test_restarts_spread_wider_than_the_window_are_no_storm() -> None:
    chosen = NotifySelection([RESTART_STORM, "restarted"])
    told = [chosen.incident(restart(n, n * 400.0)) for n in range(1, 6)]
    assert [reason for due in told for reason, _ in due] == ["restarted"] * 5


def test_the_run_end_is_told_when_it_ended_badly_not_by_the_operator_nor_a_detach() -> None:
    assert NotifySelection([ENDED]).ended(summary(ok=True, stopped_by=StopReason.FINISHED)) is None
    assert NotifySelection([ENDED]).ended(summary(stopped_by=StopReason.OPERATOR)) is None
    assert (
        NotifySelection([ENDED]).ended(summary(stopped_by=StopReason.DETACHED, detached=True))
        is None
    )
    assert NotifySelection(["hang"]).ended(summary()) is None
    for how in (StopReason.FAILURE, StopReason.FINISHED, StopReason.ERROR):
        chosen = NotifySelection([ENDED])
        assert chosen.ended(summary(stopped_by=how)) == ENDED
        assert chosen.ended(summary(stopped_by=how)) is None


# -- what the command gets -----------------------------------------------------------------------


def test_the_json_names_the_incident_the_run_and_how_to_look() -> None:
    crash = Incident(1, IncidentKind.CRASH, "RuntimeError: boom", blamed=(1,), hurt=(0,),
                     nodes=("node0",))  # fmt: skip
    note = Notification(ENDED, "r1", "/runs/r1", crash, crash.headline(), ended=summary())
    data = json.loads(json.dumps(note.to_dict()))
    assert data["notify"] == ENDED and data["run_id"] == "r1" and data["run_dir"] == "/runs/r1"
    assert data["headline"] == "crash: rank 1 on node0 — RuntimeError: boom"
    assert data["incident"]["kind"] == "crash" and data["incident"]["blamed"] == [1]
    assert data["incident"]["hurt"] == [0] and data["incident"]["nodes"] == ["node0"]
    assert data["look"] == {"console": "ddptui attach r1", "browser": "ddptui serve r1"}
    assert data["run"] == {"ok": False, "stopped_by": "failure", "detail": "crash: rank 1\nmore"}
    assert "restarts" not in data
    assert note.env() == {
        "DDPTUI_RUN_ID": "r1",
        "DDPTUI_RUN_DIR": "/runs/r1",
        "DDPTUI_NOTIFY": ENDED,
        "DDPTUI_HEADLINE": crash.headline(),
    }


def test_the_command_reads_its_stdin_and_environment(tmp_path: Path) -> None:
    out = tmp_path / "out"
    command = f'cat > {out}; echo "$DDPTUI_RUN_ID" >> {out}; echo noise'
    assert run_command(command, b'{"a": 1}\n', {"DDPTUI_RUN_ID": "r9"}) == ""
    assert out.read_text() == '{"a": 1}\nr9\n'


def test_a_failing_command_says_how_with_the_end_of_its_output() -> None:
    assert run_command("echo boom >&2; exit 3", b"", {}) == "exited 3: boom"
    said = run_command("no-such-notify-command-here", b"", {})
    assert said.startswith("exited 127: ") and "not found" in said
    assert run_command("kill -9 $$", b"", {}) == "was killed by signal 9"


def test_a_command_past_its_timeout_is_stopped_with_its_whole_group(tmp_path: Path) -> None:
    pid_file = tmp_path / "pid"
    command = f"sleep 60 & echo $! > {pid_file}; wait"
    said = run_command(command, b"", {}, timeout=1.0)
    assert said == "did not end within 1 s: stopped"
    child = int(pid_file.read_text())
    gone = False
    for _ in range(50):  # the kernel reaps the orphan through init
        try:
            with open(f"/proc/{child}/stat") as f:
                gone = f.read().rsplit(")", 1)[1].split()[0] == "Z"
        except FileNotFoundError:
            gone = True
        if gone:
            break
        time.sleep(0.1)
    assert gone, f"the command's child {child} outlived its timeout"


def test_the_command_runs_in_a_process_group_of_its_own(tmp_path: Path) -> None:
    out = tmp_path / "out"
    assert run_command(f"ps -o pgid= -p $$ > {out}", b"", {}) == ""
    assert int(out.read_text()) != os.getpgrp()


# -- the notifier the session holds --------------------------------------------------------------


class Said:
    def __init__(self) -> None:
        self.events: list[Event] = []

    def __call__(self, event: Event) -> None:
        self.events.append(event)

    def notices(self, level: str) -> list[str]:
        return [e.message for e in self.events if isinstance(e, Notice) and e.level == level]


def notifier(tmp_path: Path, command: str, said: Said, **kwargs: object) -> Notifier:
    run = RunDir.create("r1", root=tmp_path / "runs")
    return Notifier(command, DEFAULT_NOTIFY_ON, run, said, settle=0.0, **kwargs)  # type: ignore[arg-type]


def test_a_stall_said_again_and_again_is_told_once_and_the_run_end_once(tmp_path: Path) -> None:
    out = tmp_path / "told.jsonl"
    said = Said()
    story = Story()

    async def main() -> None:
        notes = notifier(tmp_path, f"cat >> {out}", said)
        stalls = [StallReport(10.0), StallReport(12.0, suspects=(1,)), StallReport(15.0, (1,))]
        for stall in stalls:
            for report in story.seen(stall):
                notes.seen(report)
        await asyncio.sleep(0.5)
        for report in story.ended():
            notes.seen(report)
        await notes.run_ended(summary(), story.lead())

    asyncio.run(main())
    told = [json.loads(line) for line in out.read_text().splitlines()]
    assert [t["notify"] for t in told] == ["hang", ENDED]
    assert told[0]["incident"]["number"] == told[1]["incident"]["number"] == 1
    assert said.notices("info") == [
        "notify: hang (incident 1) told",
        "notify: ended (incident 1) told",
    ]
    assert (tmp_path / "runs" / "r1" / TOLD_FILE).read_text().split() == ["incident:1", ENDED]


def test_an_incident_is_told_as_it_stands_once_it_settled(tmp_path: Path) -> None:
    out = tmp_path / "told.jsonl"
    said = Said()

    async def main() -> None:
        notes = notifier(tmp_path, f"cat >> {out}", said)
        notes.settle = 0.3
        notes.seen(IncidentReport(Incident(1, IncidentKind.HANG, "no rank progresses")))
        await asyncio.sleep(0.05)  # the stacks came: the suspect is blamed
        notes.seen(IncidentReport(Incident(1, IncidentKind.HANG, "suspect", blamed=(1,))))
        await asyncio.sleep(1.0)
        assert out.exists(), "told only at the run's end"
        await notes.run_ended(summary(ok=True, stopped_by=StopReason.FINISHED), None)

    asyncio.run(main())
    (told,) = [json.loads(line) for line in out.read_text().splitlines()]
    assert told["incident"]["blamed"] == [1] and told["incident"]["summary"] == "suspect"


def test_the_command_never_holds_up_the_event_loop(tmp_path: Path) -> None:
    """The command waits for a file only the event loop writes, after the incident: were it
    run on the loop, the file would come only after its timeout, and it would fail."""
    go, out = tmp_path / "go", tmp_path / "told.jsonl"
    said = Said()

    async def main() -> None:
        notes = notifier(tmp_path, f"while [ ! -e {go} ]; do sleep 0.05; done; cat >> {out}", said,
                         timeout=20.0)  # fmt: skip
        notes.seen(IncidentReport(incident(1, IncidentKind.HANG)))
        await asyncio.sleep(0.3)
        go.touch()
        await notes.run_ended(summary(ok=True, stopped_by=StopReason.FINISHED), None)

    asyncio.run(main())
    assert said.notices("warning") == []
    assert json.loads(out.read_text())["notify"] == "hang"


def test_a_failing_command_is_one_warning_and_the_run_goes_on(tmp_path: Path) -> None:
    said = Said()

    async def main() -> None:
        notes = notifier(tmp_path, "echo 'no route to the pager' >&2; exit 1", said)
        notes.seen(IncidentReport(incident(1, IncidentKind.HANG)))
        notes.seen(IncidentReport(incident(1, IncidentKind.HANG, count=2)))
        await notes.run_ended(summary(stopped_by=StopReason.OPERATOR), None)

    asyncio.run(main())
    assert said.notices("warning") == [
        "notify: hang (incident 1) not told: the command exited 1: no route to the pager"
    ]


def test_a_storm_from_the_story_restart_rounds(tmp_path: Path) -> None:
    out = tmp_path / "told.jsonl"
    said = Said()
    story = Story()
    member = CycleMember("node0", 0, (0, 1))

    async def main() -> None:
        notes = notifier(tmp_path, f"cat >> {out}", said)
        for index in range(1, 5):
            cycle = RestartCycle(index, 1000.0 + index, 2, (member,), "worker failure",
                                 "node0", 1, restarts=index, max_restarts=5)  # fmt: skip
            for report in story.seen(CycleReport(cycle)):
                notes.seen(report)
        await notes.run_ended(summary(ok=True, stopped_by=StopReason.FINISHED), story.lead())

    asyncio.run(main())
    (told,) = [json.loads(line) for line in out.read_text().splitlines()]
    assert told["notify"] == RESTART_STORM and told["restarts"] == 3
    assert told["incident"]["kind"] == "restarted" and told["incident"]["number"] == 3


def test_a_session_attached_again_does_not_tell_again(tmp_path: Path) -> None:
    out = tmp_path / "told.jsonl"
    said = Said()

    async def session() -> None:
        run = RunDir(tmp_path / "runs" / "r1")  # as attach opens it
        notes = Notifier(f"cat >> {out}", DEFAULT_NOTIFY_ON, run, said, settle=0.0)
        notes.seen(IncidentReport(incident(1, IncidentKind.HANG)))
        await notes.run_ended(summary(), None)

    RunDir.create("r1", root=tmp_path / "runs")
    asyncio.run(session())
    asyncio.run(session())
    assert len(out.read_text().splitlines()) == 2  # the hang and the end, the first time only


# -- the job's keys --------------------------------------------------------------------------------


def test_the_profile_keys_are_checked_like_every_other() -> None:
    good = parse_profiles(
        '[profiles.p]\nscript = "t.py"\nnotify = "mail -s ddptui ops"\n'
        'notify_on = ["stall", "ended", "out-of-memory"]\n',
        "ddptui.toml",
    )
    fields = ProfileSet([good]).resolve("p").fields
    spec = make_spec(**fields)
    assert spec.notify == "mail -s ddptui ops"
    assert spec.notify_on == ("hang", ENDED, "out_of_memory")
    for bad, says in (
        ('notify_on = ["hange"]', "notify_on: notify on hange: choose among ended,"),
        ("notify_on = 3", "notify_on: expected names"),
        ('notify = ""', "notify: empty command"),
        ('notfy = "x"', "notfy: unknown key (did you mean 'notify'?)"),
    ):
        with pytest.raises(ProfileError, match=r"profile 'p': ") as raised:
            parse_profiles(f'[profiles.p]\nscript = "t.py"\n{bad}\n', "ddptui.toml")
        assert says in str(raised.value)


def test_the_flags_make_the_job_and_a_bad_name_is_one_line() -> None:
    parser = argparse.ArgumentParser()
    add_job_flags(parser)
    args = parser.parse_args(["--notify", "cat >> alerts", "--notify-on", "crash,restart-storm"])
    spec = spec_from_args(args, "t.py", [], ProfileSet([]))
    assert spec.notify == "cat >> alerts" and spec.notify_on == ("crash", RESTART_STORM)
    assert spec_from_args(parser.parse_args([]), "t.py", [], ProfileSet([])).notify is None
    with pytest.raises(SpecError, match="notify on crahs: choose among"):
        spec_from_args(parser.parse_args(["--notify-on", "crahs"]), "t.py", [], ProfileSet([]))


def test_the_gang_test_of_preflight_tells_nobody() -> None:
    assert gang_spec(make_spec(script="t.py", notify="cat")).notify is None


def test_the_commands_run_one_at_a_time_in_the_order_they_were_due(tmp_path: Path) -> None:
    out = tmp_path / "order"
    said = Said()

    async def main() -> None:
        slow_first = (
            f'case "$DDPTUI_NOTIFY" in hang) sleep 0.5;; esac; echo "$DDPTUI_NOTIFY" >> {out}'
        )
        notes = notifier(tmp_path, slow_first, said)
        notes.seen(IncidentReport(incident(1, IncidentKind.HANG)))
        notes.seen(IncidentReport(incident(2, IncidentKind.NON_FINITE)))
        await notes.run_ended(summary(), None)

    asyncio.run(main())
    assert out.read_text().split() == ["hang", "non_finite", ENDED]
    assert said.notices("info") == [
        "notify: hang (incident 1) told",
        "notify: non_finite (incident 2) told",
        "notify: ended told",
    ]
