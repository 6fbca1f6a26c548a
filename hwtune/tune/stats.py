"""Small-sample statistics for noisy throughput: summaries, pooled noise, and "clear of the noise".

Throughput noise on a shared machine is multiplicative (a neighbour takes a share of the CPU),
so comparisons work on log-throughput: a difference of logs is a ratio. Each configuration is
measured only a few times, too few to estimate its own spread, but the spread is much the same
for every configuration of one workload on one machine, so it is pooled (the pooled-variance
two-sample t-test, with its degrees of freedom). Measurements taken in interleaved rounds also
share each round's machine load, which `Blocked` removes before pooling. A comparison is

- "better" / "worse" when the 95% confidence interval of the ratio excludes 1,
- "same" when that interval lies inside ±`equivalence` (two one-sided tests, TOST),
- "unclear" otherwise: measure more, or stop and keep what you had.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from typing import Literal

Verdict = Literal["better", "worse", "same", "unclear"]

# Two-sided 95% quantiles of Student's t by degrees of freedom (any statistics table, e.g.
# NIST/SEMATECH e-Handbook 1.3.6.7.2); between entries the smaller df's (larger) value is used.
_T95 = {
    1: 12.706,
    2: 4.303,
    3: 3.182,
    4: 2.776,
    5: 2.571,
    6: 2.447,
    7: 2.365,
    8: 2.306,
    9: 2.262,
    10: 2.228,
    12: 2.179,
    15: 2.131,
    20: 2.086,
    30: 2.042,
    60: 2.000,
    120: 1.980,
}
_Z95 = 1.960

# The smallest relative noise assumed, even when every repeat agreed exactly: timer resolution
# and run-to-run variation of a real process never go below ~0.5% (and a synthetic,
# noise-free objective must not make every difference "significant").
NOISE_FLOOR = 0.005


def t95(df: int) -> float:
    """The two-sided 95% t quantile for `df` degrees of freedom (conservative between rows)."""
    if df <= 0:
        return math.inf
    if df > max(_T95):
        return _Z95
    return _T95[max(table_df for table_df in _T95 if table_df <= df)]


def quantile(values: Sequence[float], q: float) -> float:
    """Linear-interpolation quantile (numpy's default, "type 7")."""
    ordered = sorted(values)
    if not ordered:
        raise ValueError("quantile of no values")
    position = (len(ordered) - 1) * q
    low = math.floor(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


@dataclass(frozen=True, slots=True)
class Summary:
    n: int
    median: float
    q1: float
    q3: float
    low: float
    high: float

    @property
    def spread(self) -> float:
        """Interquartile range relative to the median (0.08 = the middle half spans 8%)."""
        return (self.q3 - self.q1) / self.median if self.median else math.inf


def summarize(values: Sequence[float]) -> Summary:
    return Summary(
        n=len(values),
        median=statistics.median(values),
        q1=quantile(values, 0.25),
        q3=quantile(values, 0.75),
        low=min(values),
        high=max(values),
    )


def log_mean(values: Sequence[float]) -> float:
    return statistics.fmean(math.log(v) for v in values)


def geometric_mean(values: Sequence[float]) -> float:
    return math.exp(log_mean(values))


class PooledNoise:
    """The spread of log-throughput, pooled over groups of repeats of one configuration."""

    def __init__(self, floor: float = NOISE_FLOOR) -> None:
        self.floor = floor
        self._groups: dict[Hashable, list[float]] = {}

    def add(self, group: Hashable, value: float) -> None:
        self._groups.setdefault(group, []).append(math.log(value))

    @property
    def df(self) -> int:
        return sum(len(logs) - 1 for logs in self._groups.values() if len(logs) > 1)

    @property
    def sigma(self) -> float:
        """Pooled standard deviation of log-throughput (≈ relative noise); the floor if none."""
        squares = sum(
            sum((x - statistics.fmean(logs)) ** 2 for x in logs)
            for logs in self._groups.values()
            if len(logs) > 1
        )
        df = self.df
        return max(self.floor, math.sqrt(squares / df)) if df else self.floor


class Blocked:
    """Measurements in rounds (blocks): log y = effect(arm) + load(round) + noise.

    Every arm of a round runs within a minute or two, while the machine's load drifts over
    minutes (the same configuration measured minutes apart varied 2× on the shared VM, and 3×
    within one tuning run, all arms alike). Fitting a per-round level removes that drift from
    the comparison; what is left is the noise. The additive model is fitted by alternating
    means (exact for complete rounds, a least-squares fit for incomplete ones), and the
    residual sum of squares can be pooled with earlier races' (`prior`).
    """

    def __init__(self, floor: float = NOISE_FLOOR, prior: tuple[float, int] = (0.0, 0)) -> None:
        self.floor = floor
        self.prior = prior  # (residual sum of squares, degrees of freedom) from elsewhere
        self._logs: dict[tuple[Hashable, Hashable], float] = {}
        self._fit: tuple[dict[Hashable, float], float, int] | None = None

    def add(self, arm: Hashable, block: Hashable, value: float) -> None:
        self._logs[(arm, block)] = math.log(value)
        self._fit = None

    def count(self, arm: Hashable) -> int:
        return sum(1 for (a, _) in self._logs if a == arm)

    def fit(self) -> tuple[dict[Hashable, float], float, int]:
        """(arm effects in log units, residual sum of squares, residual df)."""
        if self._fit is not None:
            return self._fit
        if not self._logs:
            return {}, 0.0, 0
        arms = {a for a, _ in self._logs}
        blocks = {b for _, b in self._logs}
        effect = {
            a: statistics.fmean(y for (x, _), y in self._logs.items() if x == a) for a in arms
        }
        level = dict.fromkeys(blocks, 0.0)
        for _ in range(100):
            level = {
                b: statistics.fmean(y - effect[a] for (a, x), y in self._logs.items() if x == b)
                for b in blocks
            }
            shift = statistics.fmean(level.values())
            level = {b: v - shift for b, v in level.items()}
            new = {
                a: statistics.fmean(y - level[b] for (x, b), y in self._logs.items() if x == a)
                for a in arms
            }
            moved = max(abs(new[a] - effect[a]) for a in arms)
            effect = new
            if moved < 1e-12:
                break
        residual = sum((y - effect[a] - level[b]) ** 2 for (a, b), y in self._logs.items())
        df = len(self._logs) - len(arms) - len(blocks) + 1
        self._fit = (effect, residual, max(0, df))
        return self._fit

    def residual(self) -> tuple[float, int]:
        _, squares, df = self.fit()
        return squares, df

    def sigma(self) -> tuple[float, int]:
        """Pooled residual σ of log-throughput (with `prior`), floored, and its df."""
        squares, df = self.residual()
        squares += self.prior[0]
        df += self.prior[1]
        return (max(self.floor, math.sqrt(squares / df)) if df else self.floor), df

    def compare(self, a: Hashable, b: Hashable, *, equivalence: float = 0.03) -> Comparison:
        na, nb = self.count(a), self.count(b)
        if not na or not nb:
            return Comparison("unclear", math.nan, 0.0, math.inf)
        effect, _, _ = self.fit()
        sigma, df = self.sigma()
        diff = effect[a] - effect[b]
        return _verdict(diff, t95(df) * sigma * math.sqrt(1 / na + 1 / nb), equivalence)


@dataclass(frozen=True, slots=True)
class Comparison:
    verdict: Verdict
    ratio: float  # geometric mean of a over geometric mean of b
    low: float  # 95% confidence interval of the ratio
    high: float


def compare(
    a: Sequence[float],
    b: Sequence[float],
    noise: PooledNoise | None = None,
    *,
    equivalence: float = 0.03,
) -> Comparison:
    """Is `a` faster than `b`, beyond the noise? Uses `noise`'s pooled spread when given,
    else the two samples' own."""
    if not a or not b:
        return Comparison("unclear", math.nan, 0.0, math.inf)
    if noise is None:
        noise = PooledNoise()
        for value in a:
            noise.add("a", value)
        for value in b:
            noise.add("b", value)
    diff = log_mean(a) - log_mean(b)
    half = t95(noise.df) * noise.sigma * math.sqrt(1 / len(a) + 1 / len(b))
    return _verdict(diff, half, equivalence)


def _verdict(diff: float, half: float, equivalence: float) -> Comparison:
    """From a log-ratio and its 95% half-width: better/worse (interval excludes 0), same
    (interval inside ±equivalence), else unclear."""
    low, high = diff - half, diff + half
    margin = math.log1p(equivalence)
    verdict: Verdict
    if low > 0:
        verdict = "better"
    elif high < 0:
        verdict = "worse"
    elif -margin < low and high < margin:
        verdict = "same"
    else:
        verdict = "unclear"
    return Comparison(verdict, math.exp(diff), math.exp(low), math.exp(high))
