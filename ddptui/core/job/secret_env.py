"""Provides the one decision of which environment variables of a job are secret, and masking.

A secret's value goes only into the job's processes' environment (and, for a batch script,
into a private file the script sources). Everything ddptui shows or writes (the screen,
headless stdout, events, spec.json, plan.json, commands.sh, job.sbatch, history, saved logs)
carries MASK instead; everything that shows or writes a job's environment asks this module.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

# A variable whose name contains one of these words is secret (HF_TOKEN, WANDB_API_KEY,
# AWS_SECRET_ACCESS_KEY, DB_PASSWORD, ...); others are made secret with --secret-env NAME or
# a profile's `secret_env = [...]`.
SECRET_WORDS = ("TOKEN", "SECRET", "PASSWORD", "PASSWD", "KEY", "CREDENTIAL")
MASK = "***"


def is_secret(name: str, extra: Iterable[str] = ()) -> bool:
    upper = name.upper()
    return name in set(extra) or any(word in upper for word in SECRET_WORDS)


def secret_names(env: Mapping[str, str], extra: Iterable[str] = ()) -> frozenset[str]:
    named = set(extra)
    return frozenset(k for k in env if is_secret(k, named))


def mask_env(env: Mapping[str, str], extra: Iterable[str] = ()) -> dict[str, str]:
    """The environment as it may be shown or written: secret values replaced by MASK."""
    named = set(extra)
    return {k: MASK if is_secret(k, named) and v else v for k, v in env.items()}


def unmask_env(shown: Mapping[str, str], real: Mapping[str, str]) -> dict[str, str]:
    """An environment edited from its masked form: a value left as MASK keeps its real one."""
    return {k: real.get(k, v) if v == MASK else v for k, v in shown.items()}


def secret_values(env: Mapping[str, str], extra: Iterable[str] = ()) -> tuple[str, ...]:
    """The secret values themselves, longest first, for scrubbing text that may echo them."""
    named = set(extra)
    found = {v for k, v in env.items() if v and v != MASK and is_secret(k, named)}
    return tuple(sorted(found, key=len, reverse=True))


def scrub(text: str, values: Iterable[str]) -> str:
    """`text` with every occurrence of a secret value replaced by MASK."""
    for value in values:
        if value in text:
            text = text.replace(value, MASK)
    return text


def scrub_bytes(data: bytes, values: Iterable[str]) -> bytes:
    for value in values:
        raw = value.encode()
        if raw in data:
            data = data.replace(raw, MASK.encode())
    return data


class StreamScrubber:
    """Masks secret values in a byte stream that arrives in chunks: a value cut in two by a
    chunk boundary is masked too (the tail that could begin a value waits for the next chunk).
    """

    def __init__(self, values: Iterable[str]) -> None:
        self._values = tuple(v.encode() for v in values if v)
        self._held = b""

    def feed(self, chunk: bytes) -> bytes:
        if not self._values:
            return chunk
        data = scrub_bytes(self._held + chunk, (v.decode() for v in self._values))
        keep = self._partial_tail(data)
        self._held = data[len(data) - keep :] if keep else b""
        return data[: len(data) - keep]

    def flush(self) -> bytes:
        held, self._held = self._held, b""
        return held

    def _partial_tail(self, data: bytes) -> int:
        """Length of the longest end of `data` that is the start of a secret value."""
        longest = 0
        for value in self._values:
            for size in range(min(len(value) - 1, len(data)), longest, -1):
                if data.endswith(value[:size]):
                    longest = size
                    break
        return longest
