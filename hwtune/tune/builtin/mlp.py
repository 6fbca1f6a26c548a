"""Built-in workload `mlp`: Keras training of a multi-layer perceptron on synthetic tabular data.

256 features, three hidden layers of 512, batch 256: matrix multiplies of a size where thread
counts and instances per node matter more than kernels.
"""

from __future__ import annotations

from hwtune.tune.builtin import _harness

BATCH = 256
FEATURES = 256


def main() -> None:
    args = _harness.parse_args(__doc__ or "")
    batch = args.batch or BATCH
    report = _harness.configure()
    import keras
    import numpy as np
    import tensorflow as tf

    rng = np.random.default_rng(0)
    features = rng.random((batch, FEATURES), dtype=np.float32)
    labels = rng.integers(0, 10, size=(batch,))
    data = tf.data.Dataset.from_tensors((features, labels)).repeat()
    model = keras.Sequential(
        [
            keras.Input((FEATURES,)),
            keras.layers.Dense(512, activation="relu"),
            keras.layers.Dense(512, activation="relu"),
            keras.layers.Dense(512, activation="relu"),
            keras.layers.Dense(10, dtype="float32"),
        ]
    )
    model.compile(
        optimizer="adam",
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        jit_compile=report.jit_compile,
    )
    rate = _harness.keras_fit_rate(model, data, batch, args)
    policy = keras.mixed_precision.global_policy().name
    _harness.report(rate, policy=policy, jit=model.jit_compile)


if __name__ == "__main__":
    main()
