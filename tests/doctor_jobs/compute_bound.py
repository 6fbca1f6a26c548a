"""A dense model trained on in-memory tensors: the compute pools do the work.

Run as `python compute_bound.py SECONDS`; it stops after SECONDS.
"""

import sys
import time

import numpy as np
import tensorflow as tf


def main() -> None:
    end = time.monotonic() + float(sys.argv[1])
    rng = np.random.default_rng(0)
    x = rng.random((4096, 512), dtype=np.float32)
    y = rng.random((4096, 1), dtype=np.float32)
    model = tf.keras.Sequential(
        [
            tf.keras.Input((512,)),
            tf.keras.layers.Dense(1024, activation="relu"),
            tf.keras.layers.Dense(1024, activation="relu"),
            tf.keras.layers.Dense(1),
        ]
    )
    model.compile("sgd", "mse")
    while time.monotonic() < end:
        model.fit(x, y, batch_size=256, epochs=1, verbose=0)


if __name__ == "__main__":
    main()
