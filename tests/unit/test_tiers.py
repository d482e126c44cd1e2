"""The suite's tiers, marked from what a test asks for and how long it last took."""

from __future__ import annotations

from tests.tiers import DURATIONS, FAST_S, LONG_S, recorded, tiers_of


def test_a_quick_unit_test_is_fast_and_nothing_else() -> None:
    assert tiers_of("tests/unit/story/test_story.py::t", set(), 0.02, False) == {"fast"}


def test_a_test_on_the_testbed_is_never_fast_however_quick() -> None:
    tiers = tiers_of("tests/integration/test_x.py::t", {"testbed", "tmp_path"}, 1.0, False)
    assert tiers == {"testbed", "real"}


def test_a_quick_real_run_stays_in_the_fast_tier() -> None:
    assert tiers_of("tests/ui/test_launch.py::t", set(), 3.0, False) == {"real", "fast"}
    assert tiers_of("tests/ui/test_launch.py::t", set(), FAST_S + 1, False) == {"real"}


def test_over_a_minute_or_marked_by_hand_is_long() -> None:
    assert "long" in tiers_of("tests/integration/test_x.py::t", set(), LONG_S + 1, False)
    assert "long" in tiers_of("tests/ui/test_x.py::t", set(), 1.0, True)
    assert "fast" not in tiers_of("tests/ui/test_x.py::t", set(), 1.0, True)


def test_an_unrecorded_test_is_fast_only_under_unit() -> None:
    assert tiers_of("tests/unit/test_new.py::t", set(), None, False) == {"fast"}
    assert tiers_of("tests/ui/test_new.py::t", set(), None, False) == set()


def test_the_recorded_times_cover_the_long_holds() -> None:
    times = recorded()
    assert DURATIONS.exists() and len(times) > 1000
    holds = [k for k in times if "stays_stalled_for_three_minutes" in k]
    assert holds and all(times[k] > LONG_S for k in holds)
