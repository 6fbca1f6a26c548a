"""`hwtune.data_options()`: the plan's tf.data settings as a `tf.data.Options`.

    import hwtune, tensorflow as tf
    ds = ds.with_options(hwtune.data_options())

tf.data sizes its defaults from the host (hwtune/planner/data.py says why that is wrong in a
container or a slice); the Options carry what can be set per dataset:
`threading.private_threadpool_size` (input work in a pool of its own, sized to the slice,
instead of TF's inter-op pool), `autotune.cpu_budget` and
`autotune.ram_budget` (tf.data.experimental.AutotuneOptions). The per-op values
(num_parallel_calls, prefetch, interleave cycle_length) are arguments of the ops, not
Options: `configure()`'s report carries them (`report.tf_data`).

The profile comes from the same cache as `configure()` (hwtune.apply.cache) and follows this
process's instance and rank the same way. TensorFlow is imported here, inside the function.
"""

from __future__ import annotations

import os
from typing import Any

# payload key -> (Options group, attribute)
OPTIONS = {
    "private_threadpool_size": ("threading", "private_threadpool_size"),
    "autotune_cpu_budget": ("autotune", "cpu_budget"),
    "autotune_ram_budget": ("autotune", "ram_budget"),
}


def planned_values(payload: dict[str, Any]) -> dict[str, int]:
    """The Options values a profile payload plans (pure); a value left out stays TF's default."""
    tf_data = payload.get("tf_data")
    if not isinstance(tf_data, dict):
        return {}
    return {
        key: value
        for key in OPTIONS
        if isinstance(value := tf_data.get(key), int) and not isinstance(value, bool) and value > 0
    }


def data_options(
    *,
    mode: str | None = None,
    instances: int | None = None,
    instance: int | None = None,
    use_cache: bool = True,
) -> Any:
    """A `tf.data.Options` with the plan's private thread pool and autotune budgets.

    Args:
        mode, instances, instance: as for `hwtune.configure()` (by default from `hwtune exec`
            or the launcher's local rank).
        use_cache: use the cached profile when the machine is unchanged.
    """
    import tensorflow as tf

    from hwtune.apply.cache import lookup

    explicit = {
        key: value
        for key, value in (("mode", mode), ("instances", instances), ("instance", instance))
        if value is not None
    }
    payload, _, _ = lookup(explicit, os.environ, use_cache=use_cache)
    options = tf.data.Options()
    for key, value in planned_values(payload).items():
        group, attribute = OPTIONS[key]
        setattr(getattr(options, group), attribute, value)
    return options
