"""Built-in workload `pipeline`: a tf.data input pipeline heavy on per-element work.

Synthetic 64×64 RGB "images" are made from random bytes, decoded, cast, randomly cropped,
flipped, brightness-adjusted and normalised in a parallel `map`, then batched and prefetched;
`samples_per_sec` counts elements consumed. Measures tf.data's parallelism (which follows the
intra-op pool and the CPU budget), not model compute; JIT and precision do not apply.
"""

from __future__ import annotations

from hwtune.tune.builtin import _harness

BATCH = 128
SIDE = 64


def main() -> None:
    args = _harness.parse_args(__doc__ or "")
    batch = args.batch or BATCH
    import tensorflow as tf

    def make(seed: tf.Tensor) -> tf.Tensor:
        raw = tf.random.stateless_uniform(
            (SIDE + 8, SIDE + 8, 3), seed=tf.stack([seed, seed]), maxval=255, dtype=tf.int32
        )
        return tf.io.encode_png(tf.cast(raw, tf.uint8))

    def augment(png: tf.Tensor) -> tf.Tensor:
        image = tf.cast(tf.io.decode_png(png, channels=3), tf.float32)
        image = tf.image.random_crop(image, (SIDE, SIDE, 3))
        image = tf.image.random_flip_left_right(image)
        image = tf.image.random_brightness(image, 0.2)
        return tf.image.per_image_standardization(image)

    # A small pool of encoded images, cached, so encoding is not what is measured.
    encoded = tf.data.Dataset.range(256).map(make).cache()
    data = (
        encoded.repeat()
        .map(augment, num_parallel_calls=tf.data.AUTOTUNE)
        .batch(batch)
        .prefetch(tf.data.AUTOTUNE)
    )
    iterator = iter(data)
    # tf.data's autotuner ramps its parallelism over the first batches: warm up longer.
    args.warmup_steps = max(args.warmup_steps, 20)
    rate = _harness.measure_steps(lambda: next(iterator), batch, args)
    _harness.report(rate)


if __name__ == "__main__":
    main()
