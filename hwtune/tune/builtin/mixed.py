"""Built-in workload `mixed`: two different training jobs at once, a CNN and an MLP.

Run with 2 instances (`--instances 2`): even instances train the `cnn` workload's model, odd
ones the `mlp`'s, each in its own process, as two users' jobs share a node. Their samples are
not comparable (a CNN sample costs ~30× an MLP sample), so each reports `work_per_sec`: its
samples/s times its model's forward-pass floating-point operations per sample (Dense and
Conv2D layers, `_harness.forward_flops`), in MFLOP/s; the instances' values add up to the
node's useful work. Alone (one instance), it trains the CNN.
"""

from __future__ import annotations

import os

from hwtune.tune.builtin import _harness, cnn, mlp

METRIC = "work_per_sec"


def main() -> None:
    args = _harness.parse_args(__doc__ or "")
    index = int(os.environ.get("HWTUNE_TRIAL_INSTANCE") or os.environ.get("HWTUNE_INSTANCE") or 0)
    job = mlp if index % 2 else cnn
    batch = args.batch or job.BATCH
    report = _harness.configure()
    import numpy as np
    import tensorflow as tf

    rng = np.random.default_rng(0)
    shape = (mlp.FEATURES,) if job is mlp else cnn.SHAPE
    inputs = rng.random((batch, *shape), dtype=np.float32)
    labels = rng.integers(0, 10, size=(batch,))
    data = tf.data.Dataset.from_tensors((inputs, labels)).repeat()
    model = job.build_model()
    _harness.compile_for_training(model, report.jit_compile)
    rate = _harness.keras_fit_rate(model, data, batch, args)
    work = rate * _harness.forward_flops(model) / 1e6
    print(f"hwtune-metric: {METRIC}={work:.3f}", flush=True)
    _harness.report(rate, job=job.__name__.rsplit(".", 1)[-1], **_harness.model_details(model))


if __name__ == "__main__":
    main()
