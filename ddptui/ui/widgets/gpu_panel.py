"""Provides GpuPanel: every node's GPUs over the run, util and memory sparklines, and flags."""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable

from rich.style import Style
from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.widgets import Sparkline, Static

from ddptui.core.events import GpuFlag, GpuReport, GpuStat

HISTORY = 3600  # samples a sparkline draws from (it folds them into its width, by max)
BAR_WIDTH = 16
MEM_FLAG = "mem_high"


class GaugeSparkline(Sparkline):
    """Textual's Sparkline on a fixed scale, 0 to `top`: a GPU flat at 100% draws full bars
    and one flat at 2% low ones (the stock widget scales to the data's own min and max, so
    any flat line looks the same)."""

    BARS = "▁▂▃▄▅▆▇█"

    def __init__(self, top: float, *, classes: str | None = None) -> None:
        super().__init__([], summary_function=max, classes=classes)
        self.top = top

    def render(self) -> Text:
        data = list(self.data or [])
        width = self.size.width
        if not data or width <= 0:
            return Text("")
        low = self.get_component_styles("sparkline--min-color").color
        high = self.get_component_styles("sparkline--max-color").color
        text = Text()
        bars = min(width, len(data))  # each bar the most of its share of the run
        for i in range(bars):
            part = data[i * len(data) // bars : (i + 1) * len(data) // bars]
            ratio = min(1.0, max(0.0, max(part) / self.top)) if self.top else 0.0
            bar = self.BARS[min(len(self.BARS) - 1, int(ratio * len(self.BARS)))]
            text.append(bar, Style(color=low.blend(high, ratio).rich_color))
        return text


def memory_bar(gpu: GpuStat, width: int = BAR_WIDTH) -> str:
    """`█████░░░░░░░░░░░ 41.2/79.6 GiB`."""
    ratio = min(1.0, max(0.0, gpu.mem_ratio or 0.0))
    full = round(ratio * width)
    used = (gpu.mem_used_mib or 0) / 1024
    total = (gpu.mem_total_mib or 0) / 1024
    return f"{'█' * full}{'░' * (width - full)} {used:.1f}/{total:.1f} GiB"


def gpu_heading(node: str, gpu: GpuStat) -> Text:
    """`local0 GPU 0 · r0 · 97% · 350 W · 61°C`."""
    text = Text()
    text.append(f"{node} GPU {gpu.index}", style="bold")
    ranks = ",".join(f"r{r}" for r in gpu.ranks) or "no rank"
    text.append(f" · {ranks}")
    text.append(f" · {'--' if gpu.util is None else gpu.util}%", style="bold")
    if gpu.power_w is not None:
        text.append(f" · {gpu.power_w:.0f} W")
    if gpu.temp_c is not None:
        text.append(f" · {gpu.temp_c}°C")
    return text


class GpuHistory:
    """One GPU's samples over the run and its last sample and flags, kept whether or not the
    panel shows (its blocks are built when it first shows)."""

    def __init__(self) -> None:
        self.util: deque[float] = deque(maxlen=HISTORY)
        self.mem: deque[float] = deque(maxlen=HISTORY)
        self.last: GpuStat | None = None
        self.flags: list[GpuFlag] = []

    def add(self, gpu: GpuStat, flags: list[GpuFlag]) -> None:
        self.util.append(float(gpu.util or 0))
        self.mem.append(float(gpu.mem_used_mib or 0))
        self.last, self.flags = gpu, flags


class GpuBlock(Vertical):
    """One GPU: its heading, a sparkline of utilisation, the memory bar, a sparkline of memory
    and the flags it raised last."""

    DEFAULT_CSS = """
    GpuBlock {
        height: auto;
        margin-bottom: 1;
        & > Sparkline { height: 1; }
        & > .gpu-mem { color: $success; }
        & > .gpu-mem.-high { color: $error; text-style: bold; }
        & > .gpu-flags { color: $warning; text-style: bold; }
    }
    """

    def __init__(self, node: str, index: int, history: GpuHistory) -> None:
        super().__init__()
        self.node = node
        self.index = index
        self.history = history
        self.heading = Static(classes="gpu-heading")
        self.util_line = GaugeSparkline(100, classes="gpu-util")
        self.mem_bar = Static(classes="gpu-mem")
        self.mem_line = GaugeSparkline(1, classes="gpu-mem-line")
        self.flags = Static(classes="gpu-flags")

    def compose(self) -> ComposeResult:
        yield self.heading
        yield self.util_line
        yield self.mem_bar
        yield self.mem_line
        yield self.flags

    def on_mount(self) -> None:
        self.show_history()

    def show_history(self) -> None:
        """Draw the GPU as its history has it now."""
        gpu, flags, history = self.history.last, self.history.flags, self.history
        if gpu is None:
            return
        self.heading.update(gpu_heading(self.node, gpu))
        self.util_line.data = list(history.util)
        self.mem_line.top = float(gpu.mem_total_mib or max(history.mem) or 1)
        self.mem_line.data = list(history.mem)
        self.mem_bar.update("mem " + memory_bar(gpu))
        self.mem_bar.set_class(any(f.kind == MEM_FLAG for f in flags), "-high")
        self.flags.update("\n".join(f"⚠ {f.detail}" for f in flags))
        self.flags.display = bool(flags)


class GpuPanel(Vertical):
    """Hidden until the operator asks for it (`gpu.panel`); fed every node's GPU samples.

    The samples are kept as they come; the blocks that draw them are built when the panel
    first shows and updated only while it shows. Built at the first sample, a block a GPU
    (five widgets each) cost a 16-node run's screen a second of its start, whether or not
    anyone looked."""

    DEFAULT_CSS = """
    GpuPanel {
        height: auto;
        padding: 0 1;
        margin-top: 1;
        border-top: solid $primary;
        display: none;
        &.-shown { display: block; }
    }
    """

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.histories: dict[tuple[str, int], GpuHistory] = {}
        self.blocks: dict[tuple[str, int], GpuBlock] = {}
        self.note = Static("no GPU telemetry yet (none comes from nodes without GPUs)")

    def compose(self) -> ComposeResult:
        yield self.note

    @property
    def shown(self) -> bool:
        return self.has_class("-shown")

    def show_report(self, event: GpuReport) -> None:
        for gpu in event.gpus:
            history = self.histories.setdefault((event.node, gpu.index), GpuHistory())
            history.add(gpu, [f for f in event.flags if f.gpu == gpu.index])
        if self.shown:
            self._draw([(event.node, gpu.index) for gpu in event.gpus])

    def toggle(self) -> bool:
        self.toggle_class("-shown")
        if self.shown:
            self._draw(self.blocks)
        return self.shown

    def _draw(self, keys: Iterable[tuple[str, int]]) -> None:
        """The blocks of `keys` as their GPUs are now, and a new block for every GPU that has
        none yet (drawn once mounted)."""
        for key in keys:
            block = self.blocks.get(key)
            if block is not None:
                block.show_history()
        new = [
            GpuBlock(node, index, history)
            for (node, index), history in self.histories.items()
            if (node, index) not in self.blocks
        ]
        if new:
            self.note.display = False
            self.blocks.update(((b.node, b.index), b) for b in new)
            self.mount_all(new)  # each draws its history once mounted
