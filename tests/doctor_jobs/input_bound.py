"""A job whose tf.data map sleeps in Python: the compute waits for the input pipeline.

Run as `python input_bound.py SECONDS`; it stops after SECONDS (a safety net: the doctor
stops it sooner).
"""

import os
import sys
import time

import tensorflow as tf


def slow_read(x):
    time.sleep(0.02)  # a slow read: the map waits, it does not compute
    return x


def main() -> None:
    end = time.monotonic() + float(sys.argv[1])
    ds = (
        tf.data.Dataset.range(10**9)
        .map(
            lambda x: tf.py_function(slow_read, [x], tf.int64),
            num_parallel_calls=tf.data.AUTOTUNE,
        )
        .batch(4)
        .prefetch(tf.data.AUTOTUNE)
    )
    weights = tf.Variable(tf.random.normal([256, 256]))

    @tf.function
    def step(batch):
        product = tf.reduce_sum(tf.matmul(weights, weights))
        return product + tf.cast(tf.reduce_sum(batch), tf.float32)

    for batch in ds:
        step(batch)
        if time.monotonic() > end:
            break


if __name__ == "__main__":
    try:
        main()
    except KeyboardInterrupt:
        # The doctor stops its job with SIGINT. Left to itself, the interpreter's exit then
        # hung with tf.data's py_function runners still going, until the doctor's SIGKILL
        # 10 s (STOP_GRACE_S) later: 10 s of every live test of this job.
        os._exit(130)
