"""Provides the reading of a number as trainers print it: separators, units and scale suffixes."""

from __future__ import annotations

import math
import re

# A number as printed: `12,345`, `7.2345`, `2e-05`, `1.000000E-04`, `nan`, `-inf`, `Infinity`,
# then an optional unit (`GiB`, `MiB`, `%`, `ms`, `s`) or scale (`k`, `M`, `G`, `T`). It is
# followed by no letter, digit or dot, so `1.2.3` and `3x` are not numbers.
NUMBER = (
    r"(?<![\w.])[-+]?(?:(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?"
    r"(?:\s?(?:[KMGT]i?B|%|ms|us|s|[kKMGT])(?![A-Za-z]))?(?![\w.])"
    r"|(?<![\w.])[-+]?(?:[nN]a[nN]|[iI]nf(?:inity)?|INF)(?![\w.])"
)

_PARTS = re.compile(
    r"\s*(?P<num>[-+]?(?:(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?)"
    r"\s?(?P<unit>[KMGT]i?B|%|ms|us|s|[kKMGT])?\s*"
)
# Sizes are read in GiB, whatever unit they were printed in. Trainers print memory divided by
# 1024**3 and call it GB (DeepSpeed's `MemAllocated=0.07GB`, torch's own summaries): GB is
# read as GiB, and so on for the other decimal names.
_SCALE = {
    "k": 1e3, "K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12,
    "KiB": 1 / 1024**2, "MiB": 1 / 1024, "GiB": 1.0, "TiB": 1024.0,
    "KB": 1 / 1024**2, "MB": 1 / 1024, "GB": 1.0, "TB": 1024.0,
}  # fmt: skip


def read_number(text: str) -> float | None:
    """The value of one printed number (NUMBER's text), or None if it is not one.

    An infinity comes back only where the text spells it: a number too large for a float
    (`1e999`) is not a reading, and a loss of `inf` is news.
    """
    try:
        value = float(text)
    except ValueError:
        return read_printed(text)
    if math.isinf(value) and "inf" not in text.lower():
        return None
    return value


def read_printed(text: str) -> float | None:
    """A number that `float` does not take as it stands: `12,345`, `30.12GiB`, `34.95%`."""
    match = _PARTS.fullmatch(text)
    if match is None:
        return None
    value = float(match["num"].replace(",", ""))
    unit = match["unit"]
    if unit is not None:
        value *= _SCALE.get(unit, 1.0)
    return None if math.isinf(value) else value
