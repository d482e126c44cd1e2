"""Provides one reader per line format that trainers print metrics in, each a pure function.

Each takes a line's text (the rank's prefix already taken off) and returns its `LineMetrics`,
or None when the line is not in its format. They are cheap to call on a line that is not
theirs: each looks for its format's marks with `in` before any regular expression runs.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

from ddptui.core.metrics.names import (
    ALIASES,
    IGNORED_KEYS,
    STEP_KEYS,
    canonical_name,
    is_known,
)
from ddptui.core.metrics.numbers import NUMBER, read_number, read_printed

_KEY = r"[A-Za-z_][\w/.\-]*"
# A value as the pair readers take it: loose on purpose (one character class, no backtracking
# to speak of); `read_number` then says whether it is a number (`numbers.NUMBER`).
_VALUE = r"[-+]?[\d.][\w.,+\-%]*|[-+]?(?:[nN]a[nN]|[iI]nf)\w*"
_KEY_COLON = re.compile(rf"({_KEY}(?: {_KEY})?):\s*({_VALUE})")
_DICT_ITEM = re.compile(rf"""['"]([^'"\n]{{1,64}})['"]\s*:\s*['"]?({_VALUE})""")
_TITAN_MEMORY = re.compile(rf"memory:\s*({NUMBER})\s*\(\s*({NUMBER})\s*\)")
_MEGATRON_HEAD = re.compile(r"\biteration\s+(\d+)\s*(?:/\s*\d+)?")
_MEGATRON_ITEM = re.compile(rf"\s*([^:|]+?)\s*:\s*({NUMBER}|\d+(?:\.\d+)?(?=TFLOPS))(?:TFLOPS)?\s*")
_LIGHTNING_HEAD = re.compile(r"Epoch (\d+):.*?\|\s*(\d+)/(\d+)\s*\[")
_RICH_HEAD = re.compile(r"Epoch (\d+)/\d+\s.*?\s(\d+)/(\d+)\s")  # Lightning's rich bar
_BAR_RATE = re.compile(r"(\d+(?:\.\d+)?)(it/s|s/it)\b")
_RATE_WORDS = frozenset({"samples", "tokens", "tok", "images", "img"})  # before `/s`
_RATE_NAMES = frozenset({"samples/s", "tokens/s"})

# A printed pair: a key of one or two words, `=`, `:`, `-->` or spaces, and a number. The key
# starts no word, path or file name (`/ckpt/epoch=3`, `epoch=0-step=9.ckpt`); the number is
# no version (`3.11.7`), no clock (`10:00:00`), no bar's percentage (`45%|`) and no part of
# a path (`lr=0.001/ckpt`); `[` or
# `tensor(` before it is taken off (`lr=[0.0001]`, `tensor(2.3, device='cuda:0')`); a
# `/ 1000` after it is kept apart: a step's position, never a value (`450/1000`).
_NAME = r"[A-Za-z_][\w/.\-@]*+"  # possessive: a key never gives back its letters
_PAIR = re.compile(
    rf"(?<![\w/.\-@])({_NAME}(?: {_NAME})?)(\s*+(?:[=:]|-->)\s*+|\s++)(?:tensor\(|\[)?"
    r"([-+]?(?:\d[\d,]*(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?(?:\s?(?:[KMGT]i?B|%|ms|s|[kKMGT])"
    r"(?![A-Za-z]))?|[-+]?(?:[nN]a[nN]|[iI]nf(?:inity)?|INF)(?![A-Za-z]))"
    r"(?![\w.@%]|:\d|\||/(?!\s*\d))(\s*/\s*\d+)?"
)
# Where a line is within an epoch: its epoch, then `[10/5005]`, `[640/60000 (1%)]` or
# `200/ 2983 batches`; `[0/25][100/782]` is the epoch then the batch.
_EPOCH_MARK = re.compile(
    r"\b[Ee][Pp][Oo][Cc][Hh]\b(?:\s*\(\w+\))?\s*[:=]?\s*\[?\s*(\d+)(?:\s*/\s*\d+)?\s*\]?"
    r"|^\s*Train(?:ing)?:\s+(\d+)\s+(?=\[)"
)
_AT = re.compile(r"\[\s*(\d+)\s*/\s*(\d+)\s*[\](]|(\d+)\s*/\s*(\d+)\s+batches\b")
_LEADING_STEP = re.compile(r"^\s*\d+\|(\d+)\|")  # torchtune's bar: `1|10|Loss: 1.23`
_BRACKET_STEP = re.compile(r"(?:^|\]\s)\[(\d+)\]\s")  # clu's LoggingWriter: `[1000] loss=..`
_GLOBAL_STEP = re.compile(
    r"\bglobal_step=(\d+)"
)  # DeepSpeed's `epoch=0/micro_step=8/global_step=2`
# A Python warning: `file:line: Category: message`, whatever the file's name.
_WARNING = re.compile(r":\d+: \w*Warning: ")
# A key that names a file (`torch/optim/lr_scheduler.py:143: UserWarning`) is no metric.
_FILE = re.compile(
    r"\.(?:py|pyc|pyx|c|cc|cpp|cxx|h|hpp|cu|cuh|so|rs|go|java|js|ts|sh|log|txt|json|ya?ml|"
    r"toml|ckpt|pt|pth|bin|safetensors)$"
)
# A table's header: words only, one of them a metric (YOLO's `Epoch GPU_mem box_loss ...`,
# fastai's `epoch train_loss valid_loss accuracy time`).
_HEADER = re.compile(r"\s*[A-Za-z_][\w/@\-]*(?:\s+[A-Za-z_][\w/@\-]*){2,}\s*")
_ROW_BAR = re.compile(r"\|\s*(\d+)/(\d+)\s*\[")


@dataclass(frozen=True, slots=True)
class LineMetrics:
    """What one line reports: its step if it says one, and its values by canonical name."""

    step: int | None
    values: dict[str, float]


_VALUE_ROLE, _IGNORED_ROLE = -1, -2
_KEYS: dict[str, tuple[str, int, bool]] = {}  # printed key -> (name, role, is_known)
_KEYS_KEPT = 4096  # printed keys remembered; beyond, each new one is worked out again


def _name(key: str) -> str:
    """A printed key's name. Of two words, the pair's name where it is one we know (`lm
    loss`, `global step`, `max mem`) or its last word is a metric (`Avg accuracy`), else
    the last word's (`end of epoch 1`, `remaining time`, `4096 samples in 5.0 s`)."""
    name = canonical_name(key)
    if key.count(" ") == 1:
        last = key.rpartition(" ")[2]
        if not (
            name in STEP_KEYS or name in IGNORED_KEYS or _plain(key) in ALIASES or is_known(last)
        ):
            name = canonical_name(last)
    return name


def _plain(key: str) -> str:
    return key.strip().lower().replace(" ", "_").replace("-", "_")


def _key(key: str) -> tuple[str, int, bool]:
    """A printed key's name, its role (a value, ignored, or a step key's preference), and
    whether the name is a known metric; remembered, since lines repeat their keys."""
    found = _KEYS.get(key)
    if found is None:
        name = _name(key)
        if name in IGNORED_KEYS or len(name) < 2 or _FILE.search(name) is not None:
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


@dataclass(slots=True)
class _Reading:
    """What a line's pairs say, before its step is decided."""

    values: dict[str, float]
    step: int | None = None  # printed by a step key, alone
    role: int = 99  # that key's preference
    epoch: float | None = None
    at: tuple[int, int] | None = None  # a step key's position: `step 10/100`


def _collect(pairs: Iterable[tuple[str, str, str, str]], require_known: bool) -> _Reading | None:
    """The values, step, epoch and position in a line's (key, separator, number, `/ total`)
    pairs.

    A step key (`step`, `iteration`, ...) gives the step, the finest printed winning; one
    printed with its total (`step 10/100`) gives a position within the epoch instead. A key
    followed by its number after spaces only (`loss 0.5`) counts only if it names a metric
    or a step: `Time 0.5` and `rank 0` do not. With `require_known`, a line none of whose
    names is a training metric gives nothing: the generic readers would otherwise take every
    `port=29500` for a metric.
    """
    reading = _Reading({})
    values = reading.values
    known = not require_known
    for key, sep, text, total in pairs:
        name, role, is_metric = _KEYS.get(key) or _key(key)
        if role == _IGNORED_ROLE or (role == _VALUE_ROLE and not is_metric and sep.isspace()):
            continue
        value = _value(text)
        if value is None:
            continue
        if role == _VALUE_ROLE:
            if not total:  # `9837/10000` is a count, not a measurement
                values[name] = value
                known = known or is_metric
            continue
        if name == "epoch":
            reading.epoch = value
            continue
        if not (value == value and 0 <= value < 1e15 and value.is_integer()):
            continue
        if total:
            reading.at = (int(value), int(total.lstrip().lstrip("/")))
        elif role < reading.role:
            reading.step, reading.role = int(value), role
    if not known:
        return None
    return reading


def _pairs(text: str, start: int = 0) -> list[tuple[str, str, str, str]]:
    return _PAIR.findall(text, start)


def _position(text: str, reading: _Reading) -> int | None:
    """The step a position within an epoch says: epoch x batches + batch (`Epoch: [2][
    100/5005]` is 10110), or the batch where no epoch is printed (`Iter(train) [100/90000]`)."""
    if reading.at is None and "batches" not in text and "[" not in text:
        return None
    epoch: int | None = None
    start = 0
    mark = _EPOCH_MARK.search(text) if "poch" in text or "Train" in text else None
    if mark is not None:
        epoch, start = int(mark[1] or mark[2]), mark.end()
    at = _AT.search(text, start)
    if at is not None:
        if at[1] is None:
            batch, batches = int(at[3]), int(at[4])
        else:
            batch, batches = int(at[1]), int(at[2])
            then = _AT.match(text, at.end()) if epoch is None else None
            if then is not None and then[1] is not None:  # `[0/25][100/782]`
                epoch, batch, batches = batch, int(then[1]), int(then[2])
    elif reading.at is not None:
        batch, batches = reading.at
    else:
        return None
    if epoch is None and reading.epoch is not None and reading.epoch.is_integer():
        epoch = int(reading.epoch)
    return batch if epoch is None else epoch * batches + batch


def _bar_rate(text: str, start: int = 0) -> float | None:
    """Steps a second from a progress bar's rate (`44.1it/s`, `1.25s/it`)."""
    rate = _BAR_RATE.search(text, start)
    if rate is None:
        return None
    per = float(rate[1])
    if rate[2] == "it/s":
        return per
    return 1.0 / per if per > 0 else None


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
    `run_mean_loss`, so that it is not taken for the last step's. A Trainer's `epoch` is a
    fraction (a value), not a step; a step or epoch printed before the dict is the line's
    (accelerate's `epoch 0: {'accuracy': 0.77}`)."""
    if "{" not in text or ("'" not in text and '"' not in text) or not is_known(text.lower()):
        return None
    items = [(key, ":", value, "") for key, value in _DICT_ITEM.findall(text)]
    reading = _collect(items, require_known=True)
    if reading is None or not (reading.values or reading.epoch is not None):
        return None
    values = reading.values
    if reading.epoch is not None:
        values["epoch"] = reading.epoch
    step = reading.step
    brace = text.index("{")
    if step is None and brace > 0:
        head = _collect(_pairs(text[:brace]), require_known=False)
        if head is not None:
            step = head.step if head.step is not None else _whole(head.epoch)
    if not values:
        return None
    if "train_runtime" in values and "loss" in values:
        values["run_mean_loss"] = values.pop("loss")  # the Trainer's last word
    return LineMetrics(step, values)


def _whole(value: float | None) -> int | None:
    if value is None or not (0 <= value < 1e15 and value.is_integer()):
        return None
    return int(value)


def parse_torchtitan(text: str) -> LineMetrics | None:
    """TorchTitan's `step: 10  loss: 7.2345  grad_norm: 1.2345  memory: 30.12GiB(38.05%)
    tps: 12,345  tflops: 345.67  mfu: 34.95%`: memory becomes `memory_gib` and `memory_pct`."""
    if "step:" not in text or "loss:" not in text:
        return None
    items = [(key, ":", value, "") for key, value in _KEY_COLON.findall(text)]
    reading = _collect(items, require_known=False)
    if reading is None:
        return None
    values = reading.values
    memory = _TITAN_MEMORY.search(text) if "memory:" in text else None
    if memory is not None:
        gib, pct = read_number(memory[1]), read_number(memory[2])
        if gib is not None:
            values["memory_gib"] = gib
        if pct is not None:
            values["memory_pct"] = pct
    if not values:
        return None
    return LineMetrics(reading.step, values)


def parse_megatron(text: str) -> LineMetrics | None:
    """Megatron-LM's `iteration 100/ 1000 | consumed samples: 12800 | ... | lm loss:
    7.1E+00 | grad norm: 1.2 |` (printed by the last rank), its validation line, and
    GPT-NeoX's, which prints `samples/sec: 12.3 |` before the iteration."""
    if "iteration" not in text or "|" not in text:
        return None
    parts = text.split("|")
    match = None
    for at, part in enumerate(parts[:2]):
        match = _MEGATRON_HEAD.search(part)
        if match is not None:
            del parts[at]
            break
    if match is None:
        return None
    pairs = []
    for part in parts:
        item = _MEGATRON_ITEM.fullmatch(part)
        if item is not None:
            pairs.append((item[1], ":", item[2], ""))
    reading = _collect(pairs, require_known=False)
    if reading is None or not reading.values:
        return None
    return LineMetrics(int(match[1]), reading.values)


def parse_lightning(text: str) -> LineMetrics | None:
    """Lightning's progress bar `Epoch 1:  45%|####  | 450/1000 [00:10<00:12, 44.20it/s,
    v_num=0, train_loss=0.231]` (and its rich bar, `Epoch 1/9 ━━━ 450/1000 ...`): its step
    is counted over epochs (epoch * batches + batch) unless a step is logged with it
    (NeMo's `global_step=99.00`)."""
    if "/s" not in text and "s/it" not in text:
        return None
    if "Epoch " not in text:
        return None
    match = _LIGHTNING_HEAD.search(text)
    if match is None and "━" in text:
        match = _RICH_HEAD.search(text)
    if match is None:
        return None
    reading = _collect(_pairs(text, match.end()), require_known=False)
    found = reading.values if reading is not None else {}
    rate = _bar_rate(text, match.end())
    if rate is not None:
        found["steps/s"] = rate
    if not found:
        return None
    if reading is not None and reading.step is not None:
        return LineMetrics(reading.step, found)
    epoch, batch, batches = int(match[1]), int(match[2]), int(match[3])
    return LineMetrics(epoch * batches + batch, found)


def parse_key_values(text: str) -> LineMetrics | None:
    """Lines of pairs, however a script prints them: `key=value` (the bundled trainers'
    `rank 0 epoch=1/10 loss=2.3 samples/s=812.5`), `key: value` (torchvision's, mmengine's,
    detectron2's, Keras's), `key value` (nanoGPT's `iter 100: loss 4.2012`, fairseq's,
    `step 40 loss 0.000123 lr 1e+06`), `Key --> value` (nanoT5's), rates in words
    (`throughput: 812.5 samples/s`) and a progress bar's rate (`1.00it/s`).

    The step: one printed alone (`step`, `iter`, `num_updates`, ...); else the line's
    position within its epoch counted over epochs (`Epoch: [2][ 100/5005]`, `step 10/100`);
    else a whole epoch (`Epoch 3 | loss 0.5`). An epoch that is not part of the step is kept
    as a value (`epoch`). An argparse `Namespace(lr=0.1, ...)` is settings and a Python
    warning (`file:line: UserWarning: ...`) is news of the code, not metrics.
    """
    if not is_known(text.lower()) or "Namespace(" in text:
        return None
    if "Warning: " in text and _WARNING.search(text) is not None:
        return None
    pairs = _pairs(text)
    if "/s" in text:
        pairs += [(name, "=", number, "") for name, number in _rates(text)]
    if not pairs:
        return None
    reading = _collect(pairs, require_known=True)
    if reading is None:
        return None
    values = reading.values
    if not values:
        return None
    if "throughput" in values and _RATE_NAMES & values.keys():
        del values["throughput"]  # `throughput: 812.5 samples/s`, read with its unit
    if "%|" in text and ("it/s" in text or "s/it" in text):
        rate = _bar_rate(text, text.index("%|"))
        if rate is not None:
            values["steps/s"] = rate
    step = reading.step
    epoch = reading.epoch
    if step is None and "|" in text and (lead := _LEADING_STEP.match(text)) is not None:
        step = int(lead[1])
    if step is None and ("] [" in text or text.startswith("[")):
        lead = _BRACKET_STEP.search(text)
        step = int(lead[1]) if lead is not None else None
    if step is None and "global_step=" in text:
        lead = _GLOBAL_STEP.search(text)
        step = int(lead[1]) if lead is not None else None
    if step is None and "/" in text:
        step = _position(text, reading)
        if step is not None:
            epoch = None  # counted in the step
    if step is None:
        step = _whole(epoch)
        if step is not None:
            epoch = None
    if epoch is not None:
        values["epoch"] = epoch
    return LineMetrics(step, values)


def read_header(text: str) -> tuple[str, ...] | None:
    """A column table's header, its names as printed: words only (no number), three or
    more, one of them a metric; None if the line is not one."""
    if _HEADER.fullmatch(text) is None or not is_known(text.lower()):
        return None
    return tuple(text.split())


def parse_row(text: str, header: tuple[str, ...]) -> LineMetrics | None:
    """A row of a column table under its header (`read_header`): YOLO's `  1/100  2.61G
    1.234  2.345  1.456  45  640: 100%|███| 8/8 [00:02<00:00, 3.21it/s]` under `Epoch
    GPU_mem box_loss cls_loss dfl_loss Instances Size`, fastai's `0  0.5234  0.3123  0.9012
    00:12`. The metrics' columns are read (not sizes, counts or times); the step is the
    epoch's column, counted over the bar's batches where a bar follows."""
    bar = text.find("%|")
    cells = (text[:bar].rpartition(":")[0] if bar >= 0 else text).split()
    if len(cells) != len(header):
        return None
    values: dict[str, float] = {}
    epoch: int | None = None
    for key, cell in zip(header, cells, strict=True):
        name, role, is_metric = _KEYS.get(key) or _key(key)
        if name == "epoch":
            whole = _whole(_value(cell.partition("/")[0]))
            if whole is None:
                return None
            epoch = whole
        elif role == _VALUE_ROLE and is_metric:
            value = _value(cell)
            if value is None:
                return None
            values[name] = value
    if not values:
        return None
    step = epoch
    if bar >= 0:
        rate = _bar_rate(text, bar)
        if rate is not None:
            values["steps/s"] = rate
        at = _ROW_BAR.search(text, bar)
        if at is not None:
            batch, batches = int(at[1]), int(at[2])
            step = batch if epoch is None else epoch * batches + batch
    return LineMetrics(step, values)


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
