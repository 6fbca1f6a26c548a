"""Built-in workload `mlp`: Keras training of a multi-layer perceptron on synthetic tabular data.

256 features, three hidden layers of 512, batch 256: matrix multiplies of a size where thread
counts and instances per node matter more than kernels.
"""

from __future__ import annotations

from typing import Any

from hwtune.tune.builtin import _harness

BATCH = 256
FEATURES = 256


def build_model() -> Any:
    """The MLP, uncompiled (the `mixed` workload reuses it)."""
    import keras

    return keras.Sequential(
        [
            keras.Input((FEATURES,)),
            keras.layers.Dense(512, activation="relu"),
            keras.layers.Dense(512, activation="relu"),
            keras.layers.Dense(512, activation="relu"),
            keras.layers.Dense(10, dtype="float32"),
        ]
    )


def main() -> None:
    args = _harness.parse_args(__doc__ or "")
    batch = args.batch or BATCH
    report = _harness.configure()
    import numpy as np

    rng = np.random.default_rng(0)
    features = rng.random((batch, FEATURES), dtype=np.float32)
    _harness.train_and_report(build_model(), features, rng, args, report.jit_compile)


if __name__ == "__main__":
    main()
