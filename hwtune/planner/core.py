"""`plan()`: hardware (+ intent, overrides, measurements) -> Profile. Pure: no I/O, no
os.environ, no TensorFlow. Each setting is decided in three layers, later winning: the rule
(source "rule"), a tuner measurement (source "measured", keyed like "threads.intra_op" or
"env.KMP_BLOCKTIME"), and the user's override (config, HWTUNE_*, flags; source "user").
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Mapping, Sequence
from typing import Any

from hwtune.errors import PlanError
from hwtune.models.hardware import Hardware
from hwtune.models.overrides import BATCH_ORIGIN, Overrides, describe_origin
from hwtune.models.profile import (
    MODEL_KINDS,
    MODES,
    Intent,
    Jit,
    LeftOut,
    Precision,
    Profile,
    Setting,
    TfData,
    Threads,
)
from hwtune.models.words import plural
from hwtune.planner import (
    accel,
    cuda_compat,
    data,
    gpu_memory,
    gpu_units,
    knobs,
    multigpu,
    threads,
)
from hwtune.planner.bazel import plan_bazel, resolve_tf_version
from hwtune.planner.copies import batch_copies
from hwtune.planner.instances import Slice, cpus_assumed, pinning, split
from hwtune.planner.int8 import plan_int8
from hwtune.planner.knowledge import (
    Knowledge,
    TfVersionEntry,
    default_knowledge,
    version_tuple,
)

INTENT_FIELDS = ("mode", "instances", "instance", "precision", "tf_version", "model")
# measured keys that name the same decision
_ALIASES = {
    "env.TF_NUM_INTRAOP_THREADS": "threads.intra_op",
    "env.TF_NUM_INTEROP_THREADS": "threads.inter_op",
    "jit": "jit.level",
    "precision": "precision.enabled",
}


def user_reason(origin: str | None) -> str:
    return f"set by the user ({origin})" if origin else "set by the user"


class _Layers:
    """Rule -> measured -> user, for one plan."""

    def __init__(self, overrides: Overrides, measured: Mapping[str, Setting]) -> None:
        self.overrides = overrides
        self.measured = {_ALIASES.get(key, key): value for key, value in measured.items()}
        self.user_env = dict(overrides.env)

    def pick(self, key: str, rule: Setting, user: Any, origin_key: str) -> Setting:
        result = rule
        found = self.measured.get(key)
        if found is not None:
            result = Setting(found.value, found.reason, "measured")
        if user is not None:
            result = Setting(user, user_reason(self.overrides.origin(origin_key)), "user")
        return result

    def pick_threads(
        self, key: str, env_name: str, rule: Setting, typed: int | None, cap: int
    ) -> Setting:
        origin_key = key.split(".")[1]
        user: int | None = typed
        if user is None and _as_int(self.user_env.get(env_name)) is not None:
            user = _as_int(self.user_env.pop(env_name))
            origin_key = f"env.{env_name}"
        elif typed is not None:
            self.user_env.pop(env_name, None)  # the typed override wins over a raw variable
        found = self.measured.get(key)
        if found is not None and _as_int(found.value) is not None:
            value = _as_int(found.value) or 1
            reason = found.reason
            if value > cap:
                capped = plural(cap, "effective CPU")
                value, reason = cap, f"{reason} (capped at this slice's {capped})"
            self.measured[key] = Setting(value, reason, "measured")
        return self.pick(key, rule, user, origin_key)

    def pick_env(self, name: str, rule: Setting) -> Setting:
        user = self.user_env.pop(name, None)
        return self.pick(f"env.{name}", rule, user, f"env.{name}")


def _as_int(value: object) -> int | None:
    if isinstance(value, bool):
        return None
    try:
        number = int(str(value).strip())
    except ValueError:
        return None
    return number if number >= 1 else None


def _count_given(base: Intent, overrides: Overrides, measured: Mapping[str, Setting]) -> bool:
    """Whether the instance count comes from somewhere (the user, a launcher, plan()'s intent
    or a measurement) rather than the default, which `--mode batch` replaces."""
    if overrides.instances is not None or base.instances != Intent().instances:
        return True
    return "instances" in measured and _as_int(measured["instances"].value) is not None


def resolve_intent(
    base: Intent,
    overrides: Overrides,
    measured: Mapping[str, Setting],
    defer_index: bool = False,
) -> Intent:
    """The intent with the overrides and measured count applied, checked. `defer_index`: the
    count may still change (batch mode), so plan() checks the instance index after it."""
    changes: dict[str, Any] = {
        name: getattr(overrides, name)
        for name in INTENT_FIELDS
        if getattr(overrides, name) is not None
    }
    count_from = overrides.origin("instances") if "instances" in changes else None
    if count_from is None and base.instances == Intent().instances:
        count_from = "the default"
    if "instances" not in changes and "instances" in measured:
        count = _as_int(measured["instances"].value)
        if count is not None:
            changes["instances"] = count
            count_from = "a measurement"
    intent = dataclasses.replace(base, **changes)
    if intent.mode not in MODES:
        raise PlanError(f"mode {intent.mode!r} is not throughput, latency or batch")
    if intent.precision not in ("off", "eligible", "auto"):
        raise PlanError(f"precision {intent.precision!r} is not off, eligible or auto")
    if intent.model not in MODEL_KINDS:
        raise PlanError(f"model {intent.model!r} is not unknown, dense or conv")
    if intent.instances < 1:
        raise PlanError(f"instances must be at least 1, not {intent.instances}")
    if not defer_index and not 0 <= intent.instance < intent.instances:
        index_from = overrides.origin("instance") if "instance" in changes else None
        raise _no_such_instance(intent, index_from, count_from)
    return intent


def _no_such_instance(intent: Intent, index_from: str | None, count_from: str | None) -> PlanError:
    """The error for an instance index beyond the count, naming where each came from (None:
    the intent given to plan() itself). The index may be a config file's, or the
    HWTUNE_INSTANCE a parent `hwtune exec` exported, not a flag the user typed."""
    if index_from is not None and not index_from.startswith(("--", "HWTUNE_", "configure(")):
        hint = f"'instance' in {index_from} takes 0 ≤ K < the instance count, or give --instance"
    elif index_from == "HWTUNE_INSTANCE":
        hint = "HWTUNE_INSTANCE=K takes 0 ≤ K < the instance count; unset it or give --instance"
    else:
        hint = "--instance K takes 0 ≤ K < --instances N"
    count = intent.instances
    return PlanError(
        f"instance {intent.instance} does not exist: instances are numbered 0 to {count - 1} "
        f"(instance {intent.instance} from {describe_origin(index_from, 'instance')}, {count} "
        f"instance{'s' if count != 1 else ''} from {describe_origin(count_from, 'instances')})",
        hint=hint,
    )


def fingerprint(hw: Hardware) -> str:
    """A short hash of the hardware facts a plan depends on (not free memory or probe issues).

    The repr of the frozen models is deterministic (fields in order; tuples, strings, numbers),
    and ten times cheaper than dumping to JSON on a 96-CPU, 8-GPU machine.
    """
    facts: tuple[object, ...] = (
        hw.cpu,
        hw.numa,
        hw.limits,
        hw.memory.total_bytes,
        hw.gpus,
        hw.tensorflow,
    )
    seen = hw.gpu_visibility
    if seen is not None:  # a limit, as hw.limits is; unset keeps the hashes of before
        facts += ((seen.value, seen.device_order, seen.devices, seen.gpus, seen.mig_devices),)
    return hashlib.sha256(repr(facts).encode()).hexdigest()[:16]


def plan(
    hardware: Hardware,
    intent: Intent | None = None,
    overrides: Overrides | None = None,
    measured: Mapping[str, Setting] | None = None,
    knowledge: Knowledge | None = None,
    **intent_fields: Any,
) -> Profile:
    """Plan TensorFlow settings for `hardware`; every setting carries its value, reason, source.

    Example:
        >>> profile = plan(hw, mode="latency", instances=2, instance=1)
        >>> profile.threads.intra_op.value

    Raises PlanError for an impossible intent (more instances than physical cores, an unknown
    --tf-version). `knowledge` defaults to the shipped tables, loaded once.
    """
    unknown = set(intent_fields) - set(INTENT_FIELDS)
    if unknown:
        raise TypeError(f"plan() got unknown intent fields: {', '.join(sorted(unknown))}")
    knowledge = default_knowledge() if knowledge is None else knowledge
    overrides = overrides or Overrides()
    measured = measured or {}
    base = dataclasses.replace(intent or Intent(), **intent_fields)
    count_given = _count_given(base, overrides, measured) or "instances" in intent_fields
    resolved = resolve_intent(base, overrides, measured, defer_index=not count_given)
    layers = _Layers(overrides, measured)
    hw = hardware

    tf_asked_by = overrides.origin("tf_version") if overrides.tf_version is not None else None
    planned_tf, _ = resolve_tf_version(hw, resolved, knowledge, tf_asked_by)
    visible, gpu_limit = gpu_units.visible(hw)  # how CUDA_VISIBLE_DEVICES narrowed the GPUs
    tf_gpus, no_gpu_reason = accel.gpus_tensorflow_can_use(
        hw, planned_tf or _newer_than_known(hw, knowledge), knowledge, (visible, gpu_limit)
    )
    count_from = overrides.origin("instances") if overrides.instances is not None else None
    copies = None
    if resolved.mode == "batch" and not count_given:
        # No count from the user, a launcher or a measurement: batch mode picks it.
        copies = batch_copies(hw, resolved.model, tf_gpus)
        count_from = BATCH_ORIGIN
        resolved = dataclasses.replace(resolved, instances=int(copies.value or 1))
    if not count_given and not resolved.instance < resolved.instances:  # deferred to here
        index_from = overrides.origin("instance") if overrides.instance is not None else None
        raise _no_such_instance(resolved, index_from, count_from or "the default")
    slices = split(hw, resolved.instances, tf_gpus, count_from)
    mine = slices[resolved.instance]
    on_gpu = bool(mine.gpus)

    rule_intra = threads.intra_op(hw, resolved, mine)
    intra = layers.pick_threads(
        "threads.intra_op",
        "TF_NUM_INTRAOP_THREADS",
        rule_intra,
        overrides.intra_op,
        mine.budget,
    )
    inter = layers.pick_threads(
        "threads.inter_op",
        "TF_NUM_INTEROP_THREADS",
        threads.inter_op(
            hw, resolved, mine, int(intra.value or 1), ceiling=int(rule_intra.value or 1)
        ),
        overrides.inter_op,
        mine.budget,
    )
    eligible, why_eligible = accel.eligible_precisions(hw, mine.gpus)
    bf16_on_cpu = not on_gpu and "mixed_bfloat16" in eligible
    onednn = layers.pick_env(
        "TF_ENABLE_ONEDNN_OPTS",
        knobs.onednn(
            hw, int(intra.value or 1), bf16_on_cpu, bf16_enabled=resolved.precision == "auto"
        ),
    )
    # The thread counts live in `threads` only; rendering derives their variables.
    env: dict[str, Setting] = {"TF_ENABLE_ONEDNN_OPTS": onednn}
    left_out: list[LeftOut] = []
    pinning = _pinning(hw, slices, layers)
    openmp, omitted, openmp_build = knobs.openmp_env(
        hw, resolved, unpinned_instances=pinning is not None and not pinning.value
    )
    env.update(openmp)
    left_out.extend(omitted)

    precision = _precision(resolved, eligible, why_eligible, on_gpu, onednn, layers)
    jit_rule = accel.jit_rule(
        on_gpu,
        resolved.model,
        precision=precision.enabled,
        intra=int(intra.value or 0),
        onednn=knobs.onednn_on(onednn),
        avx512="avx512f" in hw.cpu.flags,
    )
    jit = layers.pick("jit.level", jit_rule, overrides.jit, "jit")
    flags = accel.xla_flags(str(jit.value), on_gpu)
    if flags:
        env["TF_XLA_FLAGS"] = Setting(flags, jit.reason, jit.source)
    else:
        left_out.append(LeftOut("TF_XLA_FLAGS", f"left out: XLA stays off — {jit.reason}"))
    data_format = layers.pick(
        "data_format",
        accel.data_format_rule(on_gpu, precision.enabled, onednn=knobs.onednn_on(onednn)),
        overrides.data_format,
        "data_format",
    )
    gpu_env, omitted = multigpu.gpu_env(
        resolved, mine, no_gpu_reason, hw.gpu_visibility, gpu_limit
    )
    env.update(gpu_env)
    left_out.extend(omitted)
    cuda, _ = cuda_compat.tf_cuda(hw, planned_tf)
    memory_env, omitted, gpu_mem = gpu_memory.plan_memory(hw, mine, cuda, no_gpu_reason)
    env.update({name: layers.pick_env(name, rule) for name, rule in memory_env.items()})
    left_out.extend(omitted)

    # Measured variables the rules above did not decide (KMP_BLOCKTIME…), then the user's [env].
    # A measurement never brings back a variable the rules left out (KMP_* on an Eigen build):
    # only the user can.
    omitted_names = {item.name for item in left_out}
    for key, found in layers.measured.items():
        name = key[4:] if key.startswith("env.") else None
        if name and name != "TF_ENABLE_ONEDNN_OPTS" and name not in omitted_names:
            env[name] = Setting(str(found.value), found.reason, "measured")
    for name, value in layers.user_env.items():
        env[name] = Setting(value, user_reason(overrides.origin(f"env.{name}")), "user")
    left_out = [item for item in left_out if item.name not in env]

    plan_fingerprint = fingerprint(hw)
    bazel, omitted = plan_bazel(hw, resolved, hw.gpus, knowledge, plan_fingerprint, tf_asked_by)
    left_out.extend(omitted)
    return Profile(
        intent=resolved,
        env=env,
        threads=Threads(intra_op=intra, inter_op=inter, openmp=openmp_build),
        jit=Jit(level=jit),
        precision=precision,
        data_format=data_format,
        tf_data=_tf_data(data.tf_data(hw, resolved, mine), layers),
        instance=mine.to_model(),
        instances=tuple(s.to_model() for s in slices),
        pinning=pinning,
        distribution=multigpu.distribution(mine, gpu_limit),
        bazel=bazel,
        allow_soft_placement=Setting(
            True,
            "ops without a GPU kernel fall back to the CPU instead of failing (TensorFlow 2's "
            "default, kept explicit for ConfigProto users)",
        )
        if on_gpu
        else None,
        gpu_memory=gpu_mem,
        int8=plan_int8(hw, mine.gpus, onednn, knowledge, planned_tf),
        left_out=tuple(left_out),
        fingerprint=plan_fingerprint,
        copies=copies,
        warnings=(
            *cuda_compat.compat_warnings(hw, visible, tf_gpus, planned_tf, knowledge),
            *accel.idle_mig_warnings(visible, tf_gpus),
        ),
    )


def _newer_than_known(hw: Hardware, knowledge: Knowledge) -> TfVersionEntry | None:
    """For an installed TensorFlow newer than the knowledge: the newest entry known, whose
    minimum compute capability still holds (TensorFlow has only ever raised it)."""
    newest = knowledge.newest_tf
    if (
        hw.tensorflow is None
        or version_tuple(hw.tensorflow.version)[:2] <= version_tuple(newest.key)[:2]
    ):
        return None
    # named so that a reason built from it reads true ("TensorFlow 2.22 (as 2.21) needs ...")
    return dataclasses.replace(newest, key=f"{hw.tensorflow.version} (as {newest.key})")


def _precision(
    intent: Intent,
    eligible: tuple[str, ...],
    why_eligible: str,
    on_gpu: bool,
    onednn: Setting,
    layers: _Layers,
) -> Precision:
    enabled, why = accel.enabled_precision(intent, eligible, on_gpu, knobs.onednn_on(onednn))
    found = layers.measured.get("precision.enabled")
    if found is not None and intent.precision != "off":
        value = None if found.value in (None, "", "float32") else str(found.value)
        return Precision(eligible, value, f"{why_eligible}; {found.reason}", "measured")
    return Precision(eligible, enabled, f"{why_eligible}; {why}", "rule")


def _pinning(hw: Hardware, slices: Sequence[Slice], layers: _Layers) -> Setting | None:
    """Several instances: pinned to their slices or not, as `hwtune tune` measured for this
    count, else by the rule (planner/instances.py `pinning`)."""
    if len(slices) < 2:
        return None
    found = layers.measured.get("instances.pinned")
    if found is not None and not cpus_assumed(hw):  # assumed CPU numbers: nothing to pin to
        side = "pinned to their slices" if found.value else "left unpinned"
        return Setting(
            bool(found.value),
            f"the {len(slices)} instances are {side}, as `hwtune tune` measured pinned against "
            f"unpinned copies ({found.reason})",
            "measured",
        )
    rule = pinning(hw, [s.cpus for s in slices])
    return Setting(rule.pinned, rule.reason, "rule")


def _tf_data(rule: TfData, layers: _Layers) -> TfData:
    changes = {
        f.name: Setting(found.value, found.reason, "measured")
        for f in dataclasses.fields(TfData)
        if (found := layers.measured.get(f"tf_data.{f.name}")) is not None
    }
    return dataclasses.replace(rule, **changes) if changes else rule
