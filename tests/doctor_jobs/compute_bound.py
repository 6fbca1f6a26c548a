"""A dense model trained on in-memory tensors: the compute pools do the work.

Run as `python compute_bound.py SECONDS`; it stops after SECONDS. One `fit` call for the
whole run (a callback ends it), so Keras's per-call set-up does not interleave Python work
with the steps; layers wide enough that a step is tens of milliseconds of matmuls.
"""

import sys
import time

import numpy as np
import tensorflow as tf


class StopAt(tf.keras.callbacks.Callback):
    def __init__(self, end: float) -> None:
        super().__init__()
        self.end = end

    def on_train_batch_end(self, batch, logs=None):
        if time.monotonic() > self.end:
            self.model.stop_training = True


def main() -> None:
    end = time.monotonic() + float(sys.argv[1])
    rng = np.random.default_rng(0)
    x = rng.random((8192, 512), dtype=np.float32)
    y = rng.random((8192, 1), dtype=np.float32)
    model = tf.keras.Sequential(
        [
            tf.keras.Input((512,)),
            tf.keras.layers.Dense(2048, activation="relu"),
            tf.keras.layers.Dense(2048, activation="relu"),
            tf.keras.layers.Dense(1),
        ]
    )
    model.compile("sgd", "mse")
    model.fit(x, y, batch_size=256, epochs=10**6, verbose=0, callbacks=[StopAt(end)])


if __name__ == "__main__":
    main()
