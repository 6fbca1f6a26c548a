"""Paired ratios: each arm against its neighbour in the same round, with an interval.

The 2-core VM drifts ±20% between minutes and is bimodal (the same run sits near 1600 or
near 2100 samples/s for minutes at a time, issue 17), so unpaired medians of two arms can
swing from 0.76× to 1.15× while their paired ratio stays at 1.00×. Every arm runs once per
round, rounds are shuffled and take a minute or two; the ratio of A to B *in the same round*
cancels the level the machine was at then. The rounds' ratios are then summarised on the log
scale (a ratio's natural scale): their geometric mean, and a Student-t 95% interval over the
per-round log-ratios (n - 1 degrees of freedom; hwtune.tune.stats.t95). A target counts as met
only when the whole interval clears it.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from hwtune.tune.stats import t95

Verdict = Literal["met", "missed", "unclear", "no data"]


@dataclass(frozen=True, slots=True)
class Paired:
    """The paired ratio of two arms over n rounds: geometric mean and 95% interval."""

    n: int
    ratio: float
    low: float
    high: float

    def show(self) -> str:
        if self.n == 0:
            return "not measured together"
        if self.low == self.high == 1.0:
            return f"1.00× (same settings, n={self.n})"
        if self.n == 1:
            return f"{self.ratio:.2f}× (1 round: no interval)"
        return f"{self.ratio:.2f}× [{self.low:.2f}–{self.high:.2f}] (n={self.n})"


def rounds_of(entries: Iterable[Mapping[str, Any]]) -> dict[int, dict[str, float]]:
    """round -> configuration key -> throughput, from a scenario's final trials that
    succeeded (a failed trial leaves its arm out of that round's pairs)."""
    rounds: dict[int, dict[str, float]] = {}
    for entry in entries:
        if entry.get("phase") == "final" and entry.get("value"):
            rounds.setdefault(int(entry["round"]), {})[str(entry["config"])] = float(
                entry["value"]
            )
    return rounds


def ratios(rounds: Mapping[int, Mapping[str, float]], a: str, b: str) -> list[float]:
    """A over B in every round where both were measured, in round order."""
    return [
        values[a] / values[b]
        for _, values in sorted(rounds.items())
        if a in values and b in values
    ]


def interval(values: Sequence[float]) -> Paired:
    """Geometric mean of per-round ratios and its t-interval (infinite below 2 rounds)."""
    if not values:
        return Paired(0, math.nan, 0.0, math.inf)
    logs = [math.log(v) for v in values]
    centre = statistics.fmean(logs)
    if len(logs) < 2:
        return Paired(1, math.exp(centre), 0.0, math.inf)
    half = t95(len(logs) - 1) * statistics.stdev(logs) / math.sqrt(len(logs))
    return Paired(len(logs), math.exp(centre), math.exp(centre - half), math.exp(centre + half))


def paired(rounds: Mapping[int, Mapping[str, float]], a: str, b: str) -> Paired:
    """The paired ratio of arm `a` over arm `b` (the same key: exactly 1, the same arm)."""
    if a == b:
        n = sum(1 for values in rounds.values() if a in values)
        return Paired(n, 1.0, 1.0, 1.0)
    return interval(ratios(rounds, a, b))


def judge(result: Paired, target: float) -> Verdict:
    """met: the interval's lower bound clears `target`; missed: its upper bound is below
    it; unclear: the interval straddles it (too few rounds or too much noise to say)."""
    if result.n == 0:
        return "no data"
    if result.low >= target:
        return "met"
    if result.high < target:
        return "missed"
    return "unclear"


MARKS: dict[Verdict, str] = {
    "met": "✓ met",
    "missed": "✗ missed",
    "unclear": "~ unclear (interval straddles the target)",
    "no data": "— no data",
}
