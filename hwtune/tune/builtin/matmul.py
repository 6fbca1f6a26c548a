"""Built-in workload `matmul`: a chain of dense matrix multiplies in a `tf.function`.

512×512 matrices, eight products per step; `samples_per_sec` counts products. The purest test of
intra-op threads and oneDNN; XLA compiles the function when HWTUNE_TRIAL_JIT=on and bf16 is used
when HWTUNE_TRIAL_PRECISION names a bfloat16 policy.
"""

from __future__ import annotations

from hwtune.tune.builtin import _harness

SIZE = 512
PRODUCTS_PER_STEP = 8


def main() -> None:
    args = _harness.parse_args(__doc__ or "")
    report = _harness.configure()
    policy = report.precision or "float32"
    import tensorflow as tf

    dtype = tf.bfloat16 if "bfloat16" in policy else tf.float16 if "float16" in policy else None
    dtype = dtype or tf.float32
    jit = report.jit_compile
    a = tf.random.stateless_uniform((SIZE, SIZE), seed=(1, 2), dtype=tf.float32)
    b = tf.cast(tf.random.stateless_uniform((SIZE, SIZE), seed=(3, 4)), dtype)

    @tf.function(jit_compile=jit is True)  # type: ignore[untyped-decorator]
    def step(x: tf.Tensor) -> tf.Tensor:
        y = tf.cast(x, dtype)
        for _ in range(PRODUCTS_PER_STEP):
            # Scaled so the values stay finite over the chain in bf16 too.
            y = tf.matmul(y, b) * tf.cast(1.0 / SIZE, dtype)
        return tf.reduce_sum(tf.cast(y, tf.float32))

    rate = _harness.measure_steps(lambda: step(a).numpy(), PRODUCTS_PER_STEP, args)
    _harness.report(rate, policy=policy, jit=jit)


if __name__ == "__main__":
    main()
