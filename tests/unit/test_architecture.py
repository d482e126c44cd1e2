"""The shape of the code holds: the core runs without the UI, the layers and contracts of
pyproject's import-linter section hold, no import cycle (type-checking imports included), every
package named in ARCHITECTURE.md and nothing it names gone, and big modules reported (failed
only far beyond a room)."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
import warnings

from tests.cases import ROOT
from tests.unit.test_docs import _exists, _path_words

PACKAGE = ROOT / "ddptui"
# A module past REPORT_LINES is listed (a warning: is a second idea moving in?); only one past
# FAIL_LINES fails. Split by use, never to get under a count.
REPORT_LINES = 500
FAIL_LINES = 1000


def test_core_and_headless_do_not_import_textual() -> None:
    code = (
        "import sys\n"
        "import ddptui.core.session.session, ddptui.core.backends.local\n"
        "import ddptui.cli.headless, ddptui.cli.main\n"
        "import ddptui.core.backends.ssh.backend\n"
        "ui = ('textual.', 'ddptui.ui')\n"
        "bad = [m for m in sys.modules if m == 'textual' or m.startswith(ui)]\n"
        "assert not bad, bad\n"
        "assert 'torch' not in sys.modules\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_import_linter_contracts_hold() -> None:
    result = subprocess.run(["lint-imports"], capture_output=True, text=True, cwd=ROOT)
    assert result.returncode == 0, result.stdout + result.stderr


def _module_name(path: object) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)  # type: ignore[attr-defined]
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def import_graph(*packages: str, typing: bool = False) -> dict[str, set[str]]:
    """Module -> the modules of `packages` (default: ddptui) it imports, anywhere in its body
    (late imports too); imports made only for type checking count when `typing` is set."""
    roots = [ROOT / p for p in packages or ("ddptui",)]
    modules = {_module_name(p): p for root in roots for p in root.rglob("*.py")}
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        tree = ast.parse(path.read_text())
        typing_only = {
            id(inner)
            for node in ast.walk(tree)
            if not typing and isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)
            for inner in ast.walk(node)
        }
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        targets: set[str] = set()
        for node in ast.walk(tree):
            if id(node) in typing_only:
                continue
            if isinstance(node, ast.Import):
                targets.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join([*anchor, base] if base else anchor)
                targets.add(base)
                targets.update(f"{base}.{alias.name}" for alias in node.names)
        graph[name] = {t for t in targets if t in modules and t != name}
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle as a path of module names, or None."""
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                return [*stack[stack.index(nxt) :], nxt]
            if nxt not in state and (cycle := visit(nxt)):
                return cycle
        stack.pop()
        state[node] = 2
        return None

    for start in sorted(graph):
        if start not in state and (cycle := visit(start)):
            return cycle
    return None


def test_the_cycle_finder_finds_a_cycle() -> None:
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None


def test_no_import_cycle_in_the_package() -> None:
    assert find_cycle(import_graph()) is None


def test_no_import_cycle_even_for_type_checking_in_the_package_bench_or_testbed() -> None:
    assert find_cycle(import_graph("ddptui", typing=True)) is None
    assert find_cycle(import_graph("bench", "testbed", typing=True)) is None


def _package_rows(text: str) -> dict[str, str]:
    """ARCHITECTURE.md's table: each package's row, by the package it names first."""
    return {m.group(1): m.group(2) for m in re.finditer(r"^\| `([^`]+)` \|(.*)\|$", text, re.M)}


def test_architecture_names_every_package_and_each_name_is_there() -> None:
    """One row per package (every directory of ddptui/ with an __init__.py), and nothing it
    names is gone: its paths, and the bare module names in a package's row."""
    text = (ROOT / "ARCHITECTURE.md").read_text()
    rows = _package_rows(text)
    packages = sorted(f"{p.parent.relative_to(PACKAGE)}/" for p in PACKAGE.rglob("*/__init__.py"))
    assert [p for p in packages if p not in rows] == [], "ARCHITECTURE.md has no row for them"
    gone = [w for w in _path_words(text) if not _exists(ROOT / "ARCHITECTURE.md", w)]
    for package, row in rows.items():
        names = re.findall(r"`([\w.]+\.(?:py|tcss|sh))`", row)
        gone += [f"{package}{n}" for n in names if not (PACKAGE / package / n).is_file()]
    assert not gone, f"ARCHITECTURE.md names what is not there: {gone}"


def test_the_session_is_one_package_and_screens_mix_in_nothing() -> None:
    assert not list((PACKAGE / "core").glob("session*.py"))
    for path in (PACKAGE / "ui" / "screens").glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef):
                assert len(node.bases) <= 1, f"{path.name}: {node.name} mixes in {node.bases}"


def test_every_module_is_a_room_not_a_warehouse() -> None:
    sizes = {
        str(p.relative_to(ROOT)): len(p.read_text().splitlines()) for p in PACKAGE.rglob("*.py")
    }
    big = {path: n for path, n in sizes.items() if n > REPORT_LINES}
    if big:
        warnings.warn(f"modules over {REPORT_LINES} lines (one idea each?): {big}", stacklevel=1)
    huge = {path: n for path, n in big.items() if n > FAIL_LINES}
    assert not huge, f"over {FAIL_LINES} lines: more than one idea lives here: {huge}"
