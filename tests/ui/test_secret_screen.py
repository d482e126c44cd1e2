"""A secret on the screen: the job panel, the commands and the node logs show `***` only."""

from __future__ import annotations

from pathlib import Path

from ddptui.core.job.secret_env import MASK
from ddptui.core.job.spec import make_spec
from ddptui.ui.app import DdpApp
from ddptui.ui.job_form import check_form, values_from_spec

from .conftest import SIZE, job_screen, wait_for

SECRET = "hf_on-screen-never-7f3a9c"

# A script that does echo its token: the console masks it in what it shows.
SCRIPT = """\
import os
os.write(1, f"[RANK {os.environ['RANK']}] echoing {os.environ['HF_TOKEN']} here\\n".encode())
"""


async def test_the_screen_never_shows_a_secret_value(tmp_path: Path) -> None:
    script = tmp_path / "echo_token.py"
    script.write_text(SCRIPT)
    spec = make_spec(script=str(script), env={"HF_TOKEN": SECRET, "LR": "0.5"})
    app = DdpApp(spec)
    async with app.run_test(size=SIZE) as pilot:
        screen = job_screen(app)
        assert SECRET not in app.export_screenshot()
        await pilot.press("l")
        await wait_for(pilot, lambda: screen.session is not None, "the session")
        await wait_for(pilot, lambda: not screen.job_active, "the run to end", 180)
        await pilot.pause()
        assert SECRET not in app.export_screenshot()
        assert all(SECRET not in c.line for c in screen.job_panel.commands)
        assert all(f"HF_TOKEN='{MASK}'" in c.line for c in screen.job_panel.commands)
        for node in ("local0", "local1"):
            pane = screen.logs.pane(node)
            assert pane is not None
            text = "\n".join(pane.lines)
            assert f"echoing {MASK} here" in text, text[-2000:]
            assert SECRET not in text


def test_the_job_form_shows_a_mask_and_keeps_the_value(tmp_path: Path) -> None:
    script = tmp_path / "t.py"
    script.write_text("")
    spec = make_spec(script=str(script), env={"HF_TOKEN": SECRET, "LR": "0.5"})
    values = values_from_spec(spec)
    assert SECRET not in "".join(values.values()) and f"HF_TOKEN={MASK}" in values["env"]
    edited = {**values, "env": values["env"].replace("LR=0.5", "LR=0.7")}
    checked = check_form(edited, spec, cwd=tmp_path)
    assert checked.spec is not None, checked.errors
    assert checked.spec.env == {"HF_TOKEN": SECRET, "LR": "0.7"}
    replaced = {**values, "env": "HF_TOKEN=new"}
    assert (check_form(replaced, spec, cwd=tmp_path).spec or spec).env == {"HF_TOKEN": "new"}
