"""A training loop of tiny eager ops: the Python main thread is the bottleneck.

Run as `python python_bound.py SECONDS`; it stops after SECONDS.
"""

import sys
import time

import tensorflow as tf


def main() -> None:
    end = time.monotonic() + float(sys.argv[1])
    weights = tf.Variable(tf.ones([4, 4]))
    while time.monotonic() < end:
        for _ in range(100):  # eager, op by op: each costs Python dispatch, not compute
            weights.assign_add(tf.matmul(weights, weights) * 1e-9)


if __name__ == "__main__":
    main()
