"""Provides the check of the ssh_config file before anything connects: a file that is
missing, not UTF-8, or holds a number neither SSH engine can read is one line for the
operator (file, line, what to fix), not a traceback from inside an engine."""

from __future__ import annotations

import re
from pathlib import Path

from ddptui.core.job.spec import SpecError

DEFAULT_CONFIG = "~/.ssh/config"
# keyword (lower case) -> smallest value allowed; Port also has a largest
_NUMBERS = {
    "port": 1,
    "connecttimeout": 0,
    "connectionattempts": 1,
    "serveraliveinterval": 0,
    "serveralivecountmax": 0,
}
_LINE = re.compile(r"\s*([A-Za-z]+)\s*(?:=\s*|\s+)(.*?)\s*$")


def check_ssh_config(path: str | None) -> None:
    """Raise SpecError naming the flag or the file's line; the default file may be absent."""
    given = path is not None
    file = Path(path or DEFAULT_CONFIG).expanduser()
    if not file.is_file():
        if given:
            raise SpecError(
                f"--ssh-config {path}: no such file (give an ssh_config file that exists, "
                f"or leave the flag out to use {DEFAULT_CONFIG})"
            )
        return
    try:
        text = file.read_bytes().decode()
    except OSError as exc:
        raise SpecError(f"cannot read ssh config {file}: {exc.strerror}") from None
    except UnicodeDecodeError as exc:
        raise SpecError(
            f"ssh config {file} is not UTF-8 text (byte {exc.start}): save it as UTF-8"
        ) from None
    for number, raw in enumerate(text.splitlines(), start=1):
        match = _LINE.match(raw)
        if not match or raw.lstrip().startswith("#"):
            continue
        keyword, value = match.group(1), match.group(2).strip('"')
        low = _NUMBERS.get(keyword.lower())
        if low is None:
            continue
        high = 65535 if keyword.lower() == "port" else None
        if not value.isdigit() or int(value) < low or (high is not None and int(value) > high):
            span = f" from {low} to {high}" if high else f" of at least {low}"
            raise SpecError(
                f"ssh config {file} line {number}: {keyword} {value!r} is not a number{span}: "
                "fix that line"
            )
