"""Built-in workload `inference`: batch inference with a saved model, as a serving job runs it.

The CNN of the `cnn` workload is saved in TensorFlow's SavedModel format (`model.export`) to a
temporary directory, loaded back with `tf.saved_model.load` (no Keras objects: what a serving
process has), and its `serve` function is called on batches of 256 images. `samples_per_sec`
counts images. One process per instance: instances are the natural lever here, since the jobs
share nothing and a batch's ops are too small to keep many threads busy.
"""

from __future__ import annotations

import tempfile

from hwtune.tune.builtin import _harness

BATCH = 256


def main() -> None:
    args = _harness.parse_args(__doc__ or "")
    batch = args.batch or BATCH
    report = _harness.configure()
    import numpy as np
    import tensorflow as tf

    from hwtune.tune.builtin.cnn import SHAPE, build_model

    model = build_model()
    images = np.random.default_rng(0).random((batch, *SHAPE), dtype=np.float32)
    model(images[:1])  # build the weights
    with tempfile.TemporaryDirectory(prefix="hwtune-inference-") as directory:
        model.export(directory, verbose=False)
        served = tf.saved_model.load(directory)
        jit = report.jit_compile is True
        serve = tf.function(served.serve, jit_compile=True) if jit else served.serve
        inputs = tf.constant(images)
        rate = _harness.measure_steps(lambda: serve(inputs).numpy(), batch, args)
    _harness.report(rate, policy=str(report.precision or "float32"), jit=jit)


if __name__ == "__main__":
    main()
