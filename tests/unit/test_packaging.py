"""The package list in pyproject.toml ships every package of the console."""

from __future__ import annotations

import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_every_package_is_in_the_list_an_install_ships() -> None:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    listed = set(config["tool"]["setuptools"]["packages"])
    found = {
        ".".join(init.parent.relative_to(ROOT).parts)
        for init in (ROOT / "ddptui").rglob("__init__.py")
    }
    assert found - listed == set(), "pyproject.toml's packages miss these"
