"""The planner: a pure function from `Hardware` (+ intent, overrides, measurements) to a `Profile`.

    >>> profile = hwtune.plan(hw, mode="latency")          # the library call
    >>> explain(profile, "KMP_AFFINITY")                   # why a value, or why left out

Modules: instances (slices of cores/NUMA/GPUs), threads, knobs (oneDNN, OpenMP), accel (XLA,
precision, layout), data (tf.data), multigpu, bazel (source builds), explain; knowledge loads
the tables once, outside the pure core.
"""

from __future__ import annotations

from hwtune.planner.core import fingerprint, plan
from hwtune.planner.explain import explain, setting_names
from hwtune.planner.knowledge import Knowledge, default_knowledge, load_knowledge

__all__ = [
    "Knowledge",
    "default_knowledge",
    "explain",
    "fingerprint",
    "load_knowledge",
    "plan",
    "setting_names",
]
