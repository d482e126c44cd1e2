"""A failed rank shows its own last words, never torchrun's boilerplate (real captures)."""

from __future__ import annotations

from pathlib import Path

from ddptui.core.monitor.last_words import is_boilerplate, shown_error

CAPTURES = Path(__file__).parents[2] / "data" / "verdicts"
ERRORS_URL = "To enable traceback see: https://pytorch.org/docs/stable/elastic/errors.html"


def own_lines(capture: str, prefix: str) -> list[str]:
    """One rank's lines of a torchrun capture (`--tee 3`: `[default0]:...`)."""
    text = (CAPTURES / capture).read_text()
    return [line.removeprefix(prefix) for line in text.splitlines() if line.startswith(prefix)]


def test_a_missing_script_shows_pythons_own_line() -> None:
    lines = own_lines("missing_file--script.log", "[default1]:")
    shown = shown_error(ERRORS_URL, lines)
    assert shown.endswith("can't open file '/tmp/frx/cap/../user_scripts/x.py': [Errno 2] No such "
                          "file or directory")  # fmt: skip


def test_a_rank_gloo_aborted_shows_glooss_words_not_the_signal() -> None:
    lines = own_lines("collective_mismatch--gloo_size.log", "[default0]:")
    shown = shown_error("Signal 6 (SIGABRT) received by PID 5762", lines)
    assert "Received data size doesn't match expected size" in shown


def test_a_real_error_is_kept() -> None:
    assert shown_error("RuntimeError: boom", ["step 1", "oops"]) == "RuntimeError: boom"


def test_with_nothing_of_its_own_the_boilerplate_stays() -> None:
    assert shown_error(ERRORS_URL, []) == ERRORS_URL
    assert shown_error(ERRORS_URL, ["", "  "]) == ERRORS_URL


def test_torchruns_summary_and_log_lines_are_boilerplate() -> None:
    text = (CAPTURES / "missing_file--script.log").read_text().splitlines()
    summary = text[text.index("Failures:") :]
    assert all(is_boilerplate(line) for line in summary if line.strip() and "FAILED" not in line)
    assert is_boilerplate(text[0])  # torchrun's W... log line
    assert not is_boilerplate("python3: can't open file 'x.py': [Errno 2] No such file")
