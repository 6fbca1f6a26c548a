"""The verdict: a pure function of a sample set (and, optionally, the `verify` checks).

Every figure is a rate in CPUs (seconds per wall-clock second over the window) per thread
group, and every threshold is a ratio: of the budget, of another group, of the CFS periods.
"Demand" is time on a CPU plus time runnable but waiting for one (schedstat), so a thread
that wants a CPU counts fully however loaded the machine is; where schedstat is missing,
demand falls back to CPU time. docs/doctor.md gives the reasoning behind each threshold.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace

from hwtune.apply.verify import Check
from hwtune.doctor.metrics import (
    GROUP_NAMES,
    INTER_OP,
    MAIN,
    OTHER_TF,
    TF_DATA,
    UNNAMED,
    Metrics,
    measure,
)
from hwtune.doctor.samples import SampleSet
from hwtune.models.words import plural

# Thresholds (docs/doctor.md, "How the verdict is decided").
THROTTLED_PERIODS = 0.1  # share of CFS periods throttled
OVERSUBSCRIBED = 1.5  # wanting CPUs / budget: a finding
OVERSUBSCRIBED_VERDICT = 2.0  # wanting CPUs / budget: the bottleneck
PYTHON_MAIN = 0.8  # CPUs the main thread wants
COMPUTE_BUSY = 0.5  # compute demand / budget
COMPUTE_IDLE = 0.25  # compute demand / budget
INPUT_WAITERS = 0.5  # threads, on average, sleeping or waiting for I/O
DATA_BUSY = 0.5  # CPUs tf.data's own threads want
GPU_BUSY = 80.0  # percent


@dataclass(frozen=True)
class Finding:
    id: str
    finding: str
    evidence: str
    fix: str

    def as_dict(self) -> dict[str, str]:
        return {"id": self.id, "finding": self.finding, "evidence": self.evidence, "fix": self.fix}


@dataclass(frozen=True)
class Diagnosis:
    bottleneck: str  # input, compute, python, throttling, gpu-idle, unknown
    findings: list[Finding]
    metrics: Metrics | None
    notes: list[str] = field(default_factory=list)


def _cpus(value: float) -> str:
    return f"{value:.2f} CPUs"


def _groups(m: Metrics) -> str:
    parts = [
        f"{GROUP_NAMES[g]} {m.demand[g]:.2f}"
        for g in (MAIN, INTER_OP, UNNAMED, TF_DATA, OTHER_TF)
        if m.threads.get(g) or m.demand[g] > 0
    ]
    return "CPUs wanted per group: " + ", ".join(parts)


def _throttling(m: Metrics, data: SampleSet) -> Finding | None:
    if m.throttled_share is None or m.throttled_share < THROTTLED_PERIODS:
        return None
    quota = f"a {data.budget.quota:g}-CPU quota" if data.budget.quota else "its CPU quota"
    return Finding(
        "throttled",
        "the job is throttled by its cgroup's CPU quota",
        f"throttled in {m.throttled_share:.0%} of {m.periods} CFS periods "
        f"({m.throttled_s or 0:.1f} s throttled in {m.window_s:.1f} s) under {quota}; "
        f"its threads want {_cpus(m.total)} against a budget of {m.budget}",
        "size the thread pools to the quota: run it under `hwtune exec -- CMD` or source "
        "`hwtune env` (the plan counts the quota), or raise the quota",
    )


def _oversubscribed(m: Metrics) -> Finding | None:
    if m.total < OVERSUBSCRIBED * m.capacity:
        return None
    against = (
        f"a {m.capacity:g}-CPU cgroup quota"
        if m.capacity < m.budget
        else plural(m.budget, "effective CPU")
    )
    return Finding(
        "oversubscribed",
        "more threads want a CPU than the job can get",
        f"{_cpus(m.total)} wanted (on a CPU or runnable) against {against} "
        f"({m.runnable:.1f} runnable threads on average); {_groups(m)}",
        "run with hwtune's thread counts: `hwtune exec -- CMD` or `eval $(hwtune env)`",
    )


def _python(m: Metrics) -> Finding | None:
    main = m.demand[MAIN]
    if main < PYTHON_MAIN or main < m.compute:
        return None
    return Finding(
        "python-bound",
        "the Python main thread is the bottleneck",
        f"the main thread wants {_cpus(main)} (~{main:.0%} of one CPU) while the compute "
        f"pools want {_cpus(m.compute)}",
        "run the step as a graph: wrap it in `tf.function` (Keras does), raise "
        "`steps_per_execution` in `model.compile`, move Python work out of the loop",
    )


def _input(m: Metrics) -> Finding | None:
    data_busy = m.demand[TF_DATA] >= DATA_BUSY and m.demand[TF_DATA] >= m.compute
    idle_waiting = m.compute < COMPUTE_IDLE * m.budget and m.input_waiters >= INPUT_WAITERS
    if not (data_busy or idle_waiting):
        return None
    if data_busy:
        evidence = (
            f"tf.data's private pool wants {_cpus(m.demand[TF_DATA])}, the compute pools "
            f"{_cpus(m.compute)}"
        )
    else:
        evidence = (
            f"the compute pools want {_cpus(m.compute)} of a {m.budget}-CPU budget "
            f"(< {COMPUTE_IDLE:.0%}) while {m.input_waiters:.1f} threads on average sleep or "
            "wait for I/O"
        )
    return Finding(
        "input-bound",
        "the input pipeline cannot keep up: the compute pools wait for data",
        evidence + f"; {_groups(m)}",
        "apply the plan's tf.data settings: `ds = ds.with_options(hwtune.data_options())`, "
        "`map(..., num_parallel_calls=tf.data.AUTOTUNE)`, end with `.prefetch(tf.data.AUTOTUNE)`, "
        "`.cache()` what fits in memory after the expensive steps",
    )


def _gpu(m: Metrics, cause: Finding | None) -> Finding | None:
    if m.gpu_util is None or m.gpu_util >= GPU_BUSY:
        return None
    why = f"; on the CPU side: {cause.finding}" if cause else ""
    return Finding(
        "gpu-idle",
        f"the GPU is busy less than {GPU_BUSY:.0f}% of the time",
        f"mean utilisation {m.gpu_util:.0f}%, memory {m.gpu_memory or 0:.0%} used{why}",
        (cause.fix if cause else "feed the GPU more work per launch: larger batches")
        + "; `steps_per_execution` in `model.compile` cuts the per-step launch overhead",
    )


def _compute(m: Metrics) -> Finding | None:
    if m.compute < COMPUTE_BUSY * m.budget:
        return None
    return Finding(
        "compute-bound",
        "the job is compute-bound: TensorFlow's compute pools keep the CPUs busy",
        f"the compute pools want {_cpus(m.compute)} of a {m.budget}-CPU budget; {_groups(m)}",
        "this is where a job should be; faster needs less work per step (mixed precision where "
        "`hwtune plan` says eligible, XLA for dense models) or more CPUs",
    )


def _settings(checks: Sequence[Check]) -> list[Finding]:
    different = [c for c in checks if c.status == "DIFFERENT"]
    if not different:
        return []
    shown = "; ".join(f"{c.setting}: {c.actual} (planned {c.expected})" for c in different[:6])
    more = f" and {len(different) - 6} more" if len(different) > 6 else ""
    return [
        Finding(
            "settings-not-applied",
            f"{len(different)} of {len(checks)} planned settings did not take effect",
            shown + more,
            "start the job with `hwtune exec -- CMD`, or call `hwtune.configure()` before "
            "`import tensorflow`; `hwtune verify --pid PID` shows each check"
            + (
                " (variables are compared as the process started: the ones configure() sets "
                "inside it do not show in /proc, its thread pools do)"
                if any(c.setting.startswith("env ") for c in different)
                else ""
            ),
        )
    ]


def _signals(signals: dict[str, str]) -> list[Finding]:
    found: list[Finding] = []
    if not signals:
        return found
    created = int(signals.get("onednn_primitives", "0") or 0)
    opts = signals.get("onednn_opts") == "on"
    if created:
        found.append(
            Finding(
                "onednn-in-use",
                "oneDNN is in use",
                f"{created} oneDNN primitives created ({signals.get('onednn_kinds', '?')}); "
                f"ISA: {signals.get('onednn_isa') or 'not reported'}",
                "nothing to do",
            )
        )
    else:
        found.append(
            Finding(
                "onednn-not-used",
                "oneDNN built no primitive while the doctor watched",
                "TF's oneDNN custom operations are "
                + ("on" if opts else "not reported on")
                + ", yet ONEDNN_VERBOSE reported no primitive creation",
                "TF_ENABLE_ONEDNN_OPTS=1 enables them on x86 (hwtune plan sets it where it "
                "pays); XLA-compiled steps do not use TF's oneDNN kernels",
            )
        )
    xla = signals.get("xla", "not seen")
    found.append(
        Finding(
            "xla-in-use" if xla == "compiled" else "xla-not-used",
            "XLA compiles this job's clusters" if xla == "compiled" else "XLA is not in use",
            "TF logged `Compiled cluster using XLA!`"
            if xla == "compiled"
            else f"no `Compiled cluster using XLA!` in TF's log (XLA service: {xla})",
            "nothing to do"
            if xla == "compiled"
            else "where `hwtune plan` plans XLA, pass `jit_compile=True` to "
            "`model.compile` (TF's INFO log must be on: TF_CPP_MIN_LOG_LEVEL=0)",
        )
    )
    return found


def analyse(data: SampleSet, checks: Sequence[Check] = ()) -> Diagnosis:
    """The bottleneck and the findings, most important first."""
    m = measure(data)
    extra = _settings(checks) + _signals(data.signals)
    if m is None:
        return Diagnosis(
            "unknown", extra, None, ["fewer than two samples: the job ended too soon"]
        )
    throttled = _throttling(m, data)
    over = _oversubscribed(m)
    python, inputs, compute = _python(m), _input(m), _compute(m)
    gpu = _gpu(m, python or inputs)
    if throttled:
        bottleneck, lead = "throttling", throttled
    elif over and m.total >= OVERSUBSCRIBED_VERDICT * m.capacity:
        bottleneck, lead = "throttling", over
    elif gpu:
        bottleneck, lead = "gpu-idle", gpu
    elif python:
        bottleneck, lead = "python", python
    elif inputs:
        bottleneck, lead = "input", inputs
    elif compute:
        bottleneck, lead = "compute", compute
    else:
        bottleneck, lead = "unknown", None
    others = [f for f in (throttled, over, python, inputs, compute) if f is not lead]
    if lead is not None and m.step_median_s is not None:
        lead = replace(
            lead,
            evidence=f"{lead.evidence}; {m.steps} training steps, median "
            f"{m.step_median_s * 1000:.1f} ms",
        )
    findings = [f for f in [lead, *others] if f is not None] + extra
    notes = [] if m.schedstat else ["no schedstat: demand is CPU time only (waits not seen)"]
    if bottleneck == "unknown":
        notes.append(
            f"nothing stands out: the job's threads want {_cpus(m.total)} of a {m.budget}-CPU "
            "budget and none of the patterns matched (idle, or waiting on something else)"
        )
    return Diagnosis(bottleneck, findings, m, notes)
