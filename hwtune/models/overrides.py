"""What the user asked for, as `plan()` takes it: the merged result of config files,
HWTUNE_* variables, flags and `--set` (read by `hwtune.pipeline.config`). A model, not I/O, so
the pure planner can take it without importing the layer that reads files.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Literal

from hwtune.models.profile import Mode, ModelKind, PrecisionIntent

JitLevel = Literal["off", "autoclustering", "on"]
DataFormat = Literal["channels_last", "channels_first"]


@dataclass(frozen=True, slots=True)
class Overrides:
    """What the user asked for; every field None (or empty) means "let hwtune decide"."""

    env: dict[str, str] = field(default_factory=dict)  # reason "set by the user", source "user"
    mode: Mode | None = None
    instances: int | None = None
    instance: int | None = None
    precision: PrecisionIntent | None = None
    tf_version: str | None = None
    model: ModelKind | None = None
    intra_op: int | None = None
    inter_op: int | None = None
    jit: JitLevel | None = None
    data_format: DataFormat | None = None
    # The measured workload whose tuned result applies ("builtin:cnn", a `tune --name`); None:
    # no measured result applies (a measurement holds for the workload it was made on).
    workload: str | None = None
    # "mode", "intra_op", "env.NAME" -> where the value came from, for reasons and explain
    origins: dict[str, str] = field(default_factory=dict)

    def origin(self, key: str) -> str | None:
        return self.origins.get(key)

    def merged(self, later: Overrides) -> Overrides:
        """These overrides with `later`'s set fields on top (a later source wins)."""
        changes: dict[str, Any] = {}
        for f in dataclasses.fields(self):
            if f.name in ("env", "origins"):
                continue
            value = getattr(later, f.name)
            if value is not None:
                changes[f.name] = value
        return dataclasses.replace(
            self,
            env={**self.env, **later.env},
            origins={**self.origins, **later.origins},
            **changes,
        )
