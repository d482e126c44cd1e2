"""Provides the error a failed rank shows: its own words, never torchrun's boilerplate.

A rank that dies before any traceback (its script missing: `python3: can't open file ...`)
leaves torchrun's summary saying only "To enable traceback see: https://pytorch.org/docs/
stable/elastic/errors.html" or "Signal 6 (SIGABRT) received by PID ...". Those say nothing
of the rank: what it printed last does.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

_BOILERPLATE = re.compile(
    r"To enable traceback see:|pytorch\.org/docs/stable/elastic/errors\.html"
    r"|^Signal \d+ \(SIG\w+\) received by PID \d+"
    r"|^\s*(?:time|host|rank|exitcode|error_file|traceback)\s*:"
    r"|^[=-]{10,}$|^Failures:$|^Root Cause \(first observed failure\):$|^<NO_OTHER_FAILURES>$"
    r"|ChildFailedError|^\[\d+\]:$"
    r"|^[WEI]\d{4} \d\d:\d\d:\d\d\.\d+ \d+ \S*torch/distributed/"
)
# What an error line looks like, for output where stdout and stderr come merged (stdout is
# buffered: a rank's last progress line may come after the error it printed on stderr).
_ERRORISH = re.compile(
    r"Error\b|error:|\bwhat\(\):|terminate called|can't open file|No such file|Killed|Abort"
    r"|[Ff]atal|[Ee]xception|\bFAILED\b|Segmentation fault"
)


def is_boilerplate(line: str) -> bool:
    """A line of torchrun's own (its failure summary, its log lines), not the rank's."""
    return bool(_BOILERPLATE.search(line.strip()))


def says_error(line: str) -> bool:
    """A line that reads as an error (`can't open file`, `Killed`, `RuntimeError: ...`)."""
    return bool(_ERRORISH.search(line))


def shown_error(error: str, own_lines: Sequence[str]) -> str:
    """The error to show for a failed rank.

    `error` is what the failure summary gave (its exception line, or torchrun's words when
    the rank left no traceback); `own_lines` the rank's own output, oldest first (its stderr
    where the two streams are apart). torchrun's boilerplate gives way to the rank's last
    line that reads as an error, else its last line; with neither, the boilerplate stays.
    """
    if error.strip() and not is_boilerplate(error):
        return error.strip()
    own = [line.strip() for line in own_lines if line.strip() and not is_boilerplate(line)]
    for line in reversed(own):
        if _ERRORISH.search(line):
            return line
    return own[-1] if own else error.strip()
