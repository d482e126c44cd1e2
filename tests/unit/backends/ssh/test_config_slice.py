"""config_slice: a host's slice of an ssh_config gives asyncssh the same options as the
whole file, and files it cannot be sure of are not sliced."""

from __future__ import annotations

from pathlib import Path

import asyncssh
import pytest

from ddptui.core.backends.ssh.config_slice import config_for

CONFIG = """\
User everyone
Host node1
  HostName 10.0.0.1
  Port 2201
Host node2 node3
  HostName 10.0.0.23
Host node* !node3
  User ops
  ForwardAgent yes
Host node1,backup
  Port 9999
  ConnectTimeout 7
Host *
  Port 22
  User nobody
  ConnectTimeout 3
"""


def _seen(path: str, host: str) -> tuple[object, ...]:
    opts = asyncssh.SSHClientConnectionOptions(host=host, config=[path])
    return (
        opts.host,
        opts.port,
        opts.username,
        opts.config.get("ForwardAgent"),
        opts.config.get("ConnectTimeout"),
    )


@pytest.mark.parametrize("host", ["node1", "node2", "node3", "node4", "backup", "other"])
def test_a_slice_gives_what_the_whole_file_gives(tmp_path: Path, host: str) -> None:
    whole = tmp_path / "ssh_config"
    whole.write_text(CONFIG)
    sliced = config_for(str(whole), host)
    assert sliced != str(whole)
    assert _seen(sliced, host) == _seen(str(whole), host)
    text = Path(sliced).read_text()
    assert ("10.0.0.23" in text) == (host in ("node2", "node3"))  # others' blocks left out


def test_a_changed_file_is_sliced_again(tmp_path: Path) -> None:
    whole = tmp_path / "ssh_config"
    whole.write_text(CONFIG)
    first = Path(config_for(str(whole), "node1")).read_text()
    whole.write_text(CONFIG.replace("2201", "2202") + "# longer now\n")
    assert "2202" in Path(config_for(str(whole), "node1")).read_text()
    assert "2201" in first


@pytest.mark.parametrize(
    "line", ["Match host node1", "Include ~/.ssh/conf.d/*", "CanonicalizeHostname yes"]
)
def test_what_it_cannot_be_sure_of_is_not_sliced(tmp_path: Path, line: str) -> None:
    whole = tmp_path / "ssh_config"
    whole.write_text(CONFIG + line + "\n")
    assert config_for(str(whole), "node1") == str(whole)
    assert config_for(str(tmp_path / "missing"), "node1") == str(tmp_path / "missing")
