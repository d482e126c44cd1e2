"""`c` on a GPU machine: each pseudo-node's CUDA_VISIBLE_DEVICES in its exact command, before
launch (the console asks `nvidia-smi --list-gpus`; here a stand-in that lists 4 GPUs)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from ddptui.ui.app import DdpApp

from .conftest import local_spec


async def test_the_commands_show_each_pseudo_nodes_gpus(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    smi = tmp_path / "nvidia-smi"
    smi.write_text(
        "#!/bin/sh\n" + "".join(f"echo 'GPU {i}: H100 (UUID: GPU-{i})'\n" for i in range(4))
    )
    smi.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    app = DdpApp(local_spec())
    async with app.run_test(size=(200, 50)) as pilot:
        await pilot.pause()
        panel = app.job_screen.job_panel
        lines = {c.node: c.line for c in panel.commands}
        assert "CUDA_VISIBLE_DEVICES=0,1 " in lines["local0"]
        assert "CUDA_VISIBLE_DEVICES=2,3 " in lines["local1"]
        assert not panel.folded  # before launch the commands are shown in full
