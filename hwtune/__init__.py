"""hwtune: fit TensorFlow to the machine it runs on.

    import hwtune
    hwtune.configure()            # at program start, before `import tensorflow`
    ds = ds.with_options(hwtune.data_options())   # the plan's tf.data pool and budgets

    hw = hwtune.detect()          # what this machine (or a snapshot under root=) has
    profile = hwtune.plan(hw)     # pure: settings, each with its reason

Importing this package has no side effects: it reads no file, probes nothing and leaves the
environment alone. The public names load lazily on first use (PEP 562).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

# public name -> module that defines it
# (Subpackages are named `probes` and `planner`, not `detect` and `plan`: importing a submodule
# binds its name on the package and would shadow the function of the same name.)
_LAZY = {
    "detect": "hwtune.probes",
    "plan": "hwtune.planner",
    "configure": "hwtune.apply.runtime",
    "data_options": "hwtune.apply.tfdata",
    "Hardware": "hwtune.models.hardware",
    "Profile": "hwtune.models.profile",
    "HwtuneError": "hwtune.errors",
}

__all__ = [
    "Hardware",
    "HwtuneError",
    "Profile",
    "__version__",
    "configure",
    "data_options",
    "detect",
    "plan",
]

if TYPE_CHECKING:
    from hwtune.apply.runtime import configure as configure
    from hwtune.apply.tfdata import data_options as data_options
    from hwtune.errors import HwtuneError as HwtuneError
    from hwtune.models.hardware import Hardware as Hardware
    from hwtune.models.profile import Profile as Profile
    from hwtune.planner import plan as plan
    from hwtune.probes import detect as detect


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'hwtune' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(__all__)
