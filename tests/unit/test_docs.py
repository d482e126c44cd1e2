"""The docs stay true: every file a doc names exists, the keys page is what the console's
bindings make it, the README fits a screen's reading and names the test command CI runs."""

from __future__ import annotations

import importlib
import pkgutil
import re
from pathlib import Path

from ddptui.core.diagnose import signatures
from ddptui.core.diagnose.verdict import Role
from ddptui.core.events import Event
from ddptui.core.monitor import causes as causes_module
from ddptui.core.story.incident import IncidentKind
from ddptui.ui import keys_doc
from tests.cases import ROOT

DOCS = [
    ROOT / "README.md",
    ROOT / "ARCHITECTURE.md",
    ROOT / "bench" / "README.md",
    *sorted((ROOT / "docs").glob("*.md")),
]
# A word in backticks that starts with one of these is a path from the repository's root;
# `core/`, `cli/` and `ui/` are the package's own, from ddptui/ (as ARCHITECTURE.md writes them).
TOP = (
    "ddptui/",
    "tests/",
    "bench/",
    "trainer/",
    "keymaps/",
    "testbed/",
    "scripts/",
    "docs/",
    ".ci/",
)
IN_PACKAGE = ("core/", "cli/", "ui/")
_CODE = re.compile(r"`([^`\n]+)`")
_LINK = re.compile(r"\]\(([^)\s]+)\)")
_MODULE = re.compile(r"(?:^|\s)-m\s+((?:ddptui|bench|tests|testbed)(?:\.\w+)+)")
README_LINES = 250


def _path_words(text: str) -> list[str]:
    """The repository paths a doc names: in backticks (each word of a command line too, from
    the repository's root), the modules `python -m` runs (as their files), and relative links
    (from the doc's own folder, written `./...` here)."""
    found: list[str] = []
    for code in _CODE.findall(text):
        for word in code.split():
            word = word.split("::")[0].rstrip(".,;:)").strip("'\"")
            if word.startswith(TOP) or word.startswith(IN_PACKAGE):
                found.append(word)
        found += [m.replace(".", "/") + "*" for m in _MODULE.findall(code)]
    for target in _LINK.findall(text):
        if "://" not in target and not target.startswith(("#", "mailto:")):
            path = target.split("#")[0]
            found.append(path if path.startswith(("./", "../")) else f"./{path}")
    return found


def _exists(doc: Path, word: str) -> bool:
    if any(c in word for c in "<>{}$") or "NNN" in word:
        return True  # a placeholder (`bench/results/<name>.md`), not a file's name
    word = word.replace("%5B", "[").replace("%5D", "]")
    if word.startswith(("./", "../")):
        base = doc.parent
    else:
        base = ROOT / "ddptui" if word.startswith(IN_PACKAGE) else ROOT
    if "*" in word:
        return any(base.glob(word))
    return (base / word).exists()


def test_the_path_finder_finds_paths_and_skips_placeholders() -> None:
    text = (
        "see `ddptui/core/job/plan.py`, `python -m bench.flood.log_flood --reps 3`, "
        "`tests/unit/test_docs.py::test_x`, [here](docs/keys.md#console), `ddptui.toml`, "
        "`core/events.py`, `bench/results/<name>.md`, `sh bench/gpu/straggler.sh OUT`, "
        "[web](https://example.org)"
    )
    assert _path_words(text) == [
        "ddptui/core/job/plan.py",
        "bench/flood/log_flood*",
        "tests/unit/test_docs.py",
        "core/events.py",
        "bench/results/<name>.md",
        "bench/gpu/straggler.sh",
        "./docs/keys.md",
    ]
    readme, page = ROOT / "README.md", ROOT / "docs" / "keys.md"
    assert _exists(readme, "core/events.py") and _exists(readme, "bench/flood/log_flood*")
    assert not _exists(readme, "tests/unit/monitor/test_failures.py")
    assert _exists(readme, "./docs/keys.md") and _exists(page, "./keys.md")
    assert not _exists(page, "./ARCHITECTURE.md") and _exists(page, "../ARCHITECTURE.md")


def test_every_path_a_doc_names_exists() -> None:
    missing = [
        f"{doc.relative_to(ROOT)}: {word}"
        for doc in DOCS
        for word in _path_words(doc.read_text())
        if not _exists(doc, word)
    ]
    assert not missing, "dead references:\n" + "\n".join(missing)


def _anchor(heading: str) -> str:
    """A heading's anchor as GitHub makes it: lower case, punctuation gone, spaces as -."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def test_every_link_to_a_section_finds_it() -> None:
    assert (
        _anchor("## Ports and worlds, checked at launch"[3:])
        == "ports-and-worlds-checked-at-launch"
    )
    assert _anchor("This machine (local)") == "this-machine-local"
    missing = []
    for doc in DOCS:
        for target in _LINK.findall(doc.read_text()):
            path, _, anchor = target.partition("#")
            if not anchor or "://" in path:
                continue
            linked = (doc.parent / path) if path else doc
            headings = re.findall(r"^#+ (.+)$", linked.read_text(), re.M)
            if anchor not in {_anchor(h.replace("`", "")) for h in headings}:
                missing.append(f"{doc.relative_to(ROOT)}: {target}")
    assert not missing, "links to no section:\n" + "\n".join(missing)


def _event_kinds() -> set[str]:
    """Every event kind the core declares (the session's, preflight's, the story's)."""
    for info in pkgutil.walk_packages([str(ROOT / "ddptui" / "core")], "ddptui.core."):
        if ".node" not in info.name:
            importlib.import_module(info.name)
    kinds, todo = set(), list(Event.__subclasses__())
    while todo:
        klass = todo.pop()
        todo += klass.__subclasses__()
        kinds.add(klass.__dict__.get("kind"))
    return {k for k in kinds if isinstance(k, str)}


def test_the_headless_page_names_every_event() -> None:
    text = (ROOT / "docs" / "headless.md").read_text()
    kinds = _event_kinds()
    assert {"rank", "summary", "incident", "verdict"} <= kinds
    unnamed = sorted(k for k in kinds if f"| `{k}` |" not in text and f"`{k}` (" not in text)
    assert not unnamed, f"docs/headless.md does not describe: {unnamed}"


def test_the_diagnoses_page_names_every_signature_cause_and_incident() -> None:
    text = (ROOT / "docs" / "diagnoses.md").read_text()
    causes = {v for k, v in vars(causes_module).items() if k.isupper() and isinstance(v, str)}
    words = (
        {s.name for s in signatures.CATALOGUE}
        | causes
        | {str(kind) for kind in IncidentKind}
        | {str(role) for role in Role}
        | {str(d) for d in signatures.Domain}
        | {str(o) for o in signatures.Outlook}
    )
    unnamed = sorted(w for w in words if f"`{w}`" not in text)
    assert not unnamed, f"docs/diagnoses.md does not say what these mean: {unnamed}"


def test_the_keys_page_is_what_the_bindings_make_it() -> None:
    page = ROOT / "docs" / "keys.md"
    assert page.read_text() == keys_doc.render(), f"stale: run {keys_doc.COMMAND}"


def test_the_readme_is_read_top_to_bottom() -> None:
    assert len((ROOT / "README.md").read_text().splitlines()) <= README_LINES


def test_the_readme_names_the_test_command_ci_runs() -> None:
    ci = (ROOT / ".ci" / "run").read_text().strip().splitlines()[-1]
    assert ci.startswith("sh scripts/install-test-deps.sh && python3 -m pytest")
    assert f"\n{ci}\n" in (ROOT / "README.md").read_text()
