"""Setting one planned value on TensorFlow or Keras, and saying what happened.

configure()'s report (hwtune.apply.runtime) calls these once TensorFlow is imported. Each
returns an `Outcome`: the status the report shows for the setting, the problem to warn about
when it could not take effect, and how to undo it. They take the `tensorflow` or `keras`
module as an argument and import neither: this module is only loaded when TensorFlow is.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any, NamedTuple

# tf.config.optimizer.set_jit accepts False, True or "autoclustering" (tf 2.x context.py).
JIT_ARGUMENT: dict[str, bool | str] = {
    "off": False,
    "autoclustering": "autoclustering",
    "on": True,
}


class Outcome(NamedTuple):
    status: str  # what the report says for the setting: "applied (2)", "not applied: …"
    problem: str | None = None  # why it could not take effect (warned about)
    undo: Callable[[], None] | None = None


def _quietly(function: Callable[[Any], Any], value: Any) -> Callable[[], None]:
    def undo() -> None:
        # e.g. threads after the runtime started: nothing can change them any more
        with contextlib.suppress(RuntimeError, ValueError):
            function(value)

    return undo


def set_threads(tf: Any, setting: str, value: int, variable: str, *, in_env: bool) -> Outcome:
    """`setting` ("intra_op_parallelism_threads", …) to `value`. `in_env`: the planned value
    was in `variable` before TensorFlow started, so its runtime already took it from there."""
    threading = tf.config.threading
    getter = getattr(threading, f"get_{setting}")
    setter = getattr(threading, f"set_{setting}")
    before = getter()
    try:
        setter(value)
    except RuntimeError as err:
        if before == value:
            return Outcome(f"applied ({value})")
        if in_env:
            return Outcome(f"in effect through {variable}={value}, set before TensorFlow started")
        return Outcome(
            f"not applied: runtime already initialised ({err})",
            f"{setting}={value} could not take effect: TensorFlow's runtime is already "
            f"initialised ({err}); it keeps {before or 'its default'}",
        )
    return Outcome(f"applied ({value})", undo=_quietly(setter, before))


def set_jit(tf: Any, level: str) -> Outcome | None:
    """XLA's level; None (and nothing changed) for a level TensorFlow has no argument for,
    which the caller reports."""
    argument = JIT_ARGUMENT.get(level)
    if argument is None:
        return None
    optimizer = tf.config.optimizer
    before = optimizer.get_jit()
    try:
        optimizer.set_jit(argument)
    except (RuntimeError, ValueError) as err:
        return Outcome(f"not applied: {err}", f"JIT level {level!r} could not take effect: {err}")
    return Outcome(f"applied ({level})", undo=_quietly(optimizer.set_jit, before or False))


def set_policy(keras: Any, name: str) -> Outcome:
    """The Keras global mixed-precision policy."""
    mixed = keras.mixed_precision
    before = mixed.global_policy().name
    try:
        mixed.set_global_policy(name)
    except (ValueError, RuntimeError) as err:
        return Outcome(
            f"not applied: {err}", f"mixed-precision policy {name!r} could not be set: {err}"
        )
    return Outcome(
        f"applied ({name}; layers built from now on use it)",
        undo=_quietly(mixed.set_global_policy, before),
    )


def set_gpu_memory(tf: Any, limit_mb: int) -> Outcome:
    """Cap each visible GPU at `limit_mb` MiB (instances sharing a GPU or MIG slice)."""
    config = tf.config
    gpus = config.list_physical_devices("GPU")
    if not gpus:
        return Outcome(f"not applied ({limit_mb} MiB): TensorFlow sees no GPU")
    try:
        for gpu in gpus:
            config.set_logical_device_configuration(
                gpu, [config.LogicalDeviceConfiguration(memory_limit=limit_mb)]
            )
    except (RuntimeError, ValueError) as err:
        return Outcome(
            f"not applied: {err}", f"GPU memory limit {limit_mb} MiB could not take effect: {err}"
        )
    return Outcome(f"applied ({limit_mb} MiB on {len(gpus)} GPU(s))")
