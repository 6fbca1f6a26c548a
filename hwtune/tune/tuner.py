"""`tune()`: plan, build the space around the plan, search it with real trials, store the best.

The library face of `hwtune tune`; the command adds argument parsing, the progress bar and the
report. The plans come from the one planning pipeline (`hwtune.pipeline.request.profile_for`),
with the inputs every planning command takes (config files < HWTUNE_* < flags and --set, the
launcher's ranks), one plan per instance count searched, and never a measured result: the
tuner measures against the rules' choice. Nothing is stored unless the search compared
configurations, and a failed trial never contributes a value (trial.py); the result is keyed
by the plan's hardware fingerprint.
"""

from __future__ import annotations

import dataclasses
import math
import os
import statistics
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hwtune import __version__
from hwtune.errors import PlanError, TuneError
from hwtune.models.hardware import Hardware
from hwtune.models.profile import Mode, ModelKind, Profile
from hwtune.pipeline.measured import check_storable, save_result, settings_from_knobs
from hwtune.pipeline.request import PlanRequest, profile_for, resolve_share, user_overrides
from hwtune.tune.config import TrialConfig, to_json
from hwtune.tune.lock import one_tune_at_a_time, warn_on_stderr
from hwtune.tune.search import Search, SearchOutcome, SearchSettings
from hwtune.tune.space import SearchSpace, build_space
from hwtune.tune.trial import TrialResult, TrialRunner
from hwtune.tune.workloads import Workload

# Until one trial has finished, its duration is unknown: the first trial may take this long.
FIRST_TRIAL_TIMEOUT_S = 600.0
# After it, a trial may take this many times the first one's wall time (at least the floor)
# before it counts as hung: slower configurations exist (bf16 without oneDNN ran 40× slower
# per step on a 2-vCPU EPYC VM, TF 2.21, but the built-ins cap their warm-up by time, so a
# trial stays under ~3×).
TIMEOUT_FACTOR = 5.0
TIMEOUT_FLOOR_S = 60.0
# A trial's timeout is also capped by what is left of --budget, but never below this: the
# search starts a trial only when one as slow as the slowest so far fits in what is left, so
# the floor matters only for a first trial of a budget shorter than it.
BUDGET_LEFT_FLOOR_S = 1.0


@dataclass(frozen=True)
class TuneRequest:
    workload: Workload
    budget_s: float = 600.0
    trial_timeout_s: float | None = None  # None: adaptive (see TIMEOUT_FACTOR)
    allow_precision: bool = False
    mode: Mode = "throughput"
    model: ModelKind = "unknown"  # what the workload trains: the plan's XLA rule uses it
    instances: int | None = None  # fixed instance count; None: searched in batch mode, else 1
    store: bool = True
    seed: int = 0
    max_repeats: int = 4
    # What the plans start from: --root/--hardware, config files, HWTUNE_*, --set and the
    # intent flags, as every planning command takes them (`resolve_request` fills mode, model
    # and instances from it). None: this process's environment and config files.
    planning: PlanRequest | None = None


def resolve_request(planning: PlanRequest, hw: Hardware, **fields: Any) -> TuneRequest:
    """A TuneRequest whose mode, model and instance count are what `planning` resolves to on
    `hw`: config files < HWTUNE_* < flags, and the launcher's local ranks fix the count as they
    slice the node for `hwtune plan`. Unset: throughput, model unknown, the count searched."""
    flags, _, origins = resolve_share(planning.flags(), planning.environ, hw)
    overrides = user_overrides(planning, flags, origins)
    return TuneRequest(
        mode=overrides.mode or "throughput",
        model=overrides.model or "unknown",
        instances=overrides.instances,
        planning=planning,
        **fields,
    )


@dataclass
class TuneReport:
    request: TuneRequest
    fingerprint: str
    start: TrialConfig
    space: SearchSpace
    outcome: SearchOutcome
    record: dict[str, Any]
    path: Path | None  # where the result was stored; None with store=False
    store_error: str | None = None  # why storing it failed (ResultNotStored)

    def as_json(self) -> dict[str, Any]:
        outcome = self.outcome
        return {
            **self.record,
            "stored": str(self.path) if self.path else None,
            "store_error": self.store_error,
            "space_size": self.space.size(),
            "failures": [
                {"config": to_json(t.config), "failure": t.failure, "stderr_tail": t.stderr_tail}
                for t in outcome.failures
            ],
        }


class ResultNotStored(TuneError):
    """The search found a result and storing it failed: the report, so that what was measured
    is shown before the error."""

    def __init__(self, error: TuneError, report: TuneReport) -> None:
        super().__init__(error.message, hint=error.hint)
        self.report = report


def instance_counts(hw: Hardware, request: TuneRequest, batch: int | None = None) -> list[int]:
    """The instance counts to search: the user's; in batch mode 1, 2, 4, the NUMA node count,
    the copies the plan chose (`batch`) and half as many, as far as physical cores allow (the
    planner refuses more); else 1. Throughput and latency mode tune one job: copies of a
    training script are several trainings, whose summed samples/s is no speed-up of one, and
    `hwtune exec --workload` would start that many."""
    if request.instances is not None:
        return [request.instances]
    if request.mode != "batch":
        return [1]
    cores = hw.cpu.physical_cores or len(hw.limits.usable_cpus) or 1
    counts = {1, 2, 4, max(1, len(hw.numa))}
    if batch is not None:
        counts |= {batch, max(1, batch // 2)}
    return sorted(count for count in counts if count <= cores)


def batch_copies(hw: Hardware, request: TuneRequest) -> int | None:
    """The copies the plan chooses in batch mode without a count (None otherwise): the
    tuner's starting point, as `hwtune exec` would start them."""
    if request.mode != "batch" or request.instances is not None:
        return None
    return profile_for(plan_request(hw, request, None)).profile.intent.instances


def plan_request(hw: Hardware, request: TuneRequest, count: int | None) -> PlanRequest:
    """The pipeline's request for the plan of `count` instances (None: as many as the plan
    chooses, batch mode's copies): the user's planning inputs with the tuner's intent, and no
    measured result (the tuner's baseline is the rules')."""
    base = request.planning or PlanRequest(environ=os.environ)
    # A trial runs every copy on its own slice; the plan of one copy (--instance K of a fixed
    # count, else the first) gives the thread counts.
    instance: int | None = 0
    if count is None:
        instance = None
    elif count == request.instances and base.instance is not None:
        instance = base.instance
    return dataclasses.replace(
        base,
        hardware=hw,
        mode=request.mode,
        model=request.model,
        instances=count,
        instance=instance,
        precision="auto" if request.allow_precision else base.precision,
        workload=None,
        measured=False,
    )


def plans_for(
    hw: Hardware, request: TuneRequest, first: int, batch: int | None = None
) -> dict[int, Profile]:
    """The plan of every instance count searched; `first`, the count the search starts
    from, must plan. `batch`: the copies batch mode chose (`batch_copies`)."""
    plans: dict[int, Profile] = {}
    for count in instance_counts(hw, request, batch):
        try:
            plans[count] = profile_for(plan_request(hw, request, count)).profile
        except PlanError:
            if count == first:
                raise
    return plans


def prepare(hw: Hardware, request: TuneRequest) -> tuple[TrialConfig, SearchSpace, str]:
    """(the plan's configuration, the space around it, the hardware fingerprint)."""
    from hwtune.apply.launch import instance_pinning

    batch = batch_copies(hw, request)
    first = request.instances or batch or 1
    plans = plans_for(hw, request, first, batch)
    onednn_default = hw.tensorflow.onednn_default if hw.tensorflow else None
    # The rules' plans (no measured result): each plan's pinning, as `hwtune exec` reads it.
    pinned = {count: instance_pinning(p, hw).pinned for count, p in plans.items()}
    space = build_space(
        plans,
        budget_cpus=hw.limits.effective_cpus,
        visible_cpus=len(hw.limits.usable_cpus) or hw.limits.effective_cpus,
        allow_precision=request.allow_precision,
        onednn_default=onednn_default,
        pinned=pinned,
    )
    return space.bases[first], space, plans[first].fingerprint


class _AdaptiveTimeout:
    """Wraps a runner: the first trial gets FIRST_TRIAL_TIMEOUT_S, later ones a multiple of the
    first's time (or --trial-timeout); never more than what is left of --budget (`time_left`),
    so a hung trial ends with the budget, and a trial stopped there is `cut_by_budget`."""

    def __init__(
        self,
        runner: TrialRunner,
        fixed: float | None,
        budget_s: float,
        time_left: Callable[[], float] | None = None,
    ) -> None:
        self.runner = runner
        self.fixed = fixed
        self.budget_s = budget_s
        self.time_left = time_left or (lambda: budget_s)
        self.first_done = False
        self.timeout_s = fixed or FIRST_TRIAL_TIMEOUT_S

    def __call__(self, config: TrialConfig) -> TrialResult:
        left = max(BUDGET_LEFT_FLOOR_S, self.time_left())
        self.runner.timeout_s = min(self.timeout_s, left)
        result = self.runner.run(config)
        if result.timed_out and self.runner.timeout_s < self.timeout_s:
            return dataclasses.replace(result, cut_by_budget=True)
        if self.fixed is None and result.ok and not self.first_done:
            self.first_done = True
            self.timeout_s = max(TIMEOUT_FLOOR_S, TIMEOUT_FACTOR * result.wall_s)
        return result


def _budget_too_short(budget_s: float, outcome: SearchOutcome) -> TuneError:
    """The budget ended before any comparison: a budget to try instead, always more than the
    one that failed (ten trials as long as these, which may be less, or twice the budget when
    no trial finished)."""
    trials = len(outcome.trials)
    typical = outcome.measuring_s / max(1, trials)
    seen = f"{trials} trial(s) of ~{typical:.2g} s" if trials else "no trial finished"
    suggested = math.ceil(max(typical * 10, budget_s * 2))
    cut = outcome.cut
    if cut is not None and cut.reported:  # a larger budget would only wait longer
        return TuneError(
            f"--budget {budget_s:g} s was used up before any comparison finished ({seen}): "
            f"a trial printed `hwtune-metric: {cut.reported}`, then did not exit, and was "
            "stopped when the budget ended",
            hint="make the workload exit once it has printed its metric (a thread or child "
            "process it leaves running keeps it alive); nothing was stored",
        )
    return TuneError(
        f"--budget {budget_s:g} s was used up before any comparison finished ({seen})",
        hint=f"give at least --budget {suggested}; nothing was stored",
    )


def _median(outcome: SearchOutcome, config: TrialConfig) -> float | None:
    values = [t.value for t in outcome.trials if t.ok and t.config == config and t.value]
    return statistics.median(values) if values else None


def tune(
    hw: Hardware,
    request: TuneRequest,
    *,
    environ: Mapping[str, str] | None = None,
    on_trial: Callable[[Search, TrialResult], None] | None = None,
    cgroup_procs: Path | None = None,
    warn: Callable[[str], None] = warn_on_stderr,
) -> TuneReport:
    """Search `request.workload`'s best settings on `hw`, starting from the plan; `warn` gets
    what the caller should be told and is no error (default: a line on stderr)."""
    env = dict(os.environ if environ is None else environ)
    start, space, fingerprint = prepare(hw, request)
    runner = TrialRunner(
        request.workload, environ=env, timeout_s=FIRST_TRIAL_TIMEOUT_S, cgroup_procs=cgroup_procs
    )
    settings = SearchSettings(
        budget_s=request.budget_s, seed=request.seed, max_repeats=request.max_repeats
    )
    timeout = _AdaptiveTimeout(runner, request.trial_timeout_s, request.budget_s)
    search = Search(space, timeout, settings, on_trial=on_trial)
    timeout.time_left = lambda: request.budget_s - search.elapsed()
    if request.store:  # a store that cannot take the result fails now, not after the budget
        check_storable(fingerprint, request.workload.key, env)
    with one_tune_at_a_time(env, warn):
        outcome = search.run(start)
    if not any(race.completed >= settings.min_repeats for race in outcome.races):
        raise _budget_too_short(request.budget_s, outcome)
    precision_searched = len(space.precision) > 1
    # Pinning is stored where the best count had both sides to measure.
    pinning_searched = len(space.pin_options(outcome.best.instances)) > 1
    record: dict[str, Any] = {
        "fingerprint": fingerprint,
        "workload": request.workload.key,
        "command": request.workload.display,
        "mode": request.mode,
        "model": request.model,
        "ratio": round(outcome.ratio, 4),
        # The ratio's 95% interval, when the plan and the best were re-measured side by side.
        "ratio_interval": (
            [round(outcome.confirmation.low, 4), round(outcome.confirmation.high, 4)]
            if outcome.confirmation
            else None
        ),
        "settings": settings_from_knobs(
            outcome.best.knobs(),
            precision_searched=precision_searched,
            pinned=outcome.best.pinned if pinning_searched else None,
        ),
        "best": to_json(outcome.best),
        "start": to_json(outcome.start),
        "metric": next((t.metric for t in outcome.trials if t.ok), None),
        "best_median": _median(outcome, outcome.best),
        "start_median": _median(outcome, outcome.start),
        "trials": len(outcome.trials),
        "failed_trials": len(outcome.failures),
        "measuring_s": round(outcome.measuring_s, 2),
        "elapsed_s": round(outcome.elapsed_s, 2),
        "budget_s": request.budget_s,
        "stopped": outcome.stopped,
        "noise": round(outcome.noise, 4),
        "notes": list(outcome.notes),  # e.g. a re-measure lost to a flaky configuration
        "allow_precision": request.allow_precision,
        "hwtune": __version__,
    }
    report = TuneReport(request, fingerprint, start, space, outcome, record, None)
    if request.store:
        try:
            report.path = save_result(record, env)
        except TuneError as err:  # e.g. the disk filled meanwhile: show what was found first
            report.store_error = err.message
            raise ResultNotStored(err, report) from err
    return report
