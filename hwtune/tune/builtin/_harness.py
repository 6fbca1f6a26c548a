"""What the built-in workloads share: arguments, trial settings, warm-up and the metric line.

Throughput is measured after `--warmup-steps` (tracing and XLA compilation happen on the first
steps) over a window of `--seconds`, cut into sub-windows; the reported value is the median of
the sub-window rates. On a shared machine a neighbour's burst slows one sub-window, and the
median ignores it, while a setting that is really slower slows all of them.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any

# Sub-windows per measurement: enough for a median to shed one disturbed slice, few enough that
# each still spans several steps at ~0.3 s per step (CNN training on 1 CPU of a 2-vCPU EPYC VM).
SUB_WINDOWS = 5
# A configuration 40× slower than the best (bf16 without oneDNN, on a 2-vCPU EPYC VM, TF 2.21)
# must not spend a minute warming up: after this long past the first step, two steps are
# warm-up enough.
WARMUP_CAP_S = 2.0


def parse_args(description: str, argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--seconds", type=float, default=3.0, help="measurement window")
    parser.add_argument("--warmup-steps", type=int, default=5, help="steps discarded first")
    parser.add_argument("--batch", type=int, default=0, help="batch size (0: the workload's)")
    parser.add_argument("--max-steps", type=int, default=100_000, help="stop after this many")
    args = parser.parse_args(argv)
    args.warmup_steps = max(1, args.warmup_steps)  # the first step traces (and compiles)
    return args


def configure() -> Any:
    """`hwtune.configure()`, called the way a user's program calls it, before TensorFlow.

    In a tuner trial (HWTUNE_TRIAL=1) it applies only the trial's XLA and precision settings
    (HWTUNE_TRIAL_JIT, HWTUNE_TRIAL_PRECISION; TensorFlow reads the other knobs from the
    environment itself); run by hand, the machine's profile. Either way the workload then
    passes `report.jit_compile` to Keras and gets the precision policy set on import.
    """
    import hwtune

    return hwtune.configure()


def rate_from_step_times(ends: Sequence[float], start: float, samples_per_step: int) -> float:
    """Median samples/s over `SUB_WINDOWS` slices of the step end times after `start`."""
    if not ends:
        raise SystemExit("hwtune workload: no step finished inside the measurement window")
    slices = max(1, min(SUB_WINDOWS, len(ends) // 2))
    per_slice = len(ends) // slices
    rates, begin = [], start
    for k in range(slices):
        chunk = ends[k * per_slice : (k + 1) * per_slice]
        elapsed = chunk[-1] - begin
        rates.append(len(chunk) * samples_per_step / elapsed if elapsed > 0 else 0.0)
        begin = chunk[-1]
    return statistics.median(rates)


def report(samples_per_sec: float, **details: Any) -> None:
    extra = " ".join(f"{key}={value}" for key, value in details.items())
    print(f"hwtune-metric: samples_per_sec={samples_per_sec:.3f}", flush=True)
    if extra:
        print(f"# {extra}", file=sys.stderr, flush=True)


class _Warmup:
    """Counts warm-up steps; done after `steps`, or sooner for a slow configuration: after two
    steps (the first one traces and compiles) once `WARMUP_CAP_S` have passed since the first."""

    def __init__(self, steps: int) -> None:
        self.steps = steps
        self.seen = 0
        self.first_end = 0.0

    def step_done(self, now: float) -> bool:
        self.seen += 1
        if self.seen == 1:
            self.first_end = now
        return self.seen >= self.steps or (self.seen >= 2 and now - self.first_end >= WARMUP_CAP_S)


def wait_for_siblings(timeout_s: float = 120.0) -> None:
    """With N concurrent instances, start measuring together: each marks itself ready in the
    trial's barrier directory and waits for the others, so no instance measures while a sibling
    is still importing TensorFlow (which would flatter the early one)."""
    barrier = os.environ.get("HWTUNE_TRIAL_BARRIER")
    count = int(os.environ.get("HWTUNE_TRIAL_INSTANCES", "1") or 1)
    if not barrier or count <= 1:
        return
    mine = os.path.join(barrier, os.environ.get("HWTUNE_TRIAL_INSTANCE", str(os.getpid())))
    with open(mine, "w", encoding="ascii"):
        pass
    deadline = time.monotonic() + timeout_s
    while len(os.listdir(barrier)) < count and time.monotonic() < deadline:
        time.sleep(0.02)


def measure_steps(
    step: Callable[[], object], samples_per_step: int, args: argparse.Namespace
) -> float:
    """Run `step` for the warm-up, then for `args.seconds`; the median sub-window rate."""
    warmup = _Warmup(args.warmup_steps)
    while True:
        step()
        if warmup.step_done(time.perf_counter()):
            break
    wait_for_siblings()
    ends: list[float] = []
    start = time.perf_counter()
    while len(ends) < args.max_steps:
        step()
        ends.append(time.perf_counter())
        if ends[-1] - start >= args.seconds and len(ends) >= 2:
            break
    return rate_from_step_times(ends, start, samples_per_step)


def keras_fit_rate(model: Any, data: Any, batch: int, args: argparse.Namespace) -> float:
    """Train `model` on the endless dataset `data` with `fit`, timing batches by callback."""
    import keras

    ends: list[float] = []
    warmup = _Warmup(args.warmup_steps)
    state = {"start": 0.0, "measuring": False}

    class Timer(keras.callbacks.Callback):  # type: ignore[misc]
        def on_train_batch_end(self, batch_index: int, logs: Any = None) -> None:
            now = time.perf_counter()
            if not state["measuring"]:
                if warmup.step_done(now):
                    wait_for_siblings()
                    state["start"], state["measuring"] = time.perf_counter(), True
                return
            ends.append(now)
            done = now - state["start"] >= args.seconds and len(ends) >= 2
            if done or len(ends) >= args.max_steps:
                self.model.stop_training = True

    total = args.warmup_steps + args.max_steps
    model.fit(data, epochs=1, steps_per_epoch=total, verbose=0, shuffle=False, callbacks=[Timer()])
    return rate_from_step_times(ends, state["start"], batch)


def train_and_report(
    model: Any, inputs: Any, rng: Any, args: argparse.Namespace, jit_compile: Any
) -> None:
    """Train `model` on one in-memory batch of (inputs, 10-class labels drawn from `rng`),
    repeated, and report its samples/s: the common tail of the built-in training workloads."""
    import tensorflow as tf

    batch = len(inputs)
    labels = rng.integers(0, 10, size=(batch,))
    data = tf.data.Dataset.from_tensors((inputs, labels)).repeat()
    compile_for_training(model, jit_compile)
    report(keras_fit_rate(model, data, batch, args), **model_details(model))


def compile_for_training(model: Any, jit_compile: Any) -> None:
    """Adam and sparse cross-entropy on logits: what every training built-in compiles with."""
    import keras

    model.compile(
        optimizer="adam",
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        jit_compile=jit_compile,
    )


def model_details(model: Any) -> dict[str, Any]:
    """What the metric's comment line shows: the precision policy and whether XLA compiled."""
    import keras

    return {"policy": keras.mixed_precision.global_policy().name, "jit": model.jit_compile}


def forward_flops(model: Any) -> int:
    """Floating-point operations of one sample's forward pass through the model's Dense and
    Conv2D layers (2 per multiply-add; activations, pooling and normalisation left out): the
    weight that puts different models' samples on one scale (the `mixed` workload)."""
    import math

    total = 0
    for layer in model.layers:
        kernel = getattr(layer, "kernel", None)
        if kernel is None:
            continue
        # Dense applies its kernel at every position but the last axis; Conv2D at every
        # output pixel: either way, the output's positions times the kernel's size.
        positions = math.prod(int(d) for d in layer.output.shape[1:-1])
        total += 2 * positions * math.prod(int(d) for d in kernel.shape)
    return total
