"""What configure() applies inside a `hwtune tune` trial (HWTUNE_TRIAL=1): no profile.

The trial's environment already holds the settings being measured, and a profile would undo
them. Only HWTUNE_TRIAL_JIT and HWTUNE_TRIAL_PRECISION are applied: TensorFlow reads no
variable for XLA's level in Keras or for the mixed-precision policy.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

# = hwtune.tune.config.TRIAL_ENV, TRIAL_JIT_ENV, TRIAL_PRECISION_ENV (not imported: start-up
# cost)
TRIAL_ENV = "HWTUNE_TRIAL"
TRIAL_JIT_ENV = "HWTUNE_TRIAL_JIT"
TRIAL_PRECISION_ENV = "HWTUNE_TRIAL_PRECISION"


def trial_payload(environ: Mapping[str, str]) -> dict[str, Any]:
    """The report payload of a tuner trial: its JIT and precision variables, nothing else.

    The names match hwtune/tune/config.py (not imported: start-up cost). An unset
    HWTUNE_TRIAL_JIT leaves JIT alone (the "TF defaults" trials); "float32" means no policy.
    """
    jit = {"on": "autoclustering", "off": "off"}.get(environ.get(TRIAL_JIT_ENV, ""))
    policy = environ.get(TRIAL_PRECISION_ENV, "") or None
    names = (TRIAL_JIT_ENV, TRIAL_PRECISION_ENV)
    shown = ", ".join(f"{name}={environ[name]}" for name in names if name in environ)
    return {
        "env": [],
        "threads": {},
        "jit": jit,
        "precision": None if policy == "float32" else policy,
        "notes": [
            f"a hwtune tune trial ({TRIAL_ENV}=1): the profile is not applied, the trial's "
            f"settings are measured as they are ({shown or 'TensorFlow defaults'})"
        ],
    }
