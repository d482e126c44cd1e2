"""Fuzzing the parsers of what the operator types or writes: whatever the input, a parser
returns or raises SpecError (one line for the operator), never another exception."""

from __future__ import annotations

import tempfile
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ddptui.core.job.hosts import expand_hosts, read_hostfile
from ddptui.core.job.profiles import parse_profiles, read_profile_file
from ddptui.core.job.spec import SpecError, parse_env_pairs

FUZZ = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
# Characters that mean something to the parsers, mixed with anything at all.
HOSTY = st.text(alphabet=st.sampled_from("ab01-9[],-_. \t\n#=:slots"), max_size=40)
TOMLISH = st.text(
    alphabet=st.sampled_from("[]{}=\"'.,=\n #abcdefilnoprstuv0123456789-"), max_size=120
)


def _one_line(exc: SpecError) -> None:
    assert str(exc) and "\n" not in str(exc).strip("\n")


def _each_line_names_the_file(exc: SpecError, source: str) -> None:
    """A profile file reports every problem it has, one line each, each naming the file."""
    lines = str(exc).splitlines()
    assert lines and all(line.startswith(source) for line in lines), str(exc)


@FUZZ
@given(st.one_of(HOSTY, st.text(max_size=40)))
def test_host_lists(expression: str) -> None:
    try:
        names = expand_hosts(expression)
    except SpecError as exc:
        _one_line(exc)
        return
    assert names and all(n.strip() for n in names)


@FUZZ
@given(st.one_of(HOSTY.map(str.encode), st.binary(max_size=80)))
def test_hostfiles(data: bytes) -> None:
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "hosts"
        path.write_bytes(data)
        try:
            entries = read_hostfile(path)
        except SpecError as exc:
            _one_line(exc)
            return
    assert entries


@FUZZ
@given(st.lists(st.one_of(st.text(max_size=20), st.from_regex(r"[A-Z_]{1,5}=.{0,5}")), max_size=4))
def test_env_pairs(pairs: list[str]) -> None:
    try:
        env = parse_env_pairs(pairs, {"SET_HERE": "v"})
    except SpecError as exc:
        _one_line(exc)
        return
    assert set(env) <= {p.partition("=")[0] for p in pairs}


PROFILE_KEYS = st.sampled_from(
    ["script", "nodes", "env", "hosts", "hostfile", "extends", "backend", "ssh", "container",
     "secret_env", "nproc_per_node", "slurm", "launcher", "bogus"]
)  # fmt: skip
VALUES = st.one_of(
    st.integers(-3, 5).map(str),
    st.text(alphabet="abc-[]1,", max_size=8).map(lambda t: f'"{t}"'),
    st.just('{ A = "1" }'),
    st.just('{ engine = "x" }'),
    st.just('["a", 1]'),
    st.just("true"),
)


@FUZZ
@given(st.one_of(TOMLISH, st.lists(st.tuples(PROFILE_KEYS, VALUES), max_size=5)))
def test_profiles(source: str | list[tuple[str, str]]) -> None:
    text = (
        source
        if isinstance(source, str)
        else "[profiles.p]\n" + "".join(f"{k} = {v}\n" for k, v in source)
    )
    try:
        parse_profiles(text, "fuzz.toml")
    except SpecError as exc:
        _each_line_names_the_file(exc, "fuzz.toml")


@FUZZ
@given(st.binary(max_size=60))
def test_profile_files(data: bytes) -> None:
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "ddptui.toml"
        path.write_bytes(b"[profiles.p]\n" + data)
        try:
            read_profile_file(path)
        except SpecError as exc:
            _each_line_names_the_file(exc, str(path))
