"""Built-in workload `transformer`: Keras training of one transformer encoder block.

Sequences of 64 tokens of width 128 (already embedded: synthetic floats), one encoder block as
in "Attention Is All You Need" with pre-built Keras layers: 4-head self-attention, residual and
layer norm, a 512-wide feed-forward layer with GELU, residual and layer norm; then mean pooling
and a 10-class head. Batch 32. Batched matmuls, softmax, layer norm and GELU: element-wise work
next to the GEMMs, where thread counts and oneDNN behave unlike the CNN's and the MLP's.
"""

from __future__ import annotations

from typing import Any

from hwtune.tune.builtin import _harness

BATCH = 32
SEQUENCE = 64
WIDTH = 128
HEADS = 4
FEED_FORWARD = 512


def build_model() -> Any:
    import keras

    tokens = keras.Input((SEQUENCE, WIDTH))
    attended = keras.layers.MultiHeadAttention(HEADS, key_dim=WIDTH // HEADS)(tokens, tokens)
    x = keras.layers.LayerNormalization()(tokens + attended)
    hidden = keras.layers.Dense(FEED_FORWARD, activation="gelu")(x)
    x = keras.layers.LayerNormalization()(x + keras.layers.Dense(WIDTH)(hidden))
    pooled = keras.layers.GlobalAveragePooling1D()(x)
    logits = keras.layers.Dense(10, dtype="float32")(pooled)
    return keras.Model(tokens, logits)


def main() -> None:
    args = _harness.parse_args(__doc__ or "")
    batch = args.batch or BATCH
    report = _harness.configure()
    import numpy as np

    rng = np.random.default_rng(0)
    tokens = rng.standard_normal((batch, SEQUENCE, WIDTH), dtype=np.float32)
    _harness.train_and_report(build_model(), tokens, rng, args, report.jit_compile)


if __name__ == "__main__":
    main()
