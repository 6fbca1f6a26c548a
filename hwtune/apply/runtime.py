"""`hwtune.configure()`: fit this process to the machine at program start.

    import hwtune
    report = hwtune.configure()      # before `import tensorflow`
    import tensorflow as tf          # threads, JIT and precision policy are applied here

What it does, in order:
1. Finds the profile: the cached one when the machine's fingerprint is unchanged
   (`hwtune.apply.cache`), else it detects and plans once and caches the result.
2. Sets the profile's environment variables; a variable the user already set to another value
   is left alone and reported (`report.env_user`). TensorFlow reads its thread variables
   (TF_NUM_INTRAOP_THREADS, TF_NUM_INTEROP_THREADS) when its runtime starts, so before the
   import the environment alone sizes the pools.
3. Applies `tf.config.threading`, `tf.config.optimizer.set_jit` and the Keras mixed-precision
   policy: at once when TensorFlow is already imported, otherwise right after `import
   tensorflow` finishes, through a one-shot post-import hook on `sys.meta_path` (a finder that
   only answers for "tensorflow", "keras" and "tf_keras", wraps their loader, and removes
   itself once done). The hook is why `tf.config.threading.get_*` report the planned values
   and why the policy needs no Keras import from hwtune. `configure(tensorflow=False)` skips
   it; `report.apply_tensorflow()` applies explicitly.
4. If TensorFlow is already imported and its runtime initialised, what can still change is
   applied, and a `RuntimeWarning` names every setting that could not take effect and why
   (`strict=True` undoes what it did and raises `ConfigError` instead). It never raises
   otherwise: a planning failure is a warning and an empty report, so a training job never
   dies for hwtune's sake.

The report is also a context manager: leaving the `with` block restores the environment,
removes a pending hook, and restores the threading/JIT/policy values that can still change.
Importing this module has no side effects; its warm path imports no pydantic, psutil,
dataclasses, probes or planner.
"""

from __future__ import annotations

import contextlib
import os
import sys
import warnings
from collections.abc import Callable
from types import ModuleType, TracebackType
from typing import Any

from hwtune.apply.configure_report import ReportView
from hwtune.apply.importhook import PostImportHook
from hwtune.errors import ConfigError, stderr_line

INTRA_OP_ENV = (
    "TF_NUM_INTRAOP_THREADS"  # = hwtune.apply.render.INTRA_OP_ENV (not imported: start-up cost)
)
INTER_OP_ENV = "TF_NUM_INTEROP_THREADS"
TRIAL_ENV = "HWTUNE_TRIAL"  # = hwtune.apply.trial_env.TRIAL_ENV (its import waits for a trial)
_KERAS_MODULES = ("keras", "tf_keras")

# Variables a configure() of this process set, and to what: a later configure() may replace
# its own values (they are not the user's).
_OWNED: dict[str, str] = {}
# Of those, the ones set while TensorFlow was already imported (so TF did not read them).
_SET_LATE: set[str] = set()


_HOOK = PostImportHook()


class ConfigureReport(ReportView):
    """What `configure()` did (hwtune.apply.configure_report.ReportView reads it). Also a
    context manager that undoes it on exit."""

    def __init__(
        self, payload: dict[str, Any], *, cached: bool, cache_path: str, strict: bool
    ) -> None:
        super().__init__(payload, cached=cached, cache_path=cache_path, strict=strict)
        self._previous_env: dict[str, str | None] = {}
        self._undo: list[Callable[[], None]] = []
        self._tf_pending = False
        self._warned = 0
        self._marker: tuple[str | None, str] | None = None  # HWTUNE_PROFILE (before, set)
        self._owned_before: dict[str, str] = {}  # _OWNED as this report found it
        self._recorded = False  # whether _record wrote this process's record
        self._pid = os.getpid()  # the process that called configure(); see _record

    # -- applying ---------------------------------------------------------------------------
    def _apply_environment(self) -> None:
        from hwtune.apply.marker import fatal_to_tensorflow, hwtune_owned, replaced_note

        self._owned_before = dict(_OWNED)
        tf_loaded = "tensorflow" in sys.modules
        late: list[str] = []
        refused: list[str] = []
        # Values an earlier `eval "$(hwtune env)"` or `hwtune exec` wrote are hwtune's too.
        earlier = hwtune_owned(os.environ) | {
            n for n, v in _OWNED.items() if os.environ.get(n) == v
        }
        for name, value, *_ in self.payload.get("env", []):
            current = os.environ.get(name)
            if current == value:
                self.env_already[name] = value
                continue
            fatal = fatal_to_tensorflow(name, current) if current is not None else None
            if fatal is not None:
                # Not a value anyone means: kept, TensorFlow killed the program (SIGABRT).
                replaced = replaced_note(name, current or "", value, fatal)
                self.notes.append(replaced)
                warnings.warn(f"hwtune.configure: {replaced}", RuntimeWarning, stacklevel=4)
            elif current is not None and name not in earlier:
                self.env_user[name] = (current, value)
                continue
            try:
                os.environ[name] = value
            except (ValueError, TypeError, UnicodeError, OSError) as err:
                # e.g. a NUL in the value (ValueError: embedded null byte) from a damaged
                # cache: no environment can hold it, and configure() must not raise for it.
                refused.append(f"{name} ({type(err).__name__}: {err})")
                continue
            self._previous_env[name] = current
            _OWNED[name] = value
            self.env_set[name] = value
            if tf_loaded:
                _SET_LATE.add(name)
                if name not in (INTRA_OP_ENV, INTER_OP_ENV):
                    late.append(name)
        self._mark_own(earlier)
        if refused:
            self.problems.append(f"could not set {', '.join(refused)}; left unset")
        if late:
            self.problems.append(
                f"{', '.join(late)} set after TensorFlow was imported: TensorFlow reads such "
                "variables when it loads or starts, so they may not take effect in this process "
                "(they do in processes it starts); call hwtune.configure() before importing it"
            )

    def _mark_own(self, earlier: set[str]) -> None:
        """Drop hwtune's earlier values this plan no longer sets; rewrite HWTUNE_PROFILE.

        The rule is `hwtune env`'s (hwtune.apply.marker.stale): in an instance `hwtune exec`
        started, exec's own variables (HWTUNE_INSTANCE(S), its GPUs) are no plan's to drop,
        and the new marker still names them (marker.launch_kept)."""
        from hwtune.apply.marker import MARKER, launch_kept, marker_value, stale

        planned = {str(e[0]) for e in self.payload.get("env", [])}
        launch = launch_kept(os.environ, planned)  # read before the marker is rewritten
        for name in sorted(stale(os.environ, planned, owned=earlier)):
            self._previous_env.setdefault(name, os.environ.pop(name, None))
            _OWNED.pop(name, None)
        own = set(self.env_set) | (set(self.env_already) & earlier)
        written = {**launch, **{n: os.environ[n] for n in own}}
        self._marker = (os.environ.get(MARKER), marker_value(written))
        os.environ[MARKER] = self._marker[1]

    def _record(self) -> None:
        """Leave what this process now runs with where `hwtune verify` can read it: a
        setenv never shows in /proc/PID/environ (hwtune.apply.record)."""
        from hwtune.apply import record

        if os.getpid() != self._pid:
            # A child forked after configure() (a multiprocessing pool worker) inherits the
            # import hook and would record itself when it imports TensorFlow; but such a child
            # leaves through os._exit, past the atexit that removes the record, so each worker
            # left its configure-<pid>.json behind. The record is the configuring process's.
            return
        names = [str(e[0]) for e in self.payload.get("env", [])]
        self._recorded = True
        noted = len(self.notes)
        record.write(
            {
                "env": {name: os.environ.get(name) for name in names},
                "threads": self.payload.get("threads", {}),
                "jit": self.jit,
                "tensorflow": dict(self.tensorflow),
            },
            notes=self.notes,
        )
        if len(self.notes) > noted:  # a runtime directory another user made: said as the cache
            from hwtune.fs.streams import warn

            for note in self.notes[noted:]:
                warn(stderr_line(None, "warning", note))

    def _schedule_tensorflow(self) -> None:
        tf = sys.modules.get("tensorflow")
        if tf is not None and hasattr(tf, "config"):
            self._apply_to_tensorflow(tf)
            return
        self._tf_pending = True
        self.tensorflow["threads/jit"] = "pending: applied when tensorflow is imported"
        _HOOK.watch("tensorflow", self._on_tensorflow)
        if self.precision is None:
            return
        keras = self._loaded_keras()
        if keras is not None:
            self._apply_policy(keras)
            return
        self.tensorflow["precision"] = "pending: applied when keras or tensorflow is imported"
        for name in _KERAS_MODULES:
            _HOOK.watch(name, self._on_keras)

    def _on_tensorflow(self, module: ModuleType) -> None:
        self._tf_pending = False
        self.tensorflow.pop("threads/jit", None)
        self._guarded(lambda: self._apply_threads_and_jit(module))
        keras = self._loaded_keras()  # TF 2.16+ imports Keras 3 during its own import
        if self.precision is not None and not self._policy_applied() and keras is not None:
            _HOOK.forget(self._on_keras)
            self._guarded(lambda: self._apply_policy(keras))
        self._record()
        self._warn_new_problems(stacklevel=5)

    def _on_keras(self, module: ModuleType) -> None:
        if self._tf_pending and "tensorflow" in sys.modules:
            return  # Keras loading inside `import tensorflow`: _on_tensorflow sets the policy
        _HOOK.forget(self._on_keras)
        self._guarded(lambda: self._apply_policy(module))
        self._warn_new_problems(stacklevel=5)

    def _guarded(self, action: Callable[[], None]) -> None:
        # Runs inside the user's `import tensorflow`: an error here must not break the import.
        try:
            action()
        except Exception as err:  # noqa: BLE001 - reported as a problem, never raised into an import
            self.problems.append(
                f"applying the profile to TensorFlow failed: {type(err).__name__}: {err}"
            )

    def _loaded_keras(self) -> ModuleType | None:
        for name in _KERAS_MODULES:
            module = sys.modules.get(name)
            if module is not None and hasattr(module, "mixed_precision"):
                return module
        return None

    def _policy_applied(self) -> bool:
        return self.tensorflow.get("precision", "").startswith("applied")

    def _apply_threads_and_jit(self, tf: Any) -> None:
        self._apply_threads(tf, "intra_op", self.intra_op, INTRA_OP_ENV)
        self._apply_threads(tf, "inter_op", self.inter_op, INTER_OP_ENV)
        self._apply_jit(tf)
        self._apply_gpu_memory(tf)

    def _apply_gpu_memory(self, tf: Any) -> None:
        limit = self.payload.get("gpu_memory_limit_mb")
        if not isinstance(limit, int) or isinstance(limit, bool) or limit <= 0:
            return
        from hwtune.apply import tf_settings

        self._take("gpu_memory", tf_settings.set_gpu_memory(tf, limit))

    def _take(self, setting: str, outcome: Any) -> None:
        """A tf_settings.Outcome into the report: its status, problem and undo."""
        self.tensorflow[setting] = outcome.status
        if outcome.problem:
            self.problems.append(outcome.problem)
        if outcome.undo is not None:
            self._undo.append(outcome.undo)

    def _apply_to_tensorflow(self, tf: Any) -> None:
        self._apply_threads_and_jit(tf)
        if self.precision is not None and not self._policy_applied():
            self._apply_policy(self._loaded_keras() or tf.keras)

    def _apply_threads(self, tf: Any, kind: str, value: int | None, variable: str) -> None:
        setting = f"{kind}_parallelism_threads"
        if value is None:
            return
        if variable in self.env_user:
            self.tensorflow[setting] = (
                f"left to the user's {variable}={self.env_user[variable][0]}"
            )
            return
        from hwtune.apply import tf_settings

        in_env = variable in self.env_already and variable not in _SET_LATE
        self._take(setting, tf_settings.set_threads(tf, setting, value, variable, in_env=in_env))

    def _apply_jit(self, tf: Any) -> None:
        if self.jit is None:
            return
        from hwtune.apply import tf_settings

        outcome = tf_settings.set_jit(tf, self.jit)
        if outcome is None:
            self.problems.append(f"unknown JIT level {self.jit!r} in the profile; JIT left alone")
            return
        self._take("jit", outcome)

    def _apply_policy(self, keras: Any) -> None:
        if self.precision is None:
            return
        from hwtune.apply import tf_settings

        self._take("precision", tf_settings.set_policy(keras, self.precision))

    def apply_tensorflow(self) -> ConfigureReport:
        """Apply threads, JIT and policy now, importing TensorFlow if it is not imported yet."""
        import tensorflow as tf  # the one place hwtune imports TensorFlow itself

        _HOOK.forget(self._on_tensorflow)
        _HOOK.forget(self._on_keras)
        self._tf_pending = False
        self.tensorflow.pop("threads/jit", None)
        self._apply_to_tensorflow(tf)
        self._record()
        self._finish(stacklevel=3)
        return self

    def _warn_new_problems(self, stacklevel: int) -> None:
        for problem in self.problems[self._warned :]:
            warnings.warn(f"hwtune.configure: {problem}", RuntimeWarning, stacklevel=stacklevel)
        self._warned = len(self.problems)

    def _finish(self, stacklevel: int) -> None:
        self._raise_if_strict()
        self._warn_new_problems(stacklevel + 1)

    def _raise_if_strict(self) -> None:
        if self.strict and self.problems:
            raise ConfigError(
                "hwtune.configure (strict): " + "; ".join(self.problems),
                hint="call hwtune.configure() before importing tensorflow",
            )

    def _apply_or_undo(self, tensorflow: bool) -> None:
        """Apply the profile; when that raises (strict=True and a problem), undo it first.

        A program that catches the ConfigError goes on in the environment it had: without the
        undo it ran with part of a profile hwtune itself called unfit, and a `with` block
        never entered cannot restore it.
        """
        try:
            self._apply_environment()
            if tensorflow:
                self._schedule_tensorflow()
            self._raise_if_strict()
        except BaseException:
            self.restore()
            raise

    # -- undoing ----------------------------------------------------------------------------
    def restore(self) -> None:
        """Undo what can be undone: environment, pending hooks, threads/JIT/policy if mutable."""
        _HOOK.forget(self._on_tensorflow)
        _HOOK.forget(self._on_keras)
        for undo in reversed(self._undo):
            undo()
        self._undo.clear()
        for name, previous in self._previous_env.items():
            if os.environ.get(name) != self.env_set.get(name):
                continue  # changed since by someone else: theirs now
            _SET_LATE.discard(name)
            if previous is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = previous
            if previous is not None and self._owned_before.get(name) == previous:
                _OWNED[name] = previous  # an earlier configure()'s value, hwtune's again
            else:
                _OWNED.pop(name, None)
        self._previous_env.clear()
        if self._marker is not None and os.environ.get("HWTUNE_PROFILE") == self._marker[1]:
            if self._marker[0] is None:
                os.environ.pop("HWTUNE_PROFILE", None)
            else:
                os.environ["HWTUNE_PROFILE"] = self._marker[0]
        self._marker = None
        if self._recorded:
            self._record()

    def __enter__(self) -> ConfigureReport:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        value: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.restore()


def configure(
    *,
    mode: str | None = None,
    instances: int | None = None,
    instance: int | None = None,
    precision: str | None = None,
    model: str | None = None,
    workload: str | None = None,
    measured: bool = True,
    strict: bool = False,
    tensorflow: bool = True,
    use_cache: bool = True,
) -> ConfigureReport:
    """Fit this process to the machine; call it before `import tensorflow`.

    Example:
        >>> import hwtune
        >>> report = hwtune.configure()          # doctest: +SKIP
        >>> report.env_set["TF_NUM_INTRAOP_THREADS"]  # doctest: +SKIP
        '2'

    Args:
        mode: "throughput", "latency" or "batch" (default: config files, HWTUNE_MODE, else
            throughput). Under "batch" the plan splits the node into copies that `hwtune exec`
            starts; a process it did not start is planned as copy 0.
        instances, instance: this process's share of the node; by default from
            `hwtune exec` or the launcher's local rank (SLURM_LOCALID, LOCAL_RANK, …).
        precision: "off", "eligible" or "auto" (mixed precision policy).
        model: "dense", "conv" or "unknown": what this program trains (on a CPU it decides
            XLA; pass `report.jit_compile` to Keras's `compile`).
        workload: the `hwtune tune` workload whose measured result applies (default:
            HWTUNE_WORKLOAD or `workload` in config, else none applies).
        measured: False ignores measured results (rules and overrides only).
        strict: raise ConfigError instead of warning when something cannot take effect.
        tensorflow: apply tf.config settings (now, or when TensorFlow is imported).
        use_cache: use the cached profile when the machine is unchanged.

    Inside a `hwtune tune` trial (HWTUNE_TRIAL=1) no profile is applied: the trial's
    environment already holds the settings being measured, and a profile would undo them.
    Only HWTUNE_TRIAL_JIT and HWTUNE_TRIAL_PRECISION are applied (they have no variable
    TensorFlow reads itself), and the report says so.
    """
    switches = {
        "measured": measured,
        "strict": strict,
        "tensorflow": tensorflow,
        "use_cache": use_cache,
    }
    wrong = [f"{k}={v!r}" for k, v in switches.items() if type(v) is not bool]
    if wrong:
        # tensorflow="no" is truthy: it installed the TensorFlow hook it was meant to skip.
        problem = ConfigError(f"configure({wrong[0]}): expected True or False")
        if strict is True:
            raise problem
        warnings.warn(
            f"hwtune.configure: {problem.message}; nothing was changed",
            RuntimeWarning,
            stacklevel=2,
        )
        return ConfigureReport({}, cached=False, cache_path="", strict=False)
    if os.environ.get(TRIAL_ENV) == "1":
        from hwtune.apply.trial_env import trial_payload

        trial = ConfigureReport(
            trial_payload(os.environ), cached=False, cache_path="", strict=strict
        )
        try:
            if tensorflow and (trial.jit is not None or trial.precision is not None):
                trial._schedule_tensorflow()
            trial._raise_if_strict()
        except BaseException:
            trial.restore()
            raise
        trial._finish(stacklevel=3)
        return trial
    explicit = {
        key: value
        for key, value in (
            ("mode", mode),
            ("instances", instances),
            ("instance", instance),
            ("precision", precision),
            ("model", model),
            ("workload", workload),
            ("measured", None if measured else False),
        )
        if value is not None
    }
    try:
        from hwtune.apply.cache import lookup

        payload, cached, path = lookup(explicit, os.environ, use_cache=use_cache, keywords=True)
    except Exception as err:
        if strict:
            raise
        warnings.warn(
            f"hwtune.configure: could not plan a profile ({type(err).__name__}: {err}); "
            "nothing was changed",
            RuntimeWarning,
            stacklevel=2,
        )
        return ConfigureReport({}, cached=False, cache_path="", strict=strict)
    report = ConfigureReport(payload, cached=cached, cache_path=path, strict=strict)
    report._apply_or_undo(tensorflow)  # strict=True raises here, with nothing left changed
    if tensorflow and os.environ.get("HWTUNE_DOCTOR_STEPS"):  # = hwtune.apply.steps.STEPS_ENV
        _watch_steps(os.environ["HWTUNE_DOCTOR_STEPS"])
    report._record()
    report._finish(stacklevel=3)
    return report


def _watch_steps(path: str) -> None:
    """`hwtune doctor` asked for step times: time every Keras `fit` once Keras is imported."""
    from hwtune.apply.steps import install

    def on_keras(module: ModuleType) -> None:
        _HOOK.forget(on_keras)
        with contextlib.suppress(Exception):  # a diagnostic aid must never break the import
            install(module, path)

    keras = sys.modules.get("keras")
    if keras is not None:
        on_keras(keras)
    else:
        _HOOK.watch("keras", on_keras)
