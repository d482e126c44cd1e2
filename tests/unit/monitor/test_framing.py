"""Line framing and rank attribution, including merged and partial lines."""

from __future__ import annotations

import random

from ddptui.core.monitor.framing import PREFIX, Attributed, LineFramer, RankAttributor


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


def _line_by_line(lines: list[str], fragments: dict[tuple[int, int], str]) -> list[Attributed]:
    """The attribution rule, one physical line at a time (the rule the block split follows)."""
    out: list[Attributed] = []
    for line in lines:
        matches = list(PREFIX.finditer(line))
        if not matches:
            out.append(Attributed(line))
            continue
        if matches[0].start():
            out.append(Attributed(line[: matches[0].start()]))
        for i, match in enumerate(matches):
            key = (int(match.group(1)), int(match.group(2)))
            end = matches[i + 1].start() if i + 1 < len(matches) else len(line)
            text = fragments.pop(key, "") + line[match.end() : end]
            if i + 1 < len(matches):
                fragments[key] = text
            else:
                out.append(Attributed(text, *key))
    return out


def test_a_block_is_attributed_as_its_lines_one_by_one() -> None:
    pieces = ["[ddptui:0:0]:", "[ddptui:1:1]:", "[ddptui:12:3]:", "abc", " x y ", "", "[ddptui:"]
    rng = random.Random(7)
    for _ in range(500):
        block_attr, fragments = RankAttributor(), {}  # type: ignore[var-annotated]
        expected: list[Attributed] = []
        got: list[Attributed] = []
        for _ in range(rng.randint(1, 4)):
            lines = [
                "".join(rng.choice(pieces) for _ in range(rng.randint(0, 5)))
                for _ in range(rng.randint(1, 6))
            ]
            expected += _line_by_line(lines, fragments)
            got += block_attr.feed_block("\n".join(lines))
        assert got == expected
        assert block_attr.flush() == [Attributed(t, *k) for k, t in fragments.items()]


def test_framer_blocks_hold_the_same_lines_as_line_by_line() -> None:
    data = b"a\r\nb\x1b[1mB\x1b[0m\n\nlong" + b"x" * 10 + b"\nend\xff\r\r\nrest"
    for size in (1, 3, 7, len(data)):
        framer, lines = LineFramer(), []
        for at in range(0, len(data), size):
            block = framer.block(data[at : at + size])
            if block is not None:
                lines += block.split("\n")
        assert lines + framer.flush() == ["a", "bB", "", "long" + "x" * 10, "end\ufffd", "rest"]


def test_blocks_of_whole_prefixed_lines_and_near_misses_attribute_as_line_by_line() -> None:
    """Blocks where every line is one prefix and its text take a one-pass path; a block that
    is almost that (a line without prefix, with two, a lookalike, a pending fragment) must
    come out the same as line by line."""
    prefixes = ["[ddptui:0:0]:", "[ddptui:1:1]:", "[ddptui:12:3]:"]
    odd = ["", "plain", "[ddptui:2:0]:a[ddptui:2:1]:b", "[ddptui:x]", "[ddptui:0:0]:"]
    rng = random.Random(11)
    for _ in range(500):
        block_attr, fragments = RankAttributor(), {}  # type: ignore[var-annotated]
        expected: list[Attributed] = []
        got: list[Attributed] = []
        for _ in range(rng.randint(1, 4)):
            one = rng.choice(prefixes) if rng.random() < 0.5 else None  # one rank's block
            lines = [
                (one or rng.choice(prefixes)) + f"step {i} [x]" for i in range(rng.randint(1, 8))
            ]
            if rng.random() < 0.5:
                lines[rng.randrange(len(lines))] = rng.choice(odd)
            expected += _line_by_line(lines, fragments)
            got += block_attr.feed_block("\n".join(lines))
        assert got == expected
        assert block_attr.flush() == [Attributed(t, *k) for k, t in fragments.items()]
