"""Keymaps: bundled files, remapped keys in the footer and help, and clear errors for typos."""

from __future__ import annotations

from pathlib import Path

import pytest
from textual.widgets._footer import FooterKey

from ddptui.ui.app import DdpApp
from ddptui.ui.keymap import (
    KeymapError,
    binding_catalogue,
    bundled_keymap_dirs,
    key_problem,
    load_keymap,
    read_keymap_file,
)
from ddptui.ui.screens.help import HelpScreen
from ddptui.ui.widgets.logs.log_deck import NodeLogDeck
from tests.cases import ROOT

from .conftest import SIZE, job_screen, local_spec

REPO_KEYMAPS = ROOT / "keymaps"


def footer_keys(app: DdpApp) -> dict[str, str]:
    """Footer description -> key as displayed."""
    return {k.description: k.key_display for k in app.screen.query(FooterKey)}


def test_default_keymap_file_matches_the_built_in_bindings() -> None:
    catalogue = binding_catalogue(DdpApp.binding_scopes())
    entries = read_keymap_file(REPO_KEYMAPS / "default.toml")
    assert set(entries) == set(catalogue), "default.toml must list every binding id"
    keymap = load_keymap(REPO_KEYMAPS / "default.toml", DdpApp.binding_scopes())
    assert keymap == {i.id: i.key for i in catalogue.values()}


def test_every_bundled_keymap_is_valid() -> None:
    files = [p for d in bundled_keymap_dirs() if d.is_dir() for p in d.glob("*.toml")]
    assert {p.stem for p in files} >= {"default", "vim"}
    for path in files:
        load_keymap(path, DdpApp.binding_scopes())


async def test_vim_keymap_changes_footer_and_keys() -> None:
    app = DdpApp(local_spec(), keymap_path="vim")
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        keys = footer_keys(app)
        assert keys["Launch"] == "R"
        assert keys["Tear down"] == "X"
        assert keys["Next log"] == "L"
        deck = app.screen.query_one(NodeLogDeck)
        await pilot.press("L")
        assert deck.active_node == "local1"
        await pilot.press("l")  # the default launch key does nothing under vim
        await pilot.pause()
        assert not job_screen(app).job_active
        assert job_screen(app).session is None


async def test_default_footer_keys() -> None:
    app = DdpApp(local_spec())
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        keys = footer_keys(app)
        assert keys["Launch"] == "l"
        assert keys["Next log"] == "]"
        assert keys["Quit"] == "q"


async def test_keymap_file_of_my_own(tmp_path: Path) -> None:
    path = tmp_path / "mine.toml"
    path.write_text('[job]\nlaunch = "ctrl+l"\n\n[logs]\nnext = "n"\n"app.help" = "?"\n')
    with pytest.raises(KeymapError, match="unknown binding id 'logs.app.help'"):
        load_keymap(path, DdpApp.binding_scopes())
    path.write_text('"job.launch" = "ctrl+l"\n"logs.next" = "x"\n"app.help" = ["?", "f1"]\n')
    app = DdpApp(local_spec(), keymap_path=str(path))
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        keys = footer_keys(app)
        assert keys["Launch"] == "^l"
        assert keys["Next log"] == "x"
        assert app.keymap["app.help"] == "question_mark,f1"
        await pilot.press("question_mark")
        assert isinstance(app.screen, HelpScreen)


def test_bad_keymap_names_file_problems_and_valid_ids(tmp_path: Path) -> None:
    path = tmp_path / "typo.toml"
    path.write_text('"job.lanch" = "l"\n"job.teardown" = "ctrl+tee"\n"logs.next" = 5\n')
    with pytest.raises(KeymapError) as caught:
        DdpApp(local_spec(), keymap_path=str(path))
    message = str(caught.value)
    assert str(path) in message
    assert "unknown binding id 'job.lanch' (did you mean 'job.launch'?)" in message
    assert "'ctrl+tee': 'tee' is not a key name" in message
    assert "'logs.next': expected a key or a list of keys, got 5" in message
    assert "valid binding ids:" in message
    for binding_id in binding_catalogue(DdpApp.binding_scopes()):
        assert binding_id in message


def test_keymap_that_hides_a_binding_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "clash.toml"
    path.write_text('"job.launch" = "t"\n')
    with pytest.raises(KeymapError, match="'t' is bound to both job.launch and job.teardown"):
        load_keymap(path, DdpApp.binding_scopes())


def test_missing_and_malformed_keymap_files(tmp_path: Path) -> None:
    with pytest.raises(KeymapError, match=r"no such file \(bundled keymaps: .*vim"):
        load_keymap("emacs-ish", DdpApp.binding_scopes())
    broken = tmp_path / "broken.toml"
    broken.write_text('"job.launch" = \n')
    with pytest.raises(KeymapError, match="not valid TOML"):
        load_keymap(broken, DdpApp.binding_scopes())


@pytest.mark.parametrize(
    "key",
    [
        "l",
        "L",
        "5",
        "?",
        "ctrl+l",
        "shift+up",
        "f12",
        "enter",
        "question_mark",
        "left_square_bracket",
        "alt+ctrl+pagedown",
    ],
)
def test_good_key_names(key: str) -> None:
    assert key_problem(key) is None


@pytest.mark.parametrize("key", ["", "ctrl+", "hyperspace", "cntrl+l", "pgdn", "f99"])
def test_bad_key_names(key: str) -> None:
    assert key_problem(key) is not None


def test_errors_name_the_line_of_each_problem(tmp_path: Path) -> None:
    path = tmp_path / "lines.toml"
    path.write_text(
        '# my keys\n"job.launch" = "L"\n\n[logs]\nsearh = "slash"\nnext = "ctrl+nope"\n'
    )
    with pytest.raises(KeymapError) as caught:
        load_keymap(path, DdpApp.binding_scopes())
    message = str(caught.value)
    assert message.startswith(f"keymap {path}:")
    assert "line 5: unknown binding id 'logs.searh' (did you mean 'logs.search'?)" in message
    assert "line 6: 'logs.next': 'ctrl+nope': 'nope' is not a key name" in message
    assert "valid binding ids: " in message and "diag.jump_error" in message


def test_clash_names_the_line_that_made_it(tmp_path: Path) -> None:
    path = tmp_path / "clash.toml"
    path.write_text('"app.quit" = "q"\n"logs.wrap" = "E"\n')
    with pytest.raises(KeymapError, match="line 2: key 'E' is bound to both"):
        load_keymap(path, DdpApp.binding_scopes())


def test_a_user_keymap_extends_vim_and_overrides_one_binding(tmp_path: Path) -> None:
    path = tmp_path / "mine.toml"
    path.write_text('extends = "vim"\n"job.launch" = "ctrl+g"\n')
    keymap = load_keymap(path, DdpApp.binding_scopes())
    assert keymap["job.launch"] == "ctrl+g"
    assert keymap["logs.scroll_down"] == "j,down"  # from vim
    path.write_text('extends = "vim"\n"logs.wrap" = "j"\n')  # j scrolls in vim
    with pytest.raises(KeymapError, match="line 2: key 'j' is bound to both"):
        load_keymap(path, DdpApp.binding_scopes())
    path.write_text('extends = "emacs"\n')
    with pytest.raises(KeymapError, match="keymap emacs: no such file"):
        load_keymap(path, DdpApp.binding_scopes())


async def test_the_keymap_in_the_config_dir_is_used_by_default(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = tmp_path / "config"
    config.mkdir()
    (config / "keymap.toml").write_text('extends = "vim"\n"job.launch" = "ctrl+g"\n')
    monkeypatch.setenv("DDPTUI_CONFIG_DIR", str(config))
    app = DdpApp(local_spec())
    assert app.keymap_source == str(config / "keymap.toml")
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        keys = footer_keys(app)
        assert keys["Launch"] == "^g"
        assert keys["Tear down"] == "X"


def test_g_prefix_bindings_clash_only_among_themselves() -> None:
    catalogue = binding_catalogue(DdpApp.binding_scopes())
    assert catalogue["logs.g.top"].scope == "after logs.g"
    assert catalogue["logs.g"].key == catalogue["logs.g.top"].key == "g"


async def test_help_shows_g_g_and_the_vim_keys() -> None:
    app = DdpApp(local_spec(), keymap_path="vim")
    assert app.keymap_source == "vim (bundled)"
    assert app.key_for("logs.g.top") == "g g"
    assert app.key_for("logs.search_prev") == "N"
    assert app.key_for("cmd.open") == ":"
