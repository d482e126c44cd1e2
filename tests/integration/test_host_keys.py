"""Host keys against real sshd, with both SSH engines, the way OpenSSH's ssh treats them:
every known_hosts file it would read, every name a host goes by, `@revoked` and
`@cert-authority`, changed keys refused with where the old key is, new keys recorded once."""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

import pytest

from testbed.netns import Testbed

ROOT = Path(__file__).resolve().parents[2]
ENGINES = ["asyncssh", "paramiko"]
HOST = "node2"
ALT_PORT = 2222


def _config(
    tb: Testbed,
    path: Path,
    user: Sequence[Path],
    system: Sequence[Path] = (),
    port: int | None = None,
) -> Path:
    """The testbed's client config with these known_hosts files (and HOST on `port`)."""
    assert tb.ssh is not None
    text = tb.ssh.write_ssh_config(path).read_text()
    text = text.replace(
        f"UserKnownHostsFile {tb.ssh.known_hosts}",
        "UserKnownHostsFile " + " ".join(str(p) for p in user),
    )
    text = text.replace(
        "GlobalKnownHostsFile /dev/null",
        "GlobalKnownHostsFile " + (" ".join(str(p) for p in system) or "/dev/null"),
    )
    if port:
        block = f"Host {HOST}\n  HostName {tb.host_ip(HOST)}\n"
        text = text.replace(block, f"{block}  Port {port}\n")
    path.write_text(text)
    return path


def _connect(tb: Testbed, engine: str, cfg: Path, *flags: str, host: str = HOST) -> str:
    argv = [sys.executable, "-m", "tests.integration.hostkey_connect", engine, host, str(cfg)]
    proc = subprocess.run(
        tb.ns_argv("head", [*argv, *flags]),
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr
    return proc.stdout.strip()


def _key(tb: Testbed, host: str = HOST) -> str:
    assert tb.ssh is not None
    return str(tb.ssh.host_pubkeys[host])


def _wrong_key(tb: Testbed) -> str:
    assert tb.ssh is not None
    pub = Path(str(tb.ssh.new_key("wrong")) + ".pub").read_text()
    return " ".join(pub.split()[:2])


def _hashed(name: str) -> str:
    salt = os.urandom(20)
    mac = hmac.new(salt, name.encode(), hashlib.sha1).digest()
    return f"|1|{base64.b64encode(salt).decode()}|{base64.b64encode(mac).decode()}"


@pytest.mark.parametrize("engine", ENGINES)
def test_a_key_is_found_in_any_file_under_any_name(
    testbed: Testbed, tmp_path: Path, engine: str
) -> None:
    ip, key = testbed.host_ip(HOST), _key(testbed)
    first, second, system = tmp_path / "first", tmp_path / "second", tmp_path / "global"
    # Lines paramiko's own reader fails on, for other hosts: they must not get in the way.
    first.write_text(
        "# site hosts\n@cert-authority *.example.org " + _wrong_key(testbed) + "\n"
        "@revoked other.example.org " + _wrong_key(testbed) + "\n"
        "not a key line\n"
    )
    cases = {
        "address only, global file": ("", f"{ip} {key}\n"),
        "host name, second user file": (f"{HOST} {key}\n", ""),
        "hashed address": (f"{_hashed(ip)} {key}\n", ""),
        "wildcard, negation elsewhere": (f"node*,!node1 {key}\n", ""),
    }
    for case, (user_text, system_text) in cases.items():
        second.write_text(user_text)
        system.write_text(system_text)
        cfg = _config(testbed, tmp_path / "cfg", [first, second], [system])
        assert _connect(testbed, engine, cfg) == "ok", case


@pytest.mark.parametrize("engine", ENGINES)
def test_a_changed_key_is_refused_naming_where_the_old_one_is(
    testbed: Testbed, tmp_path: Path, engine: str
) -> None:
    first, second = tmp_path / "first", tmp_path / "second"
    first.write_text(f"# mine\nnode1 {_key(testbed, 'node1')}\n")
    second.write_text(f"# a\n# b\n{testbed.host_ip(HOST)} {_wrong_key(testbed)}\n")
    before = first.read_text(), second.read_text()
    cfg = _config(testbed, tmp_path / "cfg", [first, second])
    outcome = _connect(testbed, engine, cfg, "--accept-new")
    assert outcome.startswith(f"refused: {HOST}: REMOTE HOST IDENTIFICATION HAS CHANGED"), outcome
    assert f"{second}:3" in outcome and "SHA256:" in outcome
    assert "ssh-keyscan" not in outcome and "accept-new" not in outcome  # never advice to replace
    assert (first.read_text(), second.read_text()) == before


@pytest.mark.parametrize("engine", ENGINES)
def test_a_revoked_key_is_refused_even_where_it_is_also_trusted(
    testbed: Testbed, tmp_path: Path, engine: str
) -> None:
    user, system = tmp_path / "user", tmp_path / "global"
    user.write_text(f"{HOST} {_key(testbed)}\n")
    system.write_text(f"# revocations\n@revoked * {_key(testbed)}\n")
    cfg = _config(testbed, tmp_path / "cfg", [user], [system])
    for flags in ((), ("--accept-new",)):
        outcome = _connect(testbed, engine, cfg, *flags)
        assert outcome.startswith(f"refused: {HOST}: "), outcome
        assert f"marked @revoked in {system}:2" in outcome


@pytest.mark.parametrize("engine", ENGINES)
def test_a_new_key_is_recorded_once_and_the_file_kept(
    testbed: Testbed, tmp_path: Path, engine: str
) -> None:
    known = tmp_path / "known"
    original = f"# my hosts\nnode1 {_key(testbed, 'node1')}"  # no newline at the end
    known.write_text(original)
    cfg = _config(testbed, tmp_path / "cfg", [known])
    outcome = _connect(testbed, engine, cfg)
    assert outcome.startswith(f"refused: host key of {HOST} is not in {known}"), outcome
    assert "--accept-new-host-keys" in outcome
    # three connections at once, twice over: one line recorded
    assert _connect(testbed, engine, cfg, "--accept-new", "--twice") == "ok"
    assert _connect(testbed, engine, cfg, "--accept-new", "--twice") == "ok"
    text = known.read_text()
    assert text.startswith(original + "\n")
    added = text[len(original) + 1 :].splitlines()
    assert len(added) == 1 and added[0].endswith(_key(testbed)), text
    assert HOST in added[0].split()[0] and testbed.host_ip(HOST) in added[0].split()[0]
    assert _connect(testbed, engine, cfg) == "ok"  # now known, without the flag


@pytest.mark.parametrize("engine", ENGINES)
def test_a_host_on_another_port_is_listed_as_host_colon_port(
    clean_testbed: Testbed, tmp_path: Path, engine: str
) -> None:
    tb = clean_testbed
    assert tb.ssh is not None
    ip, key = tb.host_ip(HOST), _key(tb)
    known = tmp_path / "known"
    cfg = _config(tb, tmp_path / "cfg", [known], port=ALT_PORT)
    tb.ssh.reconfigure(HOST, ["Port 22", f"Port {ALT_PORT}"])
    try:
        known.write_text(f"{HOST},{ip} {key}\n")  # port 22's names: not this one
        outcome = _connect(tb, engine, cfg)
        assert outcome.startswith(f"refused: host key of {HOST} is not in"), outcome
        known.write_text(f"[{ip}]:{ALT_PORT} {key}\n")
        assert _connect(tb, engine, cfg) == "ok"
    finally:
        tb.ssh.reconfigure(HOST)


@pytest.mark.parametrize("engine", ENGINES)
def test_cert_authority(clean_testbed: Testbed, tmp_path: Path, engine: str) -> None:
    """asyncssh checks the host's certificate against the CA; paramiko cannot check
    certificates and says so (it does not crash on the line, nor trust the host)."""
    tb = clean_testbed
    assert tb.ssh is not None
    ca = tb.ssh.new_key("host-ca")
    cert = tb.ssh.host_certificate(HOST, ca)
    known = tmp_path / "known"
    ca_pub = " ".join(Path(f"{ca}.pub").read_text().split()[:2])
    known.write_text(f"# our CA\n@cert-authority node*,10.* {ca_pub}\n")
    cfg = _config(tb, tmp_path / "cfg", [known])
    tb.ssh.reconfigure(HOST, [f"HostCertificate {cert}"])
    try:
        outcome = _connect(tb, engine, cfg)
        if engine == "asyncssh":
            assert outcome == "ok"
        else:
            assert outcome.startswith(f"refused: {HOST}: known through @cert-authority"), outcome
            assert f"{known}:2" in outcome and "--ssh-engine asyncssh" in outcome
        # a host that offers a certificate and is unknown: its plain key is recorded
        fresh = tmp_path / "fresh"
        cfg = _config(tb, tmp_path / "cfg2", [fresh])
        assert _connect(tb, engine, cfg, "--accept-new") == "ok"
        assert fresh.read_text().split()[1:] == _key(tb).split()
        known.write_text(known.read_text() + f"@revoked * {ca_pub}\n")
        cfg = _config(tb, tmp_path / "cfg", [known])
        # a revoked CA vouches for nothing: the host is unknown again, to both engines
        outcome = _connect(tb, engine, cfg)
        assert outcome.startswith(f"refused: host key of {HOST} is not in"), outcome
    finally:
        tb.ssh.reconfigure(HOST)
