"""Step times for `hwtune doctor`: a Keras callback that `configure()` adds to every `fit`.

Only when the doctor started the job and set HWTUNE_DOCTOR_STEPS (a file it owns) in its
environment: then, once Keras is imported, `keras.Model.fit` gets one more callback that
appends the monotonic time of each train batch's end to that file (one short line per step;
with `steps_per_execution` > 1, one per execution). CLOCK_MONOTONIC is the machine's, so the
doctor puts the lines on its own sampling time line. Nothing happens without the variable.
"""

from __future__ import annotations

import time
from types import ModuleType
from typing import Any

STEPS_ENV = "HWTUNE_DOCTOR_STEPS"
_MARK = "_hwtune_doctor_steps"


def install(keras: ModuleType, path: str) -> bool:
    """Wrap `keras.Model.fit` to add the step-time callback; False if Keras has no Model."""
    model = getattr(keras, "Model", None)
    callbacks = getattr(keras, "callbacks", None)
    if model is None or callbacks is None or getattr(model.fit, _MARK, False):
        return model is not None
    base = callbacks.Callback

    class StepTimes(base):  # type: ignore[misc, valid-type]
        def __init__(self) -> None:
            super().__init__()
            self._file: Any = None

        def on_train_batch_end(self, batch: int, logs: Any = None) -> None:
            if self._file is None:
                self._file = open(path, "a", buffering=1, encoding="ascii")  # noqa: SIM115
            self._file.write(f"{time.monotonic():.6f}\n")

        def on_train_end(self, logs: Any = None) -> None:
            if self._file is not None:
                self._file.close()
                self._file = None

    original = model.fit

    def fit(self: Any, *args: Any, **kwargs: Any) -> Any:
        kwargs["callbacks"] = [*(kwargs.get("callbacks") or []), StepTimes()]
        return original(self, *args, **kwargs)

    setattr(fit, _MARK, True)
    model.fit = fit
    return True


def parse_steps(text: str) -> list[float]:
    """The timestamps of a steps file; a torn last line (the job was stopped) is skipped."""
    found = []
    for line in text.splitlines():
        try:
            found.append(float(line))
        except ValueError:
            continue
    return found
