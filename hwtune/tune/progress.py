"""Progress of `hwtune tune`: a one-line bar on a terminal, a line per trial otherwise.

    [########··········] 2:31/10:00  14 trials  best 1.62×  last 1,020/s: intra=2 inter=1 …

On a terminal the bar is redrawn after every trial with a carriage return, cut to the
terminal's width, and cleared at the end so the report starts on a clean line. Time is the
fraction of the budget: the search usually ends before it (when no neighbour is clearly
better), and the bar then just stops. When the stream is not a terminal (a CI log, `2>file`,
a pipe) each trial is one plain line instead, so a log shows the run as it goes:

    hwtune tune: trial 14 (2:31/10:00): 1,020/s intra=2 inter=1 …; best so far 1.62×

`summary()` is the one line printed when the run is interrupted (Ctrl-C).
"""

from __future__ import annotations

import math
import shutil
from typing import TextIO

from hwtune.models.words import plural
from hwtune.tune.search import Search
from hwtune.tune.trial import TrialResult

BAR_WIDTH = 20
# The range a rate is shown in without an exponent. A metric may lie anywhere from 1e-100 to
# 1e100 (trial.METRIC_MIN, METRIC_MAX), and 1e100 was shown as a 101-digit whole number,
# 1e-100 with 100 zeros. Below 1e15 every whole number is exact (a float holds each integer
# up to 2**53, about 9.0e15: IEEE 754 binary64's 53-bit significand), at most 21 characters
# with separators; from 1e-6 up the fixed form takes at most 9 (0.0000099).
EXPONENT_FROM = 1e15
EXPONENT_BELOW = 1e-6


def rate_text(value: float, *, decimals: int = 0) -> str:
    """A throughput for people, bounded: from 100 on whole numbers with separators (1,235;
    `decimals` more digits for the report, 1,234.5), from 1 up to three significant digits
    (99.5, 9.99, 1), below 1 two (0.047, 0.0001), so a slow workload's rate is never "0".
    Rounded first: 99.96 is "100", 0.999 is "1" (`.2g` gave "1e+02" and "1.2e-05"). Only
    outside EXPONENT_BELOW to EXPONENT_FROM is it in exponent form, with as many
    significant digits (1.23e+20, 1.2e-07)."""
    if not math.isfinite(value) or value < 0:
        return f"{value:,.{decimals}f}" if math.isfinite(value) else str(value)
    if value == 0:
        return "0"
    if value >= EXPONENT_FROM:
        return f"{value:.3g}"
    if value < 1:
        value = float(f"{value:.2g}")  # 0.999 -> 1.0, then shown as from 1 on
        if value < EXPONENT_BELOW:  # after rounding: 9.96e-07 is 0.000001
            return f"{value:.2g}"
        if value < 1:
            places = 1 - math.floor(math.log10(value))  # two significant digits
            return f"{value:.{places}f}".rstrip("0").rstrip(".")
    if value < 100:
        value = float(f"{value:.3g}")  # 99.96 -> 100.0, then shown as from 100 on
        if value < 100:
            return f"{value:.3g}"  # below 1000, .3g never takes the exponent form
    if decimals:
        return f"{value:,.{decimals}f}"
    return f"{math.floor(value + 0.5):,}"  # half up: 1,234.5 is 1,235


def clock_text(seconds: float) -> str:
    minutes, secs = divmod(int(max(0.0, seconds)), 60)
    return f"{minutes}:{secs:02d}"


def render_line(
    elapsed: float, budget: float, trials: int, ratio: float, last: TrialResult, width: int
) -> str:
    filled = min(BAR_WIDTH, int(BAR_WIDTH * elapsed / budget)) if budget > 0 else BAR_WIDTH
    bar = "#" * filled + "·" * (BAR_WIDTH - filled)
    if last.ok and last.value is not None:
        outcome = f"{rate_text(last.value)}/s"
    else:
        outcome = f"failed: {last.failure}"
    line = (
        f"[{bar}] {clock_text(elapsed)}/{clock_text(budget)}  {plural(trials, 'trial')}  "
        f"best {ratio:.2f}×  last {outcome}: {last.config.label()}"
    )
    return line[: max(10, width - 1)]


def trial_line(elapsed: float, budget: float, trials: int, ratio: float, last: TrialResult) -> str:
    """One trial as a plain log line (no bar, no carriage return)."""
    if last.ok and last.value is not None:
        outcome = f"{rate_text(last.value)}/s"
    else:
        outcome = f"failed ({last.failure})"
    return (
        f"hwtune tune: trial {trials} ({clock_text(elapsed)}/{clock_text(budget)}): "
        f"{outcome} {last.config.label()}; best so far {ratio:.2f}×"
    )


class Progress:
    """`tty`: draw the bar; otherwise write a line per trial."""

    def __init__(self, stream: TextIO, tty: bool) -> None:
        self.stream = stream
        self.tty = tty
        self._drawn = False
        self._search: Search | None = None

    def __call__(self, search: Search, result: TrialResult) -> None:
        self._search = search
        if not self.tty:
            line = trial_line(
                search.elapsed(),
                search.settings.budget_s,
                len(search.trials),
                search.ratio,
                result,
            )
            self.stream.write(line + "\n")
            self.stream.flush()
            return
        width = shutil.get_terminal_size((100, 20)).columns
        line = render_line(
            search.elapsed(),
            search.settings.budget_s,
            len(search.trials),
            search.ratio,
            result,
            width,
        )
        self.stream.write("\r\x1b[2K" + line)
        self.stream.flush()
        self._drawn = True

    def finish(self) -> None:
        if self.tty and self._drawn:
            self.stream.write("\r\x1b[2K")
            self.stream.flush()

    def summary(self) -> str:
        """What an interrupted run had found: trials, time, the best configuration so far."""
        search = self._search
        if search is None or not search.trials:
            return "hwtune tune: interrupted before the first trial finished; nothing stored"
        best = max(
            (t for t in search.trials if t.ok and t.value is not None),
            key=lambda t: t.value or 0.0,
            default=None,
        )
        found = (
            f"fastest trial {rate_text(best.value)}/s with {best.config.label()}"
            if best is not None and best.value is not None
            else "no trial succeeded"
        )
        return (
            f"hwtune tune: interrupted after {plural(len(search.trials), 'trial')} in "
            f"{clock_text(search.elapsed())}: {found}; best so far {search.ratio:.2f}× the plan "
            "(not confirmed, nothing stored)"
        )
