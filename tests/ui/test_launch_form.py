"""The launch form: fields marked with the reason before launch, command preview, apply, launch."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from textual.widgets import Button, Input, Select, Static

from ddptui.core.events import RankState
from ddptui.core.job.spec import make_spec
from ddptui.ui.app import DdpApp
from ddptui.ui.screens.launch_form import LaunchFormScreen
from ddptui.ui.widgets.form_field import FormField

from .conftest import SIZE, job_screen, local_spec, wait_for, wait_no_tagged_pids
from .screen_host import ScreenHost


@pytest.fixture(autouse=True)
def config_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Only the built-in profiles, whatever this machine's ~/.config holds."""
    monkeypatch.setenv("DDPTUI_CONFIG_DIR", str(tmp_path / "config"))
    monkeypatch.chdir(tmp_path)
    return tmp_path / "config"


def form(app: DdpApp) -> LaunchFormScreen:
    assert isinstance(app.screen, LaunchFormScreen), app.screen
    return app.screen


def field(screen: LaunchFormScreen, name: str) -> FormField:
    return screen.query_one(f"#field-{name}", FormField)


async def type_into(pilot: Any, screen: LaunchFormScreen, name: str, text: str) -> None:
    """Click the field, clear it with the keyboard, type the new text."""
    box = screen.query_one(f"#{name}", Input)
    box.focus()
    await pilot.press("end", *["backspace"] * len(box.value), *text)
    await pilot.pause()


async def test_an_invalid_field_is_marked_with_its_reason_and_blocks_launch() -> None:
    app = DdpApp(local_spec())
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("e")
        await wait_for(pilot, lambda: isinstance(app.screen, LaunchFormScreen), "the form")
        screen = form(app)
        assert screen.check.ok and not field(screen, "nodes").has_class("-invalid")

        await type_into(pilot, screen, "nodes", "0")
        nodes = field(screen, "nodes")
        await wait_for(pilot, lambda: nodes.error == "must be at least 1", "the field's check")
        assert nodes.has_class("-invalid")
        assert "✗ must be at least 1" in str(nodes.query_one(".field-error", Static).render())
        assert screen.query_one("#launch", Button).disabled
        assert screen.query_one("#apply", Button).disabled
        status = str(screen.query_one("#form-status", Static).render())
        assert "1 field(s) need attention before launch" in status
        await pilot.press("ctrl+l")  # refused: still on the form, nothing launched
        await pilot.pause()
        assert app.screen is screen and job_screen(app).session is None

        await type_into(pilot, screen, "nodes", "two")
        assert field(screen, "nodes").error == "must be a whole number, not 'two'"
        await type_into(pilot, screen, "env", "OMP_NUM_THREADS=1 o-ops")
        assert field(screen, "env").error == "malformed 'o-ops': expected NAME=VALUE or NAME"
        await type_into(pilot, screen, "script_args", '--name "unclosed')
        assert "No closing quotation" in field(screen, "script_args").error
        await type_into(pilot, screen, "script", "no/such/train.py")
        assert field(screen, "script").error.startswith("not found: no/such/train.py")
        assert len(screen.check.errors) == 4

        await pilot.press("escape")
        await pilot.pause()
        assert app.screen is job_screen(app)
        assert job_screen(app).spec.nodes == 2  # cancelled: the job is unchanged


async def test_show_command_then_apply_changes_the_job() -> None:
    app = DdpApp(local_spec())
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("e")
        await wait_for(pilot, lambda: isinstance(app.screen, LaunchFormScreen), "the form")
        screen = form(app)
        await type_into(pilot, screen, "nodes", "3")
        await type_into(pilot, screen, "env", "OMP_NUM_THREADS=1")
        await pilot.press("f2")
        await pilot.pause()
        preview = str(screen.query_one("#preview", Static).render())
        assert screen.query_one("#preview").display
        for node in ("local0", "local1", "local2"):
            assert f"{node} $ cd " in preview
        assert preview.count("--nnodes=3") == 3
        assert "OMP_NUM_THREADS=1" in preview
        await pilot.press("ctrl+s")
        await wait_for(pilot, lambda: not isinstance(app.screen, LaunchFormScreen), "apply")
        screen_now = job_screen(app)
        assert app.screen is screen_now
        assert (screen_now.spec.nodes, screen_now.spec.env) == (3, {"OMP_NUM_THREADS": "1"})
        assert [c.node for c in screen_now.job_panel.commands] == ["local0", "local1", "local2"]
        assert screen_now.session is None  # applied, not launched


async def test_backend_sections_and_loading_a_profile() -> None:
    app = DdpApp(local_spec())
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("e")
        await wait_for(pilot, lambda: isinstance(app.screen, LaunchFormScreen), "the form")
        screen = form(app)
        assert not screen.query_one("#sec-ssh").display
        screen.query_one("#backend", Select).value = "ssh"
        await pilot.pause()
        assert screen.query_one("#sec-ssh").display
        assert not screen.query_one("#sec-slurm").display
        assert field(screen, "hosts").error == "required for SSH: a,b or node[01-04]"
        await type_into(pilot, screen, "hosts", "node[1-")
        assert "bad host list" in field(screen, "hosts").error
        await type_into(pilot, screen, "hosts", "node1")
        assert field(screen, "nodes").error == "only 1 host(s) listed"

        screen.query_one("#profile", Select).value = "cifar10-vgg"
        await pilot.pause()
        assert screen.query_one("#slurm_launch", Select).value == "srun"
        assert screen.query_one("#gres", Input).value == "gpu:4"
        assert screen.query_one("#sec-slurm").display
        assert screen.check.ok and screen.check.spec is not None
        assert screen.check.spec.profile == "cifar10-vgg"
        screen.query_one("#container_engine", Select).value = "pyxis"
        screen.query_one("#backend", Select).value = "local"
        # each change is a message the form takes in turn (the profile's own changes first)
        await wait_for(
            pilot,
            lambda: "slurm backend only" in field(screen, "container_engine").error,
            "pyxis refused off Slurm",
            30,
        )


async def test_launch_from_the_form_runs_the_edited_job() -> None:
    app = DdpApp(local_spec())
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("e")
        await wait_for(pilot, lambda: isinstance(app.screen, LaunchFormScreen), "the form")
        screen = form(app)
        await type_into(pilot, screen, "nodes", "1")
        await type_into(pilot, screen, "nproc_per_node", "1")
        await pilot.press("ctrl+l")
        await wait_for(pilot, lambda: job_screen(app).session is not None, "the launch")
        running = job_screen(app)
        assert running.spec.world_size == 1
        await wait_for(pilot, lambda: not running.job_active, "the run to end", 180)
        assert running.summary is not None and running.summary.ok, running.summary
        assert set(running.grid.states().values()) == {RankState.DONE}
        assert running.session is not None
        assert wait_no_tagged_pids(running.session.run_id) == []


def fixed_form() -> ScreenHost:
    spec = make_spec(
        script="/opt/ddptui/trainer/envcheck.py",
        script_args=("--sleep", "30"),
        workdir="/srv/ddp",
        launcher="python3 -m torch.distributed.run",
    )
    return ScreenHost(lambda: LaunchFormScreen(spec))


def test_snapshot_form_with_invalid_fields(snap_compare: Any) -> None:
    """The script is not on this machine and nodes is 0: both marked, launch disabled."""

    async def make_invalid(pilot: Any) -> None:
        screen = pilot.app.screen
        screen.query_one("#nodes", Input).value = "0"
        await pilot.pause()
        screen.recheck()
        screen.set_focus(None)  # no blinking cursor in the picture
        await pilot.pause()

    assert snap_compare(fixed_form(), run_before=make_invalid, terminal_size=SIZE)
