"""The settings the tuner searches, built around the plan.

Dimensions: intra-op threads, inter-op threads, oneDNN on/off, XLA JIT on/off, the mixed
precision policy (only where the plan finds one eligible and the user allowed it), and, in
batch mode, instances per node. Instance counts come with their own plan (the slices'
CPUs, and thread counts sized for a slice), so changing the count moves to that plan's threads.
Thread candidates per slice with a budget of n effective CPUs: 1, n/2, n and the plan's
choice, plus the number of CPUs the process can see (TensorFlow's own default, which a CPU
quota does not narrow).

Pinning: with several instances, `pinned` is a dimension of its own (each copy pinned to its
slice's CPUs, or all left unpinned with the same capped pools): the plan's rule
(hwtune.planner.instances.pinning) picks the start, and the tuner measures the other side,
since the rule rests on one machine's measurement (issue 17).
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field

from hwtune.models.profile import Profile
from hwtune.tune.config import (
    INTER_ENV,
    INTRA_ENV,
    ONEDNN_ENV,
    XLA_ENV,
    TrialConfig,
)

KNOB_ENV = frozenset({INTRA_ENV, INTER_ENV, ONEDNN_ENV, XLA_ENV})


@dataclass(frozen=True)
class SearchSpace:
    bases: Mapping[int, TrialConfig]  # instance count -> that count's planned configuration
    intra: Mapping[int, tuple[int, ...]]  # instance count -> intra-op candidates
    inter: Mapping[int, tuple[int, ...]]
    onednn: tuple[bool | None, ...] = (True, False)
    jit: tuple[bool | None, ...] = (False, True)
    precision: tuple[str | None, ...] = (None,)
    # instance count -> each slice's CPUs (counts above 1): what "pinned" pins the copies to
    slices: Mapping[int, tuple[tuple[int, ...], ...]] = field(default_factory=dict)
    dimensions: tuple[str, ...] = field(
        default=("precision", "onednn", "jit", "intra", "instances", "pinned", "inter")
    )

    def pin_options(self, count: int) -> tuple[tuple[tuple[int, ...], ...], ...]:
        """The `cpus` values a configuration of `count` instances may take: pinned, unpinned."""
        cpus = self.slices.get(count, ())
        return (cpus, ()) if count > 1 and cpus else ((),)

    def neighbors(self, config: TrialConfig) -> list[TrialConfig]:
        """Every configuration that differs from `config` in one setting, biggest effects'
        dimensions first (the order only matters for reading the log)."""
        found: list[TrialConfig] = []
        count = config.instances
        for dimension in self.dimensions:
            if dimension == "instances":
                for other in self.bases:
                    if other != count:
                        found.append(self._carry(self.bases[other], config))
                continue
            if dimension == "pinned":
                for cpus in self.pin_options(count):
                    if cpus != config.cpus:
                        found.append(config.replace(cpus=cpus))
                continue
            values: tuple[object, ...] = {
                "intra": self.intra.get(count, ()),
                "inter": self.inter.get(count, ()),
                "onednn": self.onednn,
                "jit": self.jit,
                "precision": self.precision,
            }[dimension]
            for value in values:
                if value != getattr(config, dimension):
                    found.append(config.replace(**{dimension: value}))
        return list(dict.fromkeys(found))

    @staticmethod
    def _carry(base: TrialConfig, config: TrialConfig) -> TrialConfig:
        return base.replace(onednn=config.onednn, jit=config.jit, precision=config.precision)

    def grid(self) -> Iterator[TrialConfig]:
        """The full grid (the benchmark's oracle): every combination, every instance count."""
        for count, base in self.bases.items():
            for intra, inter, onednn, jit, precision, cpus in itertools.product(
                self.intra[count],
                self.inter[count],
                self.onednn,
                self.jit,
                self.precision,
                self.pin_options(count),
            ):
                yield base.replace(
                    intra=intra,
                    inter=inter,
                    onednn=onednn,
                    jit=jit,
                    precision=precision,
                    cpus=cpus,
                )

    def size(self) -> int:
        return sum(1 for _ in self.grid())


def changed(before: TrialConfig, after: TrialConfig) -> list[str]:
    """The names of the settings that differ (for the log and the report)."""
    names = ("intra", "inter", "onednn", "jit", "precision", "instances", "pinned")
    return [name for name in names if getattr(before, name) != getattr(after, name)]


def _as_int(value: object) -> int | None:
    try:
        number = int(str(value))
    except (TypeError, ValueError):
        return None
    return number if number > 0 else None


def config_from_profile(
    profile: Profile, onednn_default: bool | None = None, pinned: bool = True
) -> TrialConfig:
    """The trial configuration that reproduces `profile` (its instances pinned to their
    slices when `pinned`, the planner's pinning rule)."""
    env = {name: setting.value for name, setting in profile.env.items()}
    onednn_text = env.get(ONEDNN_ENV)
    onednn = onednn_default if onednn_text is None else str(onednn_text) in ("1", "true")
    extra = tuple(
        sorted(
            (name, str(value))
            for name, value in env.items()
            if name not in KNOB_ENV and value is not None
        )
    )
    count = len(profile.instances)
    return TrialConfig(
        intra=_as_int(profile.threads.intra_op.value),
        inter=_as_int(profile.threads.inter_op.value),
        onednn=onednn,
        jit=str(profile.jit.level.value) != "off",
        precision=profile.precision.enabled,
        instances=count,
        cpus=tuple(s.cpus for s in profile.instances) if count > 1 and pinned else (),
        extra_env=extra,
        openmp=profile.threads.openmp is not None,
    )


def thread_candidates(budget: int, planned: int | None, seen: int) -> tuple[int, ...]:
    """1, half and all of a slice's CPU budget, the plan's count, and the CPUs the process
    sees (TensorFlow's default) unless that is over twice the budget (a 64-CPU host under a
    4-CPU quota: TF's 64 threads are what the "defaults" column measures, not a candidate)."""
    values = {1, max(1, budget // 2), budget}
    if planned:
        values.add(planned)
    if seen <= budget * 2:
        values.add(seen)
    return tuple(sorted(values))


def inter_candidates(planned: int | None) -> tuple[int, ...]:
    # One op at a time vs two overlapping: the choice that matters for a single model on a
    # few cores (Intel Model Zoo: inter-op = sockets; TF's default = all cores).
    return tuple(sorted({1, 2} | ({planned} if planned else set())))


def build_space(
    plans: Mapping[int, Profile],
    *,
    budget_cpus: int,
    visible_cpus: int,
    allow_precision: bool,
    onednn_default: bool | None,
    pinned: Mapping[int, bool] | None = None,
) -> SearchSpace:
    """The space around `plans` (instance count -> the plan for that many instances);
    `budget_cpus` is the effective CPU count (quota-capped), `visible_cpus` the usable CPUs,
    `pinned` the planner's pinning rule per count (default: pinned)."""
    pinned = pinned or {}
    bases = {
        count: config_from_profile(p, onednn_default, pinned.get(count, True))
        for count, p in plans.items()
    }
    # No CPU list detected (`cpus_assumed`): the slices' numbers are made up, nothing to pin.
    slices = {
        count: tuple(s.cpus for s in p.instances)
        for count, p in plans.items()
        if len(p.instances) > 1 and not p.instances[0].cpus_assumed
    }
    if not allow_precision:
        bases = {count: base.replace(precision=None) for count, base in bases.items()}
    intra: dict[int, tuple[int, ...]] = {}
    inter: dict[int, tuple[int, ...]] = {}
    for count, profile in plans.items():
        budget = max(1, budget_cpus // count)
        # Pinned to a slice, a process sees only the slice; unpinned or alone, it sees them all.
        pinned_here = count > 1 and pinned.get(count, True)
        seen = max(1, len(profile.instances[0].cpus)) if pinned_here else visible_cpus
        intra[count] = thread_candidates(budget, bases[count].intra, seen)
        inter[count] = inter_candidates(bases[count].inter)
    eligible = next(iter(plans.values())).precision.eligible if plans else ()
    precision: tuple[str | None, ...] = (None,)
    if allow_precision:
        precision = (None, *eligible)
    return SearchSpace(bases=bases, intra=intra, inter=inter, precision=precision, slices=slices)
