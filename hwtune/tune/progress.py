"""A one-line progress bar for `hwtune tune` on a terminal; nothing at all when piped.

    [########··········] 2:31/10:00  14 trials  best 1.62×  last 1,020/s: intra=2 inter=1 …

Redrawn after every trial with a carriage return, cut to the terminal's width, cleared at the
end so the report starts on a clean line. Time is the fraction of the budget: the search
usually ends before it (when no neighbour is clearly better), and the bar then just stops.
"""

from __future__ import annotations

import shutil
from typing import TextIO

from hwtune.tune.search import Search
from hwtune.tune.trial import TrialResult

BAR_WIDTH = 20


def clock_text(seconds: float) -> str:
    minutes, secs = divmod(int(max(0.0, seconds)), 60)
    return f"{minutes}:{secs:02d}"


def render_line(
    elapsed: float, budget: float, trials: int, ratio: float, last: TrialResult, width: int
) -> str:
    filled = min(BAR_WIDTH, int(BAR_WIDTH * elapsed / budget)) if budget > 0 else BAR_WIDTH
    bar = "#" * filled + "·" * (BAR_WIDTH - filled)
    if last.ok and last.value is not None:
        outcome = f"{last.value:,.0f}/s"
    else:
        outcome = f"failed: {last.failure}"
    line = (
        f"[{bar}] {clock_text(elapsed)}/{clock_text(budget)}  {trials} trials  "
        f"best {ratio:.2f}×  last {outcome}: {last.config.label()}"
    )
    return line[: max(10, width - 1)]


class Progress:
    def __init__(self, stream: TextIO, enabled: bool) -> None:
        self.stream = stream
        self.enabled = enabled
        self._drawn = False

    def __call__(self, search: Search, result: TrialResult) -> None:
        if not self.enabled:
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
        if self.enabled and self._drawn:
            self.stream.write("\r\x1b[2K")
            self.stream.flush()
