"""The monitor reads metrics from every rank's lines: samples, their rate cap, wrong numbers."""

from __future__ import annotations

import math

from ddptui.core.diagnose.signatures import identify
from ddptui.core.events import MetricSampled, RankChanged
from ddptui.core.monitor.causes import cause_of
from ddptui.core.monitor.monitor import Monitor
from ddptui.core.monitor.patterns import LOSS_SPIKE, NAN_OR_INF


def _lines(*pairs: tuple[int, str]) -> bytes:
    return "".join(f"[ddptui:{rank}:{rank}]:{text}\n" for rank, text in pairs).encode()


def test_each_ranks_metric_lines_become_samples_and_the_summarys_figures() -> None:
    monitor = Monitor(["n0"], 2, metric_interval=0.0)
    events = monitor.feed(
        "n0",
        _lines(
            (0, "rank 0 epoch=1/2 loss=2.3000 train_acc=0.10 test_acc=0.12 samples/s=100.0"),
            (1, "rank 1 epoch=1/2 loss=2.2000 train_acc=0.11 test_acc=0.12 samples/s=110.0"),
            (0, "no numbers here"),
            (0, "rank 0 epoch=2/2 loss=1.5000 train_acc=0.40 test_acc=0.42 samples/s=120.0"),
        ),
        now=100.0,
    )
    samples = [e for e in events if isinstance(e, MetricSampled)]
    assert [(s.rank, s.step) for s in samples] == [(0, 1), (1, 1), (0, 2)]
    assert samples[0].to_dict()["values"]["samples/s"] == 100.0
    summary = monitor.summary().metrics
    assert summary["loss.last"] == 1.5 and summary["loss.best"] == 1.5
    assert summary["samples/s.mean"] == 110.0 + 110.0  # rank 0's mean (100, 120) + rank 1's
    assert summary["test_acc.best"] == 0.42


def test_a_rank_flooding_metric_lines_is_read_once_per_interval_and_its_last_kept() -> None:
    monitor = Monitor(["n0"], 2)  # the session's 50 ms
    block = _lines(*[(0, f"step={i} loss={1.0 / (i + 1):.4f}") for i in range(5000)])
    events = monitor.feed("n0", block, now=10.0)
    events += monitor.feed("n0", _lines((0, "step=6000 loss=0.1")), now=10.01)
    # the interval is over: the line kept from the last block is read, this one kept
    events += monitor.feed("n0", _lines((0, "step=7000 loss=0.1")), now=10.06)
    events += monitor.tick(10.2, 0)  # a tick reads what was kept once the interval is over
    samples = [e for e in events if isinstance(e, MetricSampled)]
    assert [s.step for s in samples] == [0, 6000, 7000]


def test_the_last_line_before_the_output_ends_is_read() -> None:
    """elastic_ddp.py prints its throughput right after its last step's loss."""
    monitor = Monitor(["n0"], 1)
    lines = _lines(
        (0, "rank 0 step=60 loss=1.028988"),
        (0, "rank 0 throughput: 312.5 samples/s (60 steps in 3.1 s)"),
        (0, "rank 0 finished"),  # a number, no metric: not the line kept
    )
    events = monitor.feed("n0", lines, now=1.0) + monitor.end_of_output("n0")
    samples = [e for e in events if isinstance(e, MetricSampled)]
    assert [dict(s.values) for s in samples] == [{"loss": 1.028988}, {"samples/s": 312.5}]
    assert samples[1].step == 60


def test_a_nan_loss_marks_its_rank_and_is_its_cause_if_it_fails() -> None:
    monitor = Monitor(["n0"], 2, metric_interval=0.0)
    lines = [(1, f"step={i} loss={2.0 - i / 10:.3f}") for i in range(6)]
    events = monitor.feed("n0", _lines(*lines, (1, "step=6 loss=nan")), now=5.0)
    marked = [e for e in events if isinstance(e, RankChanged) and e.diagnoses]
    assert marked and marked[-1].rank == 1
    (diagnosis,) = marked[-1].diagnoses
    assert diagnosis.kind == NAN_OR_INF and "loss is nan at step 6" in diagnosis.summary
    assert diagnosis.line == "step=6 loss=nan"
    # the NaN stays NaN: one finding, not one per step
    again = monitor.feed("n0", _lines((1, "step=7 loss=nan")), now=6.0)
    assert not [e for e in again if isinstance(e, RankChanged) and len(e.diagnoses) > 1]
    assert math.isnan(monitor.summary().metrics["loss.last"])
    assert cause_of(1, "ValueError: boom", [NAN_OR_INF]) == "nan_or_inf"
    found = identify(["Traceback ...", "ValueError: boom"], {NAN_OR_INF})  # the verdict's
    assert found is not None and found[0].name == "nan_inf"


def test_a_loss_spike_marks_its_rank() -> None:
    monitor = Monitor(["n0"], 1, metric_interval=0.0)
    lines = [(0, f"step={i} loss=1.0") for i in range(8)] + [(0, "step=8 loss=5000")]
    events = monitor.feed("n0", _lines(*lines), now=1.0)
    kinds = [d.kind for e in events if isinstance(e, RankChanged) for d in e.diagnoses]
    assert kinds == [LOSS_SPIKE]


def test_the_jobs_own_patterns_are_read() -> None:
    monitor = Monitor(["n0"], 1, metric_patterns={"ppl": r"perplexity (\S+)"}, metric_interval=0)
    events = monitor.feed("n0", _lines((0, "eval perplexity 12.5 at step 3")), now=1.0)
    (sample,) = [e for e in events if isinstance(e, MetricSampled)]
    assert sample.values["ppl"] == 12.5 and sample.step == 3  # beside the formats' reading


def test_metrics_off_reads_none() -> None:
    monitor = Monitor(["n0"], 1, metrics=False)
    events = monitor.feed("n0", _lines((0, "step=1 loss=1.0")), now=1.0)
    assert not [e for e in events if isinstance(e, MetricSampled)]


def test_a_ranks_first_nan_is_read_inside_its_interval() -> None:
    """The rate cap never hides the news: rank 0's NaN two lines after a sample, then a
    line of its guard that names the loss, all in one block."""
    monitor = Monitor(["n0"], 1)
    lines = _lines(
        (0, "rank 0 step=4 loss=3.5e+30"),
        (0, "rank 0 step=5 loss=nan"),
        (0, "rank 0 step=6 loss=nan"),
        (0, "FloatingPointError: the loss is nan after 12 steps"),
    )
    events = monitor.feed("n0", lines, now=1.0) + monitor.end_of_output("n0")
    kinds = [d.kind for e in events if isinstance(e, RankChanged) for d in e.diagnoses]
    assert kinds == [NAN_OR_INF]
    steps = [e.step for e in events if isinstance(e, MetricSampled)]
    assert steps[:2] == [4, 5]  # step 6's NaN is sampled away: said once already


def test_a_bursts_last_step_and_the_throughput_line_after_it_are_both_read_as_one() -> None:
    """Thirty steps and a throughput line inside one interval: the last step's loss is not
    left out for the line after it; both come as one sample at step 30, at the rank's rate."""
    monitor = Monitor(["n0"], 1)  # the session's 50 ms
    burst = [(0, f"rank 0 step={i} loss={1.0 / i:.4f}") for i in range(1, 31)]
    burst.append((0, "rank 0 throughput: 912.5 samples/s (30 steps in 1.052 s)"))
    events = monitor.feed("n0", _lines(*burst), now=10.0)
    events += monitor.tick(10.2, 0)
    samples = [e for e in events if isinstance(e, MetricSampled)]
    assert [s.step for s in samples] == [1, 30]
    last = samples[-1].to_dict()["values"]
    assert last == {"loss": round(1 / 30, 4), "samples/s": 912.5}


def test_a_ranks_last_step_is_read_behind_another_ranks_lines_and_its_traceback() -> None:
    """One block: rank 1's twelve steps, then rank 0's, then both tracebacks (a `loss` word
    in them that reads as no metric); each rank's last step is read when the output ends,
    though the other rank's lines lie between it and the end."""
    monitor = Monitor(["n0"], 2)
    values = {1: "1.0975", 2: "1548322378629513216.0", 3: "inf", 4: "inf", 5: "inf"}
    lines = [
        (r, f"rank {r} step={s} loss={values.get(s, 'nan')}") for r in (1, 0) for s in range(1, 13)
    ]
    for r in (0, 1):  # as the script's traceback prints
        lines += [
            (r, f"[rank{r}]: Traceback (most recent call last):"),
            (r, f'[rank{r}]:   File "diverging_sgd.py", line 38, in <module>'),
            (r, f"[rank{r}]:     main()"),
            (r, f'[rank{r}]:   File "diverging_sgd.py", line 32, in main'),
            (r, f'[rank{r}]:     raise FloatingPointError(f"the loss is {{loss.item()}}")'),
            (r, f"[rank{r}]: FloatingPointError: the loss is nan after 12 steps"),
        ]
    events = monitor.feed("n0", _lines(*lines), now=10.0)
    events += monitor.end_of_output("n0")
    last = {e.rank: e for e in events if isinstance(e, MetricSampled)}
    assert {rank: s.step for rank, s in last.items()} == {0: 12, 1: 12}
    assert all(math.isnan(s.values["loss"]) for s in last.values())
    assert math.isnan(monitor.summary().metrics["loss.last"])


def test_a_nan_in_lines_without_a_step_says_which_report_it_was_however_they_came() -> None:
    """`loss: X` five times a second, the 5th NaN, with the default one-second interval (most
    lines unread): the NaN is the rank's 5th report whether the lines came one a block or all
    in one, or with another rank's lines between."""
    said_as = []
    for blocks in ([[i] for i in range(5)], [list(range(5))], [[0, 1], [2], [3, 4]]):
        monitor = Monitor(["n0"], 2)
        events: list = []
        for n, block in enumerate(blocks):
            lines = []
            for i in block:
                lines += [(0, f"step {i} done"), (1, f"loss: {'nan' if i == 4 else 1 / (i + 1)}")]
            events += monitor.feed("n0", _lines(*lines), now=1.0 + 0.2 * n)
        said = [d.summary for e in events if isinstance(e, RankChanged) for d in e.diagnoses]
        said_as.append(said)
    assert said_as == [["loss is nan in rank 1's 5th report"]] * 3
