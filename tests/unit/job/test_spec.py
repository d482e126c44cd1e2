"""Bad input is reported in one line that says what to fix."""

from __future__ import annotations

from pathlib import Path

import pytest

from ddptui.core.job.hosts import expand_hosts, read_hostfile
from ddptui.core.job.spec import SpecError, check_local_script, make_spec, parse_env_pairs


def test_nodes_zero_is_rejected_in_one_line() -> None:
    with pytest.raises(SpecError, match=r"^nodes: .*greater than or equal to 1$"):
        make_spec(script="x.py", nodes=0)


def test_unknown_field_is_rejected() -> None:
    with pytest.raises(SpecError, match="nodez"):
        make_spec(script="x.py", nodez=2)


def test_env_pairs() -> None:
    assert parse_env_pairs(["A=1", "B=x=y", "C="]) == {"A": "1", "B": "x=y", "C": ""}
    for bad in ("=v", "1A=2", "A B=1", "A B"):
        with pytest.raises(SpecError, match="malformed --env"):
            parse_env_pairs([bad])


def test_a_bare_env_name_takes_its_value_from_here() -> None:
    """So a secret need not be typed on the console's own command line."""
    assert parse_env_pairs(["HF_TOKEN"], {"HF_TOKEN": "v"}) == {"HF_TOKEN": "v"}
    with pytest.raises(SpecError, match="HF_TOKEN is not set in this environment"):
        parse_env_pairs(["HF_TOKEN"], {})


def test_missing_script_names_the_place_looked(tmp_path: Path) -> None:
    with pytest.raises(SpecError, match="script not found: nope.py"):
        check_local_script(make_spec(script="nope.py", workdir=str(tmp_path)))
    (tmp_path / "yes.py").write_text("")
    assert check_local_script(make_spec(script="yes.py", workdir=str(tmp_path))).is_file()


def test_hostlist_expressions() -> None:
    assert expand_hosts("node[1-3]") == ["node1", "node2", "node3"]
    assert expand_hosts("gpu[01-02,05],head") == ["gpu01", "gpu02", "gpu05", "head"]
    for bad in ("node[1-", "", "a,a"):
        with pytest.raises(SpecError):
            expand_hosts(bad)


@pytest.mark.parametrize(
    "bad",
    [
        "node1, node2",  # a space would become part of a host name
        ".[-_l,\t_\t\ts:o][\n]",  # found by fuzzing: python-hostlist recursed to the limit
    ],
)
def test_a_host_list_with_spaces_or_control_characters_is_refused(bad: str) -> None:
    with pytest.raises(SpecError, match="separate hosts with commas"):
        expand_hosts(bad)


def test_hostfile_with_comments_and_slots(tmp_path: Path) -> None:
    f = tmp_path / "hosts"
    f.write_text("# cluster\nworker-1 slots=8\n\nworker-2 slots=8  # second\nn[3-4]\n")
    entries = read_hostfile(f)
    assert [(e.name, e.slots) for e in entries] == [
        ("worker-1", 8),
        ("worker-2", 8),
        ("n3", None),
        ("n4", None),
    ]
    f.write_text("worker-1 gpus=8\n")
    with pytest.raises(SpecError, match=r"hosts:1: unexpected 'gpus=8'"):
        read_hostfile(f)


def test_an_env_name_ending_in_a_newline_is_refused_on_one_line() -> None:
    """`$` matches before a final newline; found by fuzzing the --env parser."""
    with pytest.raises(SpecError) as caught:
        parse_env_pairs(["A\n=1"])
    assert "\n" not in str(caught.value)


def test_an_ssh_jobs_relative_script_is_read_from_where_ddptui_runs() -> None:
    from ddptui.core.job.resolve import with_script_from_here

    ssh = make_spec(backend="ssh", nodes=2, hosts=("a", "b"), script="../s/train.py")
    assert with_script_from_here(ssh, "/home/u/proj").script == "/home/u/s/train.py"
    for kept in (
        ssh.model_copy(update={"workdir": "/shared/proj"}),  # the nodes run in it
        ssh.model_copy(update={"script": "~/train.py"}),  # each node's home
        ssh.model_copy(update={"backend": "local"}),
    ):
        assert with_script_from_here(kept, "/home/u/proj").script == kept.script
