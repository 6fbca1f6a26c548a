"""What `hwtune.configure()` planned and did, as read by its caller (`report.intra_op`,
`report.jit_compile`, `report.summary()`, …).

The read-only half of `hwtune.apply.runtime.ConfigureReport`: the planned values come from the
profile payload, the outcome fields are filled in by the runtime as it applies them. Kept apart
so that the applying and undoing in runtime.py read in one sitting.
"""

from __future__ import annotations

from typing import Any


class ReportView:
    """The profile a `configure()` call planned and what happened to each of its settings."""

    def __init__(
        self, payload: dict[str, Any], *, cached: bool, cache_path: str, strict: bool
    ) -> None:
        self.payload = payload
        self.cached = cached
        self.cache_path = cache_path
        self.strict = strict
        self.env_set: dict[str, str] = {}  # set by this call
        self.env_already: dict[str, str] = {}  # already held the planned value
        self.env_user: dict[str, tuple[str, str]] = {}  # name -> (user's value, planned value)
        self.tensorflow: dict[str, str] = {}  # setting -> what happened to it
        self.problems: list[str] = []  # settings that could not take effect, and why
        self.notes: list[str] = [str(n) for n in payload.get("notes", [])]

    # -- what was planned -------------------------------------------------------------------
    @property
    def intra_op(self) -> int | None:
        value = self.payload.get("threads", {}).get("intra_op")
        return value if isinstance(value, int) else None

    @property
    def inter_op(self) -> int | None:
        value = self.payload.get("threads", {}).get("inter_op")
        return value if isinstance(value, int) else None

    @property
    def jit(self) -> str | None:
        """The planned XLA level ("off", "autoclustering", "on"); None: nothing to apply (an
        empty report, or a tuner trial that does not set HWTUNE_TRIAL_JIT)."""
        value = self.payload.get("jit")
        return str(value) if value is not None else None

    @property
    def jit_compile(self) -> bool | str:
        """What to pass to Keras: `model.compile(..., jit_compile=report.jit_compile)`.

        Keras 3 does not follow `tf.config.optimizer.set_jit` for its own train step: its
        default "auto" turns XLA off on CPU-only machines (keras/src/trainers/trainer.py,
        `_resolve_auto_jit_compile`). True when the profile plans XLA, False when it plans it
        off, "auto" (Keras's own default) when there is no plan.
        """
        if self.jit is None:
            return "auto"
        return self.jit != "off"

    @property
    def precision(self) -> str | None:
        return self._planned_text("precision")

    @property
    def tf_data(self) -> dict[str, Any]:
        """The planned tf.data values (private_threadpool_size, autotune_cpu_budget,
        autotune_ram_budget, parallel_calls, interleave_cycle_length, prefetch; -1 is
        tf.data.AUTOTUNE); `hwtune.data_options()` puts the first three in a tf.data.Options."""
        value = self.payload.get("tf_data")
        return dict(value) if isinstance(value, dict) else {}

    @property
    def data_format(self) -> str | None:
        return self._planned_text("data_format")

    @property
    def distribution(self) -> str | None:
        """The planned tf.distribute strategy ("MirroredStrategy"…); None without GPUs."""
        return self._planned_text("distribution")

    @property
    def env(self) -> dict[str, str]:
        """The planned environment (name -> value), whatever was done with it."""
        return {str(e[0]): str(e[1]) for e in self.payload.get("env", [])}

    def _planned_text(self, key: str) -> str | None:
        value = self.payload.get(key)
        return value if isinstance(value, str) else None

    # -- reporting --------------------------------------------------------------------------
    def as_dict(self) -> dict[str, Any]:
        return {
            "cached": self.cached,
            "cache_path": self.cache_path,
            "intent": self.payload.get("intent", {}),
            "env_set": dict(self.env_set),
            "env_already": dict(self.env_already),
            "env_user": {k: {"user": u, "planned": p} for k, (u, p) in self.env_user.items()},
            "tensorflow": dict(self.tensorflow),
            "tf_data": self.tf_data,
            "data_format": self.data_format,
            "distribution": self.distribution,
            "problems": list(self.problems),
            "notes": list(self.notes),
        }

    def summary(self) -> str:
        source = "cached profile" if self.cached else "fresh plan"
        lines = [f"hwtune.configure: {source} ({self.cache_path})"]
        lines += [f"  {k}={v}  set" for k, v in sorted(self.env_set.items())]
        lines += [f"  {k}={v}  already set" for k, v in sorted(self.env_already.items())]
        lines += [
            f"  {k}={u}  kept: set by the user (planned {p})"
            for k, (u, p) in sorted(self.env_user.items())
        ]
        lines += [f"  {k}: {v}" for k, v in sorted(self.tensorflow.items())]
        if self.tf_data:
            shown = ", ".join(f"{k}={v}" for k, v in self.tf_data.items())
            lines.append(f"  tf.data (hwtune.data_options()): {shown}")
        if self.data_format or self.distribution:
            lines.append(
                f"  data format: {self.data_format or '-'}; "
                f"distribution: {self.distribution or 'none (no GPU)'}"
            )
        lines += [f"  note: {n}" for n in self.notes]
        lines += [f"  problem: {p}" for p in self.problems]
        return "\n".join(lines)

    def __repr__(self) -> str:
        return (
            f"<ConfigureReport set={len(self.env_set)} user={len(self.env_user)} "
            f"tensorflow={self.tensorflow} problems={len(self.problems)}>"
        )
