"""The compute-bound job, as a user of hwtune writes it: `hwtune.configure()` first.

Under `hwtune doctor`, configure() adds the step-time callback to Keras's fit.
Run as `python compute_configured.py SECONDS`.
"""

import hwtune

hwtune.configure()

from compute_bound import main  # noqa: E402 - after configure(), before TensorFlow

if __name__ == "__main__":
    main()
