"""The core runs without the UI: importing it must not import Textual."""

from __future__ import annotations

import subprocess
import sys


def test_core_and_headless_do_not_import_textual() -> None:
    code = (
        "import sys\n"
        "import ddptui.core.session, ddptui.core.backends.local, ddptui.headless, ddptui.cli\n"
        "import ddptui.core.backends.ssh.backend\n"
        "ui = ('textual.', 'ddptui.ui')\n"
        "bad = [m for m in sys.modules if m == 'textual' or m.startswith(ui)]\n"
        "assert not bad, bad\n"
        "assert 'torch' not in sys.modules\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_import_linter_contract_holds() -> None:
    result = subprocess.run(["lint-imports"], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr
