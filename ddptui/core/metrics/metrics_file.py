"""Provides the run's metrics file: samples written as JSON lines, and read back to compare runs.

One line per sample, in the order read::

    {"rank": 0, "step": 10, "ts": 1700000000.123, "values": {"loss": 1.2345, "samples/s": 812.5}}

`values` holds canonical names (`names.py`); a NaN or an infinity is written as the string
`"nan"`, `"inf"` or `"-inf"` (JSON has no such numbers, and they are the news). `ts` is seconds
since the epoch, to the millisecond. The file is the user's alone (mode 0600): a run's numbers
can tell what it trains.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Iterable, Iterator
from pathlib import Path
from types import TracebackType

from ddptui.core.metrics.sample import MetricSample

FILE_NAME = "metrics.jsonl"  # its name in a run directory
_SPELLED = {"nan": math.nan, "inf": math.inf, "-inf": -math.inf}


def _plain(value: float) -> float | str:
    if math.isfinite(value):
        return value
    return "nan" if value != value else ("inf" if value > 0 else "-inf")


def encode_sample(sample: MetricSample) -> str:
    """A sample as one line of the file (no newline)."""
    values = {name: _plain(value) for name, value in sample.values.items()}
    record = {"rank": sample.rank, "step": sample.step, "ts": round(sample.ts, 3), "values": values}
    return json.dumps(record, separators=(", ", ": "), allow_nan=False)


def decode_sample(line: str) -> MetricSample | None:
    """A line of the file as its sample, or None for a line that is not one (the last line
    of a run cut off mid-write, or one edited by hand)."""
    try:
        record = json.loads(line)
        values: dict[str, float] = {}
        for name, raw in record["values"].items():
            value = _SPELLED[raw] if isinstance(raw, str) else float(raw)
            values[str(name)] = value
        return MetricSample(int(record["rank"]), int(record["step"]), values, float(record["ts"]))
    except (ValueError, KeyError, TypeError, AttributeError):
        return None


def read_samples(path: Path | str) -> Iterator[MetricSample]:
    """Every sample in a metrics file, skipping lines that are not one."""
    with open(path, encoding="utf-8", errors="replace") as file:
        for line in file:
            sample = decode_sample(line)
            if sample is not None:
                yield sample


class MetricsWriter:
    """Appends samples to a metrics file, created 0600; a context manager."""

    def __init__(self, path: Path | str) -> None:
        self.path = Path(path)
        fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        self._file = os.fdopen(fd, "a", encoding="utf-8")

    def write(self, sample: MetricSample) -> None:
        self._file.write(encode_sample(sample) + "\n")

    def write_all(self, samples: Iterable[MetricSample]) -> None:
        self._file.writelines(encode_sample(sample) + "\n" for sample in samples)

    def flush(self) -> None:
        self._file.flush()

    def close(self) -> None:
        self._file.close()

    def __enter__(self) -> MetricsWriter:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        self.close()
