"""known_hosts.py: OpenSSH's matching rules and verdicts, on files written here."""

from __future__ import annotations

import base64
import hashlib
import hmac
import threading
from pathlib import Path

from ddptui.core.backends.ssh.known_hosts import (
    REVOKED,
    KnownHosts,
    Verdict,
    files_from_config,
    fingerprint,
    host_names,
    parse_line,
    patterns_match,
)

KEY_A = base64.b64encode(b"key-a" * 8).decode()
KEY_B = base64.b64encode(b"key-b" * 8).decode()
NAMES = host_names("gpu1", "gpu1.example.org", "10.0.0.5")


def test_names_carry_the_port_only_when_it_is_not_22() -> None:
    assert host_names("h", "10.0.0.1", None, "h") == ("h", "10.0.0.1")
    assert host_names("h", "10.0.0.1", port=2222) == ("[h]:2222", "[10.0.0.1]:2222")


def test_patterns_follow_openssh() -> None:
    assert patterns_match("gpu*", NAMES)
    assert patterns_match("10.0.0.?", NAMES)
    assert not patterns_match("gpu*,!gpu1", NAMES)  # a negated match vetoes the line
    assert not patterns_match("gpu2", NAMES)
    assert patterns_match("[gpu1]:2222", host_names("gpu1", port=2222))
    assert not patterns_match("gpu1", host_names("gpu1", port=2222))
    assert patterns_match("GPU1", NAMES)  # host names compare without case
    salt = b"0123456789abcdefghij"
    mac = hmac.new(salt, b"10.0.0.5", hashlib.sha1).digest()
    hashed = f"|1|{base64.b64encode(salt).decode()}|{base64.b64encode(mac).decode()}"
    assert patterns_match(hashed, NAMES) and not patterns_match(hashed, ("10.0.0.6",))


def test_lines_ssh_would_skip_are_skipped() -> None:
    assert parse_line("f", 1, "# comment") is None
    assert parse_line("f", 1, "   ") is None
    assert parse_line("f", 1, "host ssh-ed25519") is None
    assert parse_line("f", 1, "host ssh-ed25519 not*base64") is None
    assert parse_line("f", 1, f"@bogus host ssh-ed25519 {KEY_A}") is None
    line = parse_line("f", 7, f"@revoked * ssh-ed25519 {KEY_A} comment")
    assert line is not None and line.marker == "@revoked" and line.where == "f:7"


def test_verdicts(tmp_path: Path) -> None:
    user, system = tmp_path / "user", tmp_path / "global"
    user.write_text(f"# hosts\nunrelated ssh-ed25519 {KEY_B}\n10.0.0.5 ssh-ed25519 {KEY_A}\n")
    system.write_bytes(b"\xff\xfe not utf-8\n@revoked * ssh-ed25519 " + KEY_B.encode() + b"\n")
    known = KnownHosts([str(user), str(tmp_path / "missing")], [str(system)])
    assert known.check(NAMES, "ssh-ed25519", KEY_A).verdict is Verdict.TRUSTED
    changed = known.check(NAMES, "ssh-ed25519", base64.b64encode(b"c" * 40).decode())
    assert changed.verdict is Verdict.CHANGED
    assert [k.where for k in changed.evidence] == [f"{user}:3"]
    assert known.check(NAMES, "ssh-ed25519", KEY_B).verdict is Verdict.REVOKED
    assert known.check(("elsewhere",), "ssh-ed25519", KEY_A).verdict is Verdict.UNKNOWN
    message = known.message("gpu1", changed, "ssh-ed25519", KEY_A)
    assert f"{user}:3" in message and fingerprint(KEY_A) in message
    assert "ssh-keyscan" not in message and "accept-new" not in message


def test_config_files_and_defaults() -> None:
    assert files_from_config("~/a /b", ("x",)) == [str(Path("~/a").expanduser()), "/b"]
    assert files_from_config(["/a"], ("x",)) == ["/a"]
    assert files_from_config(None, ("/x",)) == ["/x"]
    assert files_from_config("none", ("/x",)) == []


def test_recording_appends_once_under_a_lock(tmp_path: Path) -> None:
    path = tmp_path / "ssh" / "known_hosts"
    path.parent.mkdir()
    path.write_text("# mine\nold ssh-ed25519 " + KEY_B)  # no final newline
    known = KnownHosts([str(path)])
    threads = [
        threading.Thread(target=known.record, args=(NAMES, "ssh-ed25519", KEY_A)) for _ in range(16)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert path.read_text() == (
        f"# mine\nold ssh-ed25519 {KEY_B}\ngpu1,gpu1.example.org,10.0.0.5 ssh-ed25519 {KEY_A}\n"
    )
    fresh = KnownHosts([str(tmp_path / "new" / "known_hosts")])
    written = fresh.record(NAMES, "ssh-ed25519", KEY_A)
    assert written is not None and (Path(written).stat().st_mode & 0o777) == 0o600


def test_plain_and_patterned_lines_match_in_file_order_and_a_rewrite_is_reread(
    tmp_path: Path,
) -> None:
    """Plain names are looked up by name, patterns tested; both in the file's order, as
    ssh reads them; case does not matter; a file changed since is read again."""

    def key(n: int) -> str:
        return base64.b64encode(f"key-{n}".encode() * 4).decode()

    path = tmp_path / "known_hosts"
    path.write_text(
        f"node*,!node9 ssh-ed25519 {key(1)}\n"
        f"NODE1,10.0.0.1 ssh-ed25519 {key(2)}\n"
        f"node2 ssh-ed25519 {key(3)}\n"
        f"@revoked node1 ssh-ed25519 {key(4)}\n"
    )
    known = KnownHosts([str(path)])
    assert [k.line for k in known.matching(("node1",))] == [1, 2]
    assert [k.line for k in known.matching(("10.0.0.1",))] == [2]
    assert [k.line for k in known.matching(("node9",))] == []
    assert [k.line for k in known.matching(("node1",), REVOKED)] == [4]
    with path.open("a") as f:
        f.write(f"node9 ssh-ed25519 {key(5)}\n")
    assert [k.line for k in KnownHosts([str(path)]).matching(("node9",))] == [5]


def test_hosts_share_one_reading_of_unchanged_files_but_not_its_list(tmp_path: Path) -> None:
    """Every host's lookup uses the files read and indexed once (not once a host: that was
    quadratic at hundreds of hosts); what one host's KnownHosts does to its keys stays its own."""
    path = tmp_path / "known_hosts"
    path.write_text(f"node1 ssh-ed25519 {KEY_A}\nnode2 ssh-ed25519 {KEY_B}\n")
    first = KnownHosts([str(path)])
    second = KnownHosts([str(path)])
    assert first._by_name is second._by_name  # indexed once
    first.keys.clear()
    assert [k.line for k in second.matching(("node2",))] == [2]
    assert [k.line for k in KnownHosts([str(path)]).matching(("node1",))] == [1]
