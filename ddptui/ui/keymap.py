"""Provides keymap files: finding, reading and validating them against the console's bindings.

A keymap file is TOML mapping binding ids to a key or a list of keys, optionally on top of a
bundled keymap (`extends`)::

    extends = "vim"
    "job.launch" = "l"
    "app.help" = ["question_mark", "f1"]

`~/.config/ddptui/keymap.toml` (the platform's config dir) is used when `--keymap` is not
given. Textual ignores ids it does not know and keys that can never be pressed, so a typo would
silently leave the default in place; everything is checked here instead, and every problem is
reported at once, naming the file and the line.

`logs.g` is a prefix key (vim's `gg`): `logs.g.<what>` bindings act on the key pressed right
after it, so they are checked for clashes among themselves only.
"""

from __future__ import annotations

import difflib
import os
import re
import string
import tomllib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import platformdirs
from textual.binding import Binding
from textual.dom import DOMNode
from textual.keys import Keys, _character_to_key

from ddptui.core.job.spec import SpecError

MODIFIERS = frozenset({"ctrl", "shift", "alt", "meta", "super", "hyper"})
_NAMED_KEYS = frozenset(
    key.value.rsplit("+", 1)[-1] for key in Keys if not key.value.startswith("<")
) | {_character_to_key(c) for c in string.printable if c.isprintable() and c != " "}
KEY_EXAMPLES = "a, A, 5, ctrl+x, shift+up, f1, enter, escape, pagedown, question_mark"
PREFIX_IDS = frozenset({"logs.g"})
EXTENDS = "extends"
USER_KEYMAP = "keymap.toml"
_TOML_TABLE = re.compile(r"^\s*\[\s*([^\]]+?)\s*\]")
_TOML_KEY = re.compile(r"""^\s*("([^"]+)"|'([^']+)'|([A-Za-z0-9_.-]+))\s*=""")


class KeymapError(SpecError):
    """A keymap file that cannot be used; the message names the file and every problem.

    A SpecError, so `ddptui` reports it like any other bad input, before the screen opens.
    """


@dataclass(frozen=True)
class BindingInfo:
    """One remappable binding: where it lives and what it does."""

    id: str
    key: str
    action: str
    description: str
    scope: str
    owner: str


BindingScopes = Mapping[str, Sequence[type[DOMNode]]]


def declared_bindings(owner: type[DOMNode]) -> list[Binding]:
    """The bindings with ids that `owner` and its base classes declare."""
    found: list[Binding] = []
    for klass in reversed(owner.__mro__):
        declared = klass.__dict__.get("BINDINGS", [])
        found += [b for b in _unexpanded(declared) if b.id]
    return found


def _unexpanded(declared: Iterable[Any]) -> list[Binding]:
    """Bindings as declared (a comma list of keys stays one binding)."""
    out = []
    for item in declared:
        if isinstance(item, Binding):
            out.append(item)
        elif isinstance(item, tuple):
            out.append(Binding(*item))
    return out


def sequence_prefix(binding_id: str) -> str | None:
    """`logs.g` for `logs.g.top` (a key pressed after the prefix), else None."""
    parent = binding_id.rpartition(".")[0]
    return parent if parent in PREFIX_IDS else None


def binding_catalogue(scopes: BindingScopes) -> dict[str, BindingInfo]:
    """Every binding id of the console, with its default key, in the order users meet them."""
    catalogue: dict[str, BindingInfo] = {}
    for scope, owners in scopes.items():
        for owner in owners:
            for b in declared_bindings(owner):
                if b.id and b.id not in catalogue:
                    prefix = sequence_prefix(b.id)
                    where = f"after {prefix}" if prefix else scope
                    catalogue[b.id] = BindingInfo(
                        b.id, b.key, b.action, b.description or b.action, where, owner.__name__
                    )
    return catalogue


def effective_keys(info: BindingInfo, keymap: Mapping[str, str]) -> list[str]:
    return [k.strip() for k in keymap.get(info.id, info.key).split(",") if k.strip()]


def key_problem(key: str) -> str | None:
    """Why `key` is not a key Textual can deliver, or None when it is fine."""
    if not key:
        return "empty key"
    parts = key.split("+")
    if key.endswith("+"):
        return f"{key!r}: write 'plus' for the + key"
    *mods, base = parts
    bad_mods = [m for m in mods if m not in MODIFIERS]
    if bad_mods:
        return f"{key!r}: unknown modifier {bad_mods[0]!r} (use {', '.join(sorted(MODIFIERS))})"
    if len(base) == 1:
        return None if base.isprintable() and base != " " else f"{key!r}: not a printable key"
    if base in _NAMED_KEYS:
        return None
    close = difflib.get_close_matches(base, sorted(_NAMED_KEYS), n=1)
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    return f"{key!r}: {base!r} is not a key name{hint}; examples: {KEY_EXAMPLES}"


def normalize_key(key: str) -> str:
    """Single characters become Textual's long names: '?' -> 'question_mark'."""
    *mods, base = key.split("+")
    if len(base) == 1:
        base = _character_to_key(base)
    return "+".join([*mods, base])


def bundled_keymap_dirs() -> list[Path]:
    """ddptui/keymaps inside the package when installed; keymaps/ beside a source checkout."""
    package = Path(__file__).resolve().parent.parent
    return [package / "keymaps", package.parent / "keymaps"]


def bundled_keymaps() -> list[str]:
    names = {p.stem for d in bundled_keymap_dirs() if d.is_dir() for p in d.glob("*.toml")}
    return sorted(names)


def describe_source(path: Path) -> str:
    """`vim (bundled)` for a keymap shipped with ddptui, else the file's path."""
    bundled = {d.resolve() for d in bundled_keymap_dirs() if d.is_dir()}
    return f"{path.stem} (bundled)" if path.resolve().parent in bundled else str(path)


def user_keymap_file() -> Path | None:
    """`$DDPTUI_CONFIG_DIR/keymap.toml`, else the platform's (~/.config/ddptui/keymap.toml),
    if it exists."""
    override = os.environ.get("DDPTUI_CONFIG_DIR")
    directory = Path(override) if override else Path(platformdirs.user_config_dir("ddptui"))
    path = directory / USER_KEYMAP
    return path if path.is_file() else None


def resolve_keymap_path(name_or_path: str | Path) -> Path:
    """A file path as given, else a bundled keymap by name (`vim`, `default`)."""
    path = Path(name_or_path).expanduser()
    if path.is_file():
        return path
    if path.name == str(name_or_path) and not path.suffix:
        for directory in bundled_keymap_dirs():
            candidate = directory / f"{path.name}.toml"
            if candidate.is_file():
                return candidate
    known = ", ".join(bundled_keymaps()) or "none"
    raise KeymapError(f"keymap {name_or_path}: no such file (bundled keymaps: {known})")


def _flatten(table: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """`[job] launch = "l"` and `"job.launch" = "l"` mean the same binding."""
    flat: dict[str, Any] = {}
    for name, value in table.items():
        key = f"{prefix}{name}"
        if isinstance(value, dict):
            flat.update(_flatten(value, f"{key}."))
        else:
            flat[key] = value
    return flat


def read_keymap_file(path: Path) -> dict[str, Any]:
    try:
        with path.open("rb") as handle:
            return _flatten(tomllib.load(handle))
    except OSError as exc:
        raise KeymapError(f"keymap {path}: cannot read it: {exc.strerror}") from None
    except tomllib.TOMLDecodeError as exc:
        raise KeymapError(f"keymap {path}: not valid TOML: {exc}") from None


def entry_lines(text: str) -> dict[str, int]:
    """The line (1-based) each flattened entry of a keymap file is on, for error messages."""
    lines: dict[str, int] = {}
    table = ""
    for number, line in enumerate(text.splitlines(), start=1):
        header = _TOML_TABLE.match(line)
        if header:
            table = ".".join(p.strip().strip("\"'") for p in header.group(1).split("."))
            continue
        key = _TOML_KEY.match(line)
        if key:
            name = key.group(2) or key.group(3) or key.group(4)
            lines.setdefault(f"{table}.{name}" if table else name, number)
    return lines


def _at(lines: Mapping[str, int], binding_id: str) -> str:
    return f"line {lines[binding_id]}: " if binding_id in lines else ""


def validate_keymap(
    entries: Mapping[str, Any],
    scopes: BindingScopes,
    source: str,
    lines: Mapping[str, int] | None = None,
    base: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """Check ids, key names and clashes; return Textual's keymap (id -> 'key,key').

    `base` is the keymap this file extends (already checked); clashes are checked on the two
    together. `lines` says where each entry is, so every problem names its line.
    """
    catalogue = binding_catalogue(scopes)
    lines = lines or {}
    problems: list[str] = []
    keymap: dict[str, str] = dict(base or {})
    for binding_id, value in entries.items():
        if binding_id == EXTENDS:
            continue
        at = _at(lines, binding_id)
        if binding_id not in catalogue:
            close = difflib.get_close_matches(binding_id, list(catalogue), n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            problems.append(f"{at}unknown binding id {binding_id!r}{hint}")
            continue
        keys = [value] if isinstance(value, str) else value
        if not isinstance(keys, list) or not keys or not all(isinstance(k, str) for k in keys):
            problems.append(f"{at}{binding_id!r}: expected a key or a list of keys, got {value!r}")
            continue
        keys = [k.strip() for key in keys for k in key.split(",")]
        bad = [p for p in (key_problem(k) for k in keys) if p]
        if bad:
            problems += [f"{at}{binding_id!r}: {p}" for p in bad]
            continue
        keymap[binding_id] = ",".join(normalize_key(k) for k in keys)
    if not problems:
        problems += _clashes(catalogue, keymap, entries, lines)
    if problems:
        listing = "\n  ".join(problems)
        if any("unknown binding id" in p for p in problems):
            listing += "\nvalid binding ids: " + ", ".join(sorted(catalogue))
        raise KeymapError(f"keymap {source}:\n  {listing}")
    return keymap


def _clashes(
    catalogue: Mapping[str, BindingInfo],
    keymap: Mapping[str, str],
    entries: Mapping[str, Any],
    lines: Mapping[str, int],
) -> list[str]:
    """Two bindings of one scope on the same key: the keymap would hide one of them."""
    problems = []
    by_scope: dict[str, dict[str, list[str]]] = {}
    for info in catalogue.values():
        scope = by_scope.setdefault(info.scope, {})
        for key in effective_keys(info, keymap):
            scope.setdefault(normalize_key(key), []).append(info.id)
    for scope_name, keys in by_scope.items():
        for key, ids in keys.items():
            if len(ids) > 1 and any(i in keymap for i in ids):
                mine = [i for i in ids if i in entries]
                at = _at(lines, mine[0]) if mine else ""
                both = " and ".join(ids)
                problems.append(f"{at}key {key!r} is bound to both {both} ({scope_name})")
    return problems


def load_keymap(
    name_or_path: str | Path, scopes: BindingScopes, _seen: frozenset[Path] = frozenset()
) -> dict[str, str]:
    """Find, read and validate a keymap file (and the one it extends); raises KeymapError
    naming the file and the line."""
    path = resolve_keymap_path(name_or_path)
    entries = read_keymap_file(path)
    lines = entry_lines(path.read_text(errors="replace"))
    base: dict[str, str] = {}
    parent = entries.get(EXTENDS)
    if parent is not None:
        if not isinstance(parent, str):
            at = _at(lines, EXTENDS)
            raise KeymapError(f"keymap {path}:\n  {at}extends: expected a keymap name or file")
        if path.resolve() in _seen:
            raise KeymapError(f"keymap {path}: extends itself (through {parent!r})")
        if not Path(parent).is_absolute() and (path.parent / parent).is_file():
            parent = str(path.parent / parent)
        base = load_keymap(parent, scopes, _seen | {path.resolve()})
    return validate_keymap(entries, scopes, str(path), lines, base)
