"""Provides the check of a profile's own metric patterns (name -> regex with one group)."""

from __future__ import annotations

import re
from collections.abc import Mapping


class PatternError(ValueError):
    """A profile's metric pattern that cannot be used; the message says which and why."""


def compile_metric_patterns(patterns: Mapping[str, str]) -> dict[str, re.Pattern[str]]:
    """Each pattern compiled, by the name as written.

    It lives with the job so that the job's own validation (profiles, flags) and the metric
    reader apply one rule: a regular expression with exactly one group, the number.

    Raises:
        PatternError: a pattern does not compile, has not exactly one group, or its name
            is empty.
    """
    compiled: dict[str, re.Pattern[str]] = {}
    for name, pattern in patterns.items():
        if not name.strip():
            raise PatternError(f"metric pattern {pattern!r}: needs a name")
        try:
            regex = re.compile(pattern)
        except re.error as exc:
            raise PatternError(f"metric {name!r}: not a regular expression: {exc}") from None
        if regex.groups != 1:
            raise PatternError(f"metric {name!r}: needs one group (the number), has {regex.groups}")
        compiled[name] = regex
    return compiled
