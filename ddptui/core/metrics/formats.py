"""Provides one reader per line format that trainers print metrics in, each a pure function.

Each takes a line's text (the rank's prefix already taken off) and returns its `LineMetrics`,
or None when the line is not in its format. They are cheap to call on a line that is not
theirs: each looks for its format's marks with `in` before any regular expression runs.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

from ddptui.core.metrics.names import IGNORED_KEYS, STEP_KEYS, canonical_name, is_known
from ddptui.core.metrics.numbers import NUMBER, read_number, read_printed

_KEY = r"[A-Za-z_][\w/.\-]*"
# A value as the pair readers take it: loose on purpose (one character class, no backtracking
# to speak of); `read_number` then says whether it is a number (`numbers.NUMBER`).
_VALUE = r"[-+]?[\d.][\w.,+\-%]*|[-+]?(?:[nN]a[nN]|[iI]nf)\w*"
_KEY_VALUE = re.compile(rf"({_KEY})\s*=\s*({_VALUE})")
_KEY_COLON = re.compile(rf"({_KEY}(?: {_KEY})?):\s*({_VALUE})")
_DICT_ITEM = re.compile(rf"""['"]([^'"\n]{{1,64}})['"]\s*:\s*['"]?({_VALUE})""")
_TITAN_MEMORY = re.compile(rf"memory:\s*({NUMBER})\s*\(\s*({NUMBER})\s*\)")
_MEGATRON_HEAD = re.compile(r"\biteration\s+(\d+)\s*(?:/\s*\d+)?")
_MEGATRON_ITEM = re.compile(rf"\s*([^:|]+?)\s*:\s*({NUMBER})\s*")
_LIGHTNING_HEAD = re.compile(r"Epoch (\d+):.*?\|\s*(\d+)/(\d+)\s*\[")
_LIGHTNING_RATE = re.compile(r"(\d+(?:\.\d+)?)(it/s|s/it)\b")
_RATE_WORDS = frozenset({"samples", "tokens", "tok", "images", "img"})  # before `/s`
_RATE_NAMES = frozenset({"samples/s", "tokens/s"})


@dataclass(frozen=True, slots=True)
class LineMetrics:
    """What one line reports: its step if it says one, and its values by canonical name."""

    step: int | None
    values: dict[str, float]


_VALUE_ROLE, _IGNORED_ROLE = -1, -2
_KEYS: dict[str, tuple[str, int, bool]] = {}  # printed key -> (name, role, is_known)
_KEYS_KEPT = 4096  # printed keys remembered; beyond, each new one is worked out again


def _key(key: str) -> tuple[str, int, bool]:
    """A printed key's name, its role (a value, ignored, or a step key's preference), and
    whether the name is a known metric; remembered, since lines repeat their keys."""
    found = _KEYS.get(key)
    if found is None:
        name = canonical_name(key)
        if name in IGNORED_KEYS:
            found = (name, _IGNORED_ROLE, False)
        else:
            found = (name, STEP_KEYS.get(name, _VALUE_ROLE), is_known(name))
        if len(_KEYS) < _KEYS_KEPT:
            _KEYS[key] = found
    return found


def _value(text: str) -> float | None:
    """A pair's value; the common case (`0.5`) is one `float`."""
    try:
        value = float(text)
    except ValueError:
        return read_printed(text.rstrip(",.;:"))
    if value - value != 0.0 and value == value:  # an infinity: spelled, or an overflow?
        return read_number(text)
    return value


def _collect(
    pairs: Iterable[tuple[str, str]], require_known: bool, epoch_step: bool = False
) -> LineMetrics | None:
    """The line's values and step from its (key, number) pairs.

    A step key (`step`, `iteration`, ...) gives the step, the finest printed winning; `epoch`
    counts only with `epoch_step` (a Trainer's `'epoch': 0.5` is a value) and when whole. With
    `require_known`, a line none of whose names is a training metric gives nothing: the
    generic readers would otherwise take every `port=29500` for a metric.
    """
    values: dict[str, float] = {}
    step: int | None = None
    best = 99
    epoch: float | None = None
    known = not require_known
    for key, text in pairs:
        name, role, is_metric = _KEYS.get(key) or _key(key)
        if role == _IGNORED_ROLE:
            continue
        value = _value(text)
        if value is None:
            continue
        if role == _VALUE_ROLE:
            values[name] = value
            known = known or is_metric
            continue
        if name == "epoch":
            epoch = value
            if not epoch_step:
                continue
        whole = value == value and 0 <= value < 1e15 and value.is_integer()
        if whole and role < best:
            step, best = int(value), role
    if epoch is not None and best != STEP_KEYS["epoch"]:
        values["epoch"] = epoch
    if not values or not known:
        return None
    return LineMetrics(step, values)


def _rates(text: str) -> list[tuple[str, str]]:
    """(`samples/s`, number) for each rate in words: `throughput: 812.5 samples/s`. Found by
    `str.find` and the two words before it: a regular expression here cost more than all the
    rest of a line's reading."""
    pairs: list[tuple[str, str]] = []
    at = text.find("/s")
    while at >= 0:
        end = at + 4 if text.startswith("ec", at + 2) else at + 2
        after = text[end : end + 4]
        if not (after[:1].isalnum() or after[:1] == "_" or after.lstrip()[:1] in ("=", ":")):
            words = text[max(0, at - 48) : at].split()
            if len(words) >= 2 and words[-1].lower() in _RATE_WORDS:
                pairs.append((f"{words[-1].lower()}/s", words[-2].lstrip("(:=")))
        at = text.find("/s", end)
    return pairs


def parse_dict(text: str) -> LineMetrics | None:
    """A dict or JSON line: Hugging Face's Trainer `{'loss': 1.23, 'epoch': 0.5}` and JSON
    lines `{"step": 10, "loss": 1.2}`. Nested keys count by their own name. The Trainer's
    summary at the end (`train_runtime`, `train_loss`) gives the run's mean loss as
    `run_mean_loss`, so that it is not taken for the last step's."""
    if "{" not in text or ("'" not in text and '"' not in text) or not is_known(text.lower()):
        return None
    found = _collect(_DICT_ITEM.findall(text), require_known=True)
    if found is not None and "train_runtime" in found.values and "loss" in found.values:
        found.values["run_mean_loss"] = found.values.pop("loss")  # the Trainer's last word
    return found


def parse_torchtitan(text: str) -> LineMetrics | None:
    """TorchTitan's `step: 10  loss: 7.2345  grad_norm: 1.2345  memory: 30.12GiB(38.05%)
    tps: 12,345  tflops: 345.67  mfu: 34.95%`: memory becomes `memory_gib` and `memory_pct`."""
    if "step:" not in text or "loss:" not in text:
        return None
    found = _collect(_KEY_COLON.findall(text), require_known=False)
    if found is None:
        return None
    memory = _TITAN_MEMORY.search(text) if "memory:" in text else None
    if memory is not None:
        found.values.pop("memory", None)
        gib, pct = read_number(memory[1]), read_number(memory[2])
        if gib is not None:
            found.values["memory_gib"] = gib
        if pct is not None:
            found.values["memory_pct"] = pct
    return found


def parse_megatron(text: str) -> LineMetrics | None:
    """Megatron-LM's `iteration 100/ 1000 | consumed samples: 12800 | ... | lm loss:
    7.1E+00 | grad norm: 1.2 |` (printed by the last rank), and its validation line."""
    if "iteration" not in text or "|" not in text:
        return None
    head, _, rest = text.partition("|")
    match = _MEGATRON_HEAD.search(head)
    if match is None:
        return None
    pairs = []
    for part in rest.split("|"):
        item = _MEGATRON_ITEM.fullmatch(part)
        if item is not None:
            pairs.append((item[1], item[2]))
    found = _collect(pairs, require_known=False)
    if found is None:
        return None
    return LineMetrics(int(match[1]), found.values)


def parse_lightning(text: str) -> LineMetrics | None:
    """Lightning's progress bar `Epoch 1:  45%|####  | 450/1000 [00:10<00:12, 44.20it/s,
    v_num=0, train_loss=0.231]`: its step is counted over epochs (epoch * batches + batch)."""
    if "/s" not in text and "s/it" not in text:
        return None
    match = _LIGHTNING_HEAD.search(text) if "Epoch " in text else None
    if match is None:
        return None
    values = _collect(_KEY_VALUE.findall(text, match.end()), require_known=False)
    found = dict(values.values) if values is not None else {}
    rate = _LIGHTNING_RATE.search(text, match.end())
    if rate is not None:
        per = float(rate[1])
        if rate[2] == "it/s":
            found["steps/s"] = per
        elif per > 0:
            found["steps/s"] = 1.0 / per
    if not found:
        return None
    epoch, batch, batches = int(match[1]), int(match[2]), int(match[3])
    return LineMetrics(epoch * batches + batch, found)


def parse_key_values(text: str) -> LineMetrics | None:
    """Generic `key=value` and `key: value` lines: the bundled trainers (`rank 0 epoch=1/10
    loss=2.3 train_acc=0.1 samples/s=812.5`), Lightning's and many a script's own print, and
    rates in words (`throughput: 812.5 samples/s`)."""
    if not is_known(text.lower()):
        return None
    pairs: list[tuple[str, str]] = []
    if "=" in text:
        pairs += _KEY_VALUE.findall(text)
    if ": " in text or ":\t" in text:
        pairs += _KEY_COLON.findall(text)
    if "/s" in text:
        pairs += _rates(text)
    if not pairs:
        return None
    found = _collect(pairs, require_known=True, epoch_step=True)
    if found is not None and "throughput" in found.values and _RATE_NAMES & found.values.keys():
        del found.values["throughput"]  # `throughput: 812.5 samples/s`, read with its unit
    return found


# In the order tried: the formats with marks of their own first, the generic reader last.
FORMATS = (parse_dict, parse_torchtitan, parse_megatron, parse_lightning, parse_key_values)


def parse_line(text: str) -> LineMetrics | None:
    """The first format's reading of a line, or None if no format reads metrics in it.

    Every format's lines speak of training (`names.is_known`) or are Megatron's (which
    prints `iteration` first): a line that is neither is declined at the cost of one `lower`
    and a few `in`, before any format is asked.
    """
    low = text.lower()
    if not is_known(low) and "iteration" not in low:
        return None
    for parse in FORMATS:
        found = parse(text)
        if found is not None:
            return found
    return None
