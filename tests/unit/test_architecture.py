"""The shape of the code holds: the core runs without the UI, the layers and contracts of
pyproject's import-linter section hold, no import cycle, no module grows past a room's size."""

from __future__ import annotations

import ast
import subprocess
import sys

from tests.cases import ROOT

PACKAGE = ROOT / "ddptui"
MAX_LINES = 400


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


def import_graph() -> dict[str, set[str]]:
    """Module -> the package's modules it imports, anywhere in its body (late imports too),
    leaving out imports made only for type checking."""
    modules = {_module_name(p): p for p in PACKAGE.rglob("*.py")}
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        tree = ast.parse(path.read_text())
        typing_only = {
            id(inner)
            for node in ast.walk(tree)
            if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)
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


def test_every_module_is_a_small_room() -> None:
    big = {
        str(p.relative_to(ROOT)): n
        for p in PACKAGE.rglob("*.py")
        if (n := len(p.read_text().splitlines())) > MAX_LINES
    }
    assert not big, f"split these by role (over {MAX_LINES} lines): {big}"
