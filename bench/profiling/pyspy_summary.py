"""Summarises a py-spy speedscope profile: where a process's samples go, per thread.

Record with `py-spy record --format speedscope -o prof.json -- python ...`, then
`python -m bench.profiling.pyspy_summary prof.json` prints, for each thread, its share of the
samples and the functions with the most samples on the stack (inclusive) and at the top (self).
"""

from __future__ import annotations

import argparse
import json
from collections import Counter
from pathlib import Path
from typing import Any


def _name(frame: dict[str, Any]) -> str:
    file = str(frame.get("file", ""))
    for marker in ("/ddptui/", "/textual/", "/rich/", "/asyncio/", "/bench/"):
        if marker in file:
            file = marker.strip("/") + "/" + file.split(marker, 1)[1]
            break
    else:
        file = file.rsplit("/", 1)[-1]
    return f"{frame['name']} ({file})"


def summarise(path: Path, top: int = 25, match: str = "") -> str:
    """The report: per thread, inclusive and self shares of its samples."""
    data = json.loads(path.read_text())
    frames = data["shared"]["frames"]
    lines: list[str] = []
    total = sum(sum(p.get("weights") or [1] * len(p["samples"])) for p in data["profiles"])
    for profile in data["profiles"]:
        weights = profile.get("weights") or [1] * len(profile["samples"])
        count = sum(weights)
        if not count:
            continue
        inclusive: Counter[str] = Counter()
        own: Counter[str] = Counter()
        for stack, weight in zip(profile["samples"], weights, strict=True):
            names = [_name(frames[i]) for i in stack]
            if not names:
                continue
            own[names[-1]] += weight
            for name in set(names):
                inclusive[name] += weight
        lines.append(f"## {profile['name']}: {count} samples ({100 * count / total:.0f}%)")
        lines.append("inclusive:")
        for name, n in inclusive.most_common():
            if match and match not in name:
                continue
            lines.append(f"  {100 * n / count:5.1f}%  {name}")
            if len([x for x in lines if x.startswith("  ")]) >= top:
                break
        lines.append("self:")
        for name, n in own.most_common(top):
            lines.append(f"  {100 * n / count:5.1f}%  {name}")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("profile", type=Path)
    parser.add_argument("--top", type=int, default=25)
    parser.add_argument("--match", default="", help="inclusive: only functions whose name has this")
    args = parser.parse_args()
    print(summarise(args.profile, args.top, args.match))


if __name__ == "__main__":
    main()
