"""The settings check: ranks' reports compared, known-bad NCCL named, said once."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from ddptui.core.diagnose.settings import (
    KNOWN_BAD_NCCL,
    SETTINGS_KEY,
    RankSettings,
    SettingDifference,
    SettingsReport,
    SettingsWatch,
    advisory_for,
    bad_nccl,
    compare,
    rank_ranges,
    release,
)
from ddptui.core.events import Event
from ddptui.core.job.secret_env import SECRET_WORDS
from ddptui.core.node import rank_settings
from ddptui.core.runs.event_log import decode_event
from ddptui.core.story.incident import IncidentKind
from ddptui.core.story.story import Story


def line(rank: int, local: int, env: dict[str, str] | None = None, **fields: Any) -> dict:
    """A report line as the worker hook writes it."""
    out = {SETTINGS_KEY: 1, "rank": rank, "local_rank": local, "host": "h", "pid": 1}
    out.update({"stage": "start", "torch": "2.13.0+cpu", "cuda": None, "nccl": None})
    out.update({"driver": None, "env": env or {}, "hidden": []})
    out.update(fields)
    return out


def two_nodes(odd_env: dict[str, str], env: dict[str, str] | None = None) -> list[RankSettings]:
    """node1 holds ranks 0, 1 with `env`; node2 ranks 2, 3 with `odd_env`."""
    out = []
    for rank in range(4):
        node, seen = ("node1", env or {}) if rank < 2 else ("node2", odd_env)
        found = RankSettings.from_report(node, line(rank, rank % 2, seen))
        assert found is not None
        out.append(found)
    return out


def test_a_variable_one_node_sets_is_named_with_its_node_and_ranks() -> None:
    (diff,) = compare(two_nodes({"NCCL_IB_DISABLE": "1"}))
    assert diff.name == "NCCL_IB_DISABLE"
    assert diff.ranks == (2, 3) and diff.nodes == ("node2",)
    assert diff.reference.value is None and diff.reference.ranks == (0, 1)
    assert diff.describe() == "NCCL_IB_DISABLE=1 on node2 (ranks 2, 3), unset elsewhere"
    assert diff.describe(there=True) == "NCCL_IB_DISABLE=1 there, unset elsewhere"


def test_the_same_settings_everywhere_are_no_difference() -> None:
    env = {"NCCL_SOCKET_IFNAME": "eth0", "TORCH_NCCL_ASYNC_ERROR_HANDLING": "3"}
    assert compare(two_nodes(dict(env), dict(env))) == ()


def test_the_value_most_ranks_share_is_the_reference() -> None:
    reports = two_nodes({"NCCL_ALGO": "Ring"}, {"NCCL_ALGO": "Ring"})
    reports[3] = RankSettings.from_report("node2", line(3, 1, {"NCCL_ALGO": "Tree"}))  # type: ignore[assignment]
    (diff,) = compare(reports)
    assert diff.reference.value == "Ring" and diff.ranks == (3,)
    assert diff.describe() == "NCCL_ALGO=Tree on node2 (rank 3), Ring elsewhere"


def test_versions_differ_but_an_unknown_one_is_no_difference() -> None:
    reports = [
        RankSettings("node1", 0, torch="2.13.0", nccl="2.21.5"),
        RankSettings("node1", 1, torch="2.13.0", nccl="2.21.5"),
        RankSettings("node2", 2, torch="2.12.1", nccl=None),
    ]
    (diff,) = compare(reports)
    assert diff.name == "torch" and diff.ranks == (2,)
    assert diff.describe() == "torch 2.12.1 on node2 (rank 2), 2.13.0 elsewhere"


def test_the_process_group_timeout_is_compared_once_known() -> None:
    one = RankSettings.from_report("node1", line(0, 0, stage="init", pg_timeout_s=1800.0))
    two = RankSettings.from_report("node2", line(1, 0, stage="init", pg_timeout_s=600.0))
    assert one is not None and two is not None
    (diff,) = compare([one, two])
    assert diff.name == "process group timeout"
    assert diff.describe() == "process group timeout 600 s on node2 (rank 1), 1800 s elsewhere"


def test_a_secret_variable_is_compared_by_presence_never_by_value() -> None:
    report = line(0, 0, {"NCCL_NET_TOKEN": "s3cr3t", "NCCL_DEBUG": "WARN"}, hidden=["GLOO_KEY"])
    found = RankSettings.from_report("node1", report, secret=("NCCL_DEBUG",))
    assert found is not None
    assert found.env == {"GLOO_KEY": "***", "NCCL_DEBUG": "***", "NCCL_NET_TOKEN": "***"}
    assert "s3cr3t" not in json.dumps(SettingsReport(1, 1, common={**found.env}).to_dict())


def test_the_node_and_the_console_call_the_same_names_secret() -> None:
    assert rank_settings.SECRET_WORDS == SECRET_WORDS


def test_the_node_report_leaves_out_secret_values_and_other_variables() -> None:
    environ = {
        "NCCL_IB_DISABLE": "1",
        "NCCL_API_KEY": "abc",
        "TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC": "600",
        "TORCH_DISTRIBUTED_DEBUG": "DETAIL",
        "GLOO_SOCKET_IFNAME": "lo",
        "HF_TOKEN": "xyz",
        "PATH": "/bin",
        "TORCH_NCCL_DEBUG_INFO_TEMP_FILE": "/runs/r1/node2.debug/fr/nccl_rank_",
    }
    env, hidden = rank_settings.settings_env(environ, "/runs/r1/node2.debug")
    assert hidden == ["NCCL_API_KEY"]
    assert env == {
        "GLOO_SOCKET_IFNAME": "lo",
        "NCCL_IB_DISABLE": "1",
        "TORCH_DISTRIBUTED_DEBUG": "DETAIL",
        "TORCH_NCCL_DEBUG_INFO_TEMP_FILE": "${DDPTUI_DEBUG_DIR}/fr/nccl_rank_",
        "TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC": "600",
    }


def test_known_bad_nccl_releases_are_named_with_their_sources() -> None:
    assert all(
        a.sources and all(s.startswith("https://") for s in a.sources) for a in KNOWN_BAD_NCCL
    )
    assert advisory_for("2.25.1-1") is not None and advisory_for("2.26.2") is None
    reports = [RankSettings("node1", r, nccl="2.25.1") for r in range(2)]
    (bad,) = bad_nccl(reports)
    assert bad.everywhere and bad.advisory.fixed_in == "2.26.2"
    assert bad.describe().startswith("NCCL 2.25.1 on every rank: ncclCommAbort hangs")
    assert "https://github.com/pytorch/pytorch/issues/149153" in bad.describe()
    part = [RankSettings("node1", 0, nccl="2.26.2"), RankSettings("node2", 1, nccl="2.25.1")]
    (bad,) = bad_nccl(part)
    assert not bad.everywhere and bad.group.ranks == (1,) and bad.group.nodes == ("node2",)


def test_versions_read_as_every_writer_writes_them() -> None:
    assert release("(2, 21, 5)") == "2.21.5"
    assert release("2.25.1-1") == "2.25.1"
    assert release("") is None and release("dev") is None
    assert rank_settings.nccl_release((2 << 32) | (21 << 16) | 5) == "2.21.5"
    assert rank_settings.nccl_release(21805) == "2.18.5"
    assert rank_settings.nccl_release(2708) == "2.7.8"
    version = "__version__ = '2.13.0+cu126'\ndebug = False\ncuda: Optional[str] = '12.6'\n"
    assert rank_settings.torch_versions(version) == ("2.13.0+cu126", "12.6")
    assert rank_settings.torch_versions("cuda: Optional[str] = None\n") == (None, None)
    proc = "NVRM version: NVIDIA UNIX x86_64 Kernel Module  550.54.15  Tue Mar  5 22:23:56 UTC 2024"
    assert rank_settings.driver_version(proc) == "550.54.15"


def test_the_nccl_package_beside_torch_names_its_release(tmp_path: Path) -> None:
    site = tmp_path / "lib" / "python3.11" / "site-packages"
    (site / "torch" / "lib").mkdir(parents=True)
    assert rank_settings.nccl_near(str(site / "torch")) is None
    (site / "nvidia_nccl_cu12-2.21.5.dist-info").mkdir()
    assert rank_settings.nccl_near(str(site / "torch")) == "2.21.5"
    conda = tmp_path / "conda" / "lib"
    conda.mkdir(parents=True)
    (conda / "libnccl.so.2.19.3").write_text("")
    torch = conda / "python3.11" / "site-packages" / "torch"
    torch.mkdir(parents=True)
    assert rank_settings.nccl_near(str(torch)) == "2.19.3"


def test_rank_lists_read_as_ranges() -> None:
    assert rank_ranges([3, 2]) == "2, 3"
    assert rank_ranges([0, 1, 2, 3, 8, 10, 11]) == "0-3, 8, 10, 11"


def test_the_watch_compares_once_every_rank_reported_and_again_on_change() -> None:
    watch = SettingsWatch(expected=4)
    assert watch.seen("node2", line(2, 0, {"NCCL_IB_DISABLE": "1"}), 100.0) == []
    assert watch.seen("node1", line(0, 0), 100.1) == []
    assert watch.seen("node1", line(1, 1), 100.2) == []
    (report,) = watch.seen("node2", line(3, 1, {"NCCL_IB_DISABLE": "1"}), 100.3)
    assert isinstance(report, SettingsReport) and report.complete and report.ranks == 4
    assert [d.ranks for d in report.differences] == [(2, 3)]
    # the same again (a later stage, nothing else changed): nothing said
    assert watch.seen("node2", line(3, 1, {"NCCL_IB_DISABLE": "1"}, stage="init"), 101.0) == []
    # the script set the variable on node1 too before init: the difference is gone
    (report,) = watch.seen("node1", line(0, 0, {"NCCL_IB_DISABLE": "1"}, stage="init"), 102.0)
    assert isinstance(report, SettingsReport) and report.differences[0].ranks == (1,)
    # compared again at most once a second: the next report waits for the session's tick
    assert watch.seen("node1", line(1, 1, {"NCCL_IB_DISABLE": "1"}, stage="init"), 102.1) == []
    (report,) = watch.tick(103.0)
    assert isinstance(report, SettingsReport) and report.differences == ()
    assert watch.tick(104.0) == []


def test_a_rank_that_never_reports_holds_the_comparison_back_only_so_long() -> None:
    watch = SettingsWatch(expected=3, settle_s=10.0)
    assert watch.seen("node1", line(0, 0), 100.0) == []
    assert watch.seen("node2", line(1, 0, {"NCCL_P2P_DISABLE": "1"}), 100.5) == []
    assert watch.tick(105.0) == []
    (report,) = watch.tick(110.5)
    assert isinstance(report, SettingsReport) and not report.complete
    assert report.differences[0].name == "NCCL_P2P_DISABLE"
    assert watch.tick(120.0) == []


def test_a_later_report_keeps_a_version_the_rank_could_read_only_at_start() -> None:
    start = RankSettings("node1", 0, nccl="2.21.5", env={"NCCL_DEBUG": "INFO"})
    later = RankSettings("node1", 0, stage="init", backend="nccl", pg_timeout_s=600.0)
    merged = start.merged(later)
    assert merged.nccl == "2.21.5" and merged.backend == "nccl" and merged.env == {}


def test_the_story_tells_a_difference_as_one_warning_incident() -> None:
    story = Story(clock=lambda: 100.0)
    watch = SettingsWatch(expected=4)
    events = []
    for rank in range(4):
        env = {"NCCL_IB_DISABLE": "1"} if rank >= 2 else {}
        events += watch.seen("node2" if rank >= 2 else "node1", line(rank, rank % 2, env), 100.0)
    (report,) = events
    (told,) = story.seen(report)
    incident = told.incident
    assert incident.kind == IncidentKind.SETTINGS_DIFFER and not incident.kind.failure
    assert incident.blamed == (2, 3) and incident.nodes == ("node2",)
    assert incident.headline() == (
        "settings differ: ranks 2, 3 on node2 — NCCL_IB_DISABLE=1 there, unset elsewhere"
    )
    assert story.lead() == incident  # nothing failed: the warning leads
    gone = SettingsReport(4, 4, ts=101.0)
    (over,) = story.seen(gone)
    assert over.incident.over and over.incident.number == incident.number


def test_the_story_names_a_known_bad_nccl_on_every_rank_without_blame() -> None:
    story = Story(clock=lambda: 100.0)
    reports = [RankSettings("node1", r, nccl="2.29.2") for r in range(2)]
    (told,) = story.seen(SettingsReport(2, 2, bad_nccl=bad_nccl(reports), ts=100.0))
    incident = told.incident
    assert incident.kind == IncidentKind.KNOWN_BAD_NCCL and incident.blamed == ()
    assert incident.headline().startswith("known-bad NCCL — NCCL 2.29.2 on every rank: ")
    assert "https://github.com/pytorch/pytorch/pull/174338" in incident.evidence


def test_the_event_reads_back_from_events_jsonl_as_it_was() -> None:
    reports = two_nodes({"NCCL_IB_DISABLE": "1"})
    event = SettingsReport(4, 4, compare(reports), bad_nccl(reports), {"torch": "2.13.0"}, ts=5.0)
    data = event.to_dict()
    assert (
        data["differences"][0]["text"] == "NCCL_IB_DISABLE=1 on node2 (ranks 2, 3), unset elsewhere"
    )
    back = decode_event(json.dumps(data))
    assert back == event


def test_the_watch_says_it_once_more_when_every_group_is_up() -> None:
    watch = SettingsWatch(expected=2)
    watch.seen("node1", line(0, 0), 1.0)
    (first,) = watch.seen("node2", line(1, 0), 1.1)
    assert isinstance(first, SettingsReport) and "process group timeout" not in first.common
    assert (
        watch.seen("node1", line(0, 0, stage="init", backend="gloo", pg_timeout_s=1800.0), 3.0)
        == []
    )
    assert (
        watch.seen("node2", line(1, 0, stage="init", backend="gloo", pg_timeout_s=1800.0), 3.1)
        == []
    )
    (up,) = watch.tick(4.0)
    assert isinstance(up, SettingsReport) and up.differences == ()
    assert up.common["process group timeout"] == "1800 s" and up.common["backend"] == "gloo"


H200 = Path(__file__).resolve().parents[2] / "data" / "gpu" / "h200_settings"


def test_reports_from_a_real_nccl_job_read_and_agree() -> None:
    """The hook's reports on an H200 (NCCL 2.28.9 from its pip package, then the loaded one):
    rank 0's group came up, rank 1's never did; what rank 1 could not know is no difference."""
    watch = SettingsWatch(expected=2)
    events = []
    for rank in (0, 1):
        for text in (H200 / f"settings_rank_{rank}.jsonl").read_text().splitlines():
            events += watch.seen("gpu0", json.loads(text), 10.0)
    (report,) = events
    assert isinstance(report, SettingsReport) and report.complete
    assert report.differences == () and report.bad_nccl == ()
    zero = watch.reports[("gpu0", 0)]
    assert (zero.torch, zero.cuda, zero.nccl, zero.driver) == (
        "2.11.0+cu130", "13.0", "2.28.9", "580.159.04"
    )  # fmt: skip
    assert zero.stage == "init" and zero.backend == "nccl" and zero.pg_timeout_s == 900.0
    assert report.common["NCCL"] == "2.28.9" and report.common["driver"] == "580.159.04"


def test_replica_groups_ranks_are_named_as_the_console_names_them() -> None:
    """torchft: each node's group numbers its ranks from 0; the watch names them in the job."""
    watch = SettingsWatch(expected=4, offsets={"node1": 0, "node2": 2})
    for node in ("node1", "node2"):
        env = {"NCCL_IB_DISABLE": "1"} if node == "node2" else {}
        events = [e for local in (0, 1) for e in watch.seen(node, line(local, local, env), 1.0)]
    (report,) = events
    assert isinstance(report, SettingsReport)
    assert [d.ranks for d in report.differences] == [(2, 3)]


def test_a_restart_does_not_end_a_difference_the_next_round_runs_with() -> None:
    from ddptui.core.monitor.cycles import CycleMember, CycleReport, RestartCycle

    story = Story(clock=lambda: 100.0)
    differ = SettingsReport(4, 4, compare(two_nodes({"NCCL_IB_DISABLE": "1"})), ts=100.0)
    (first,) = story.seen(differ)
    member = CycleMember("node1", 0, (0, 1))
    cycle = RestartCycle(1, 101.0, 4, (member,), "worker failure", "node1", 1, restarts=1)
    story.seen(CycleReport(cycle))
    settings = story.incidents[first.incident.number - 1]
    assert not settings.over  # the new round runs with the same settings
    (over,) = story.seen(SettingsReport(4, 4, ts=102.0))  # fixed for the round after
    assert over.incident.number == first.incident.number and over.incident.over
    assert [i.kind for i in story.incidents].count(IncidentKind.SETTINGS_DIFFER) == 1


def test_a_big_job_s_reports_cost_a_few_comparisons_not_one_each(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A thousand ranks' reports of their group (and a restarted round's, the same again)
    are compared at most once a second, not once a report."""
    from ddptui.core.diagnose import settings as module

    calls: list[int] = []
    real = module.compare

    def counted(reports: list[RankSettings]) -> tuple[SettingDifference, ...]:
        calls.append(len(reports))
        return real(reports)

    monkeypatch.setattr(module, "compare", counted)
    watch = SettingsWatch(expected=1024)
    for rank in range(1024):
        watch.seen(f"node{rank // 8}", line(rank, rank % 8), 1.0)
    assert len(calls) == 1
    said: list[Event] = []
    for t in (2.0, 4.0):  # the groups come up; then a restart's workers say the same again
        for rank in range(1024):
            report = line(rank, rank % 8, stage="init", backend="gloo", pg_timeout_s=1800.0)
            said += watch.seen(f"node{rank // 8}", report, t + rank / 2048)
        said += watch.tick(t + 1.0)
    assert len(calls) <= 4, len(calls)
    (up,) = said
    assert isinstance(up, SettingsReport) and up.common["backend"] == "gloo"
