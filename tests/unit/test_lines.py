"""Line framing and rank attribution, including merged and partial lines."""

from __future__ import annotations

from ddptui.core.lines import Attributed, LineFramer, RankAttributor


def test_framer_joins_lines_split_across_chunks() -> None:
    framer = LineFramer()
    assert framer.feed(b"hel") == []
    assert framer.feed(b"lo\nwor") == ["hello"]
    assert framer.feed(b"ld\r\n") == ["world"]
    assert framer.flush() == []


def test_framer_flushes_a_last_line_without_newline() -> None:
    framer = LineFramer()
    framer.feed(b"tail")
    assert framer.flush() == ["tail"]


def test_framer_strips_ansi_and_survives_bad_utf8() -> None:
    framer = LineFramer()
    assert framer.feed(b"\x1b[31mred\x1b[0m \xff ok\n") == ["red \ufffd ok"]


def test_prefixed_line_is_attributed() -> None:
    out = RankAttributor().feed("[ddptui:3:1]:[RANK 3] Epoch 0 | Batchsize: 32 | Steps: 8")
    assert out == [Attributed("[RANK 3] Epoch 0 | Batchsize: 32 | Steps: 8", 3, 1)]


def test_unprefixed_line_belongs_to_the_node() -> None:
    assert RankAttributor().feed("I1126 agent says hi") == [Attributed("I1126 agent says hi")]


def test_merged_fragment_is_joined_with_its_rest() -> None:
    # Captured from torchrun --tee: rank 1 wrote "partial" without newline, rank 0's line
    # was glued on, and rank 1's " done" arrived on a later line.
    a = RankAttributor()
    first = a.feed("[ddptui:1:1]:partial[ddptui:0:0]:hello from 0")
    assert first == [Attributed("hello from 0", 0, 0)]
    second = a.feed("[ddptui:1:1]: done")
    assert second == [Attributed("partial done", 1, 1)]


def test_text_before_first_prefix_is_kept() -> None:
    out = RankAttributor().feed("agent no newline[ddptui:2:0]:x")
    assert out == [Attributed("agent no newline"), Attributed("x", 2, 0)]


def test_unfinished_fragments_are_flushed_not_lost() -> None:
    a = RankAttributor()
    a.feed("[ddptui:1:1]:dangling[ddptui:0:0]:ok")
    assert a.flush() == [Attributed("dangling", 1, 1)]


def test_prefix_lookalike_from_user_is_not_a_rank() -> None:
    out = RankAttributor().feed("[3]: user line [rank3]: also user")
    assert out == [Attributed("[3]: user line [rank3]: also user")]
