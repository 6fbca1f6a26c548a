"""Built-in workload `cnn`: Keras training of a small convolutional net on synthetic images.

32×32×3 inputs, three conv blocks and a dense head (a CIFAR-10-sized model), batch 64. The data
is one in-memory batch repeated, so the input pipeline costs nothing and the number measured is
the training step: convolutions, where oneDNN, threads and bf16 matter most.
"""

from __future__ import annotations

from typing import Any

from hwtune.tune.builtin import _harness

BATCH = 64
SHAPE = (32, 32, 3)


def build_model() -> Any:
    """The CNN, uncompiled (the `inference` and `mixed` workloads reuse it)."""
    import keras

    return keras.Sequential(
        [
            keras.Input(SHAPE),
            keras.layers.Conv2D(32, 3, padding="same", activation="relu"),
            keras.layers.Conv2D(32, 3, padding="same", activation="relu"),
            keras.layers.MaxPooling2D(),
            keras.layers.Conv2D(64, 3, padding="same", activation="relu"),
            keras.layers.MaxPooling2D(),
            keras.layers.Conv2D(128, 3, padding="same", activation="relu"),
            keras.layers.GlobalAveragePooling2D(),
            keras.layers.Dense(128, activation="relu"),
            # The softmax stays float32 under mixed precision, as the Keras guide advises.
            keras.layers.Dense(10, dtype="float32"),
        ]
    )


def main() -> None:
    args = _harness.parse_args(__doc__ or "")
    batch = args.batch or BATCH
    report = _harness.configure()
    import numpy as np

    rng = np.random.default_rng(0)
    images = rng.random((batch, *SHAPE), dtype=np.float32)
    _harness.train_and_report(build_model(), images, rng, args, report.jit_compile)


if __name__ == "__main__":
    main()
