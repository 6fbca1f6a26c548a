"""int8 inference eligibility: which int8 instructions this slice's devices have, and the route a
TensorFlow user takes to each.

Like mixed precision, eligibility is a hardware fact and is only reported: running int8 means
quantizing the model (a converter and calibration data), which is the user's change to make.
The features and routes are data (knowledge/data/int8.json, int8_routes.json), each with its
source; this module only matches them against the hardware, the installed TensorFlow and the
plan's own oneDNN setting.
"""

from __future__ import annotations

from hwtune.models.hardware import Gpu, Hardware
from hwtune.models.profile import Int8, Int8Route, Setting
from hwtune.models.words import plural
from hwtune.planner.knobs import onednn_on
from hwtune.planner.knowledge import Int8Feature, Knowledge, TfVersionEntry, version_tuple
from hwtune.planner.knowledge import Int8Route as RouteEntry

# Without a dot-product instruction an x86 int8 multiply-accumulate takes three (VPMADDUBSW,
# VPMADDWD, VPADDD) where VNNI's VPDPBUSD takes one (Intel, "Introduction to Intel Deep Learning
# Boost on Second Generation Intel Xeon Scalable Processors", 2019): int8 kernels still run, but
# the speed-up over float32 that makes quantizing worth it mostly goes.
NO_FEATURE_REASON = (
    "no int8 instruction that TensorFlow's int8 routes use (AVX512-VNNI, AVX-VNNI, AMX-INT8, "
    "Arm I8MM or dot product) on this CPU{gpu}: {tail}"
)
# What the routes do without one. On aarch64 XNNPACK and oneDNN/ACL fall back to NEON
# multiply-accumulate sequences (SVE's SDOT/UDOT, as on A64FX, is not what they use); POWER's
# int8 instructions (vmsumubm, POWER10 MMA xvi8ger4) are used by no TensorFlow int8 route.
X86_NOTE = " (three x86 instructions per VNNI one)"
FALLBACK_TAIL = (
    "int8 kernels fall back to multi-instruction sequences{x86}, so quantizing gains little"
)
OTHER_ARCH_TAIL = (
    "hwtune knows no TensorFlow int8 route for {arch} CPUs, so quantizing is not planned as a "
    "speed-up"
)


def plan_int8(
    hw: Hardware,
    gpus: tuple[Gpu, ...],
    onednn: Setting,
    knowledge: Knowledge,
    planned: TfVersionEntry | None = None,
) -> Int8:
    """The int8 routes of this slice's CPU and GPUs, and whether any exists.

    `gpus` are the slice's GPUs that TensorFlow can use (a CPU-only build uses none), so a GPU
    route is only offered where TensorFlow could take it. `planned` is the TensorFlow version
    the plan is for (asked, installed, or the newest known when none is installed); a route
    that version no longer carries is not usable.
    """
    routes_by_key = {route.key: route for route in knowledge.int8_routes}
    found: list[Int8Route] = []
    for feature in knowledge.int8_features:
        if feature.device != "cpu" or feature.arch != hw.cpu.arch:
            continue
        if not any(flag in hw.cpu.flags for flag in feature.flags_any):
            continue
        for key in feature.routes:
            route = routes_by_key.get(key)
            if route is not None:
                found.append(_cpu_route(hw, feature, route, onednn, planned))
    gpu_features = [f for f in knowledge.int8_features if f.device == "gpu" and f.min_cc]
    for feature, members in _best_gpu_features(gpus, gpu_features):
        for key in feature.routes:
            route = routes_by_key.get(key)
            if route is not None:
                found.append(_gpu_route(hw, members, feature, route, planned))
    unknown = [str(g.index) for g in gpus if not version_tuple(g.compute_capability or "")]
    unknown_note = (
        f"; compute capability unknown for GPU {','.join(unknown)}: its int8 support cannot be "
        "vouched for"
        if unknown
        else ""
    )
    if not found:
        gpu = (
            " and no GPU with DP4A (compute capability ≥ 6.1)" if len(unknown) < len(gpus) else ""
        )
        if hw.cpu.arch in ("x86_64", "aarch64", "unknown"):
            x86 = X86_NOTE if hw.cpu.arch == "x86_64" else ""
            tail = FALLBACK_TAIL.format(x86=x86)
        else:
            tail = OTHER_ARCH_TAIL.format(arch=hw.cpu.arch)
        reason = NO_FEATURE_REASON.format(gpu=gpu, tail=tail) + unknown_note
        return Int8(eligible=False, routes=(), reason=reason)
    features = sorted({route.feature for route in found})
    usable = [route for route in found if route.usable]
    reason = f"int8 instructions: {', '.join(features)}{unknown_note}; " + (
        f"{len(usable)} of {plural(len(found), 'route')} usable as planned (eligible, not "
        "enabled: quantizing is a model change — see each route's `how`)"
        if usable
        else "no route usable as planned (see each route's note)"
    )
    return Int8(eligible=True, routes=tuple(found), reason=reason)


def _cpu_route(
    hw: Hardware,
    feature: Int8Feature,
    route: RouteEntry,
    onednn: Setting,
    planned: TfVersionEntry | None,
) -> Int8Route:
    shown = [flag for flag in feature.flags_any if flag in hw.cpu.flags]
    note = f"CPU shows {', '.join(shown)}"
    usable = True
    if route.needs_onednn and not onednn_on(onednn):
        usable = False
        note += (
            f"; this plan sets TF_ENABLE_ONEDNN_OPTS={onednn.value} ({onednn.reason}): "
            "set it to 1 for int8 inference jobs"
        )
    tf_note, tf_ok = _tf_window(hw, route, planned)
    return Int8Route(
        device="cpu",
        feature=feature.name,
        route=route.name,
        how=route.how,
        usable=usable and tf_ok,
        note=note + tf_note,
        source=f"{feature.source}; {route.source}",
    )


def _gpu_route(
    hw: Hardware,
    members: tuple[Gpu, ...],
    feature: Int8Feature,
    route: RouteEntry,
    planned: TfVersionEntry | None,
) -> Int8Route:
    ccs = sorted({g.compute_capability or "" for g in members}, key=version_tuple)
    note = f"compute capability {', '.join(ccs)} ≥ {feature.min_cc}"
    tf_note, tf_ok = _tf_window(hw, route, planned)
    return Int8Route(
        device="gpu " + ",".join(str(g.index) for g in members),
        feature=feature.name,
        route=route.name,
        how=route.how,
        usable=tf_ok,
        note=note + tf_note,
        source=f"{feature.source}; {route.source}",
    )


def _tf_window(
    hw: Hardware, route: RouteEntry, planned: TfVersionEntry | None
) -> tuple[str, bool]:
    """A note on the TensorFlow the plan is for against the route's last version, and whether
    it fits: the planned version (asked, installed, or the newest known), else the installed
    one (a version the knowledge lacks)."""
    if not route.tf_max:
        return "", True
    tf = hw.tensorflow
    if planned is not None:
        version = planned.key
        installed = tf is not None and version_tuple(tf.version)[:2] == version_tuple(version)[:2]
        who = f"TensorFlow {tf.version}" if installed and tf else f"TensorFlow {version}"
        if tf is None:
            who += " (none installed: the version planned for)"
    elif tf is not None:
        version, who = tf.version, f"TensorFlow {tf.version}"
    else:
        return f"; needs TensorFlow ≤ {route.tf_max} (no TensorFlow found)", True
    if version_tuple(version)[:2] > version_tuple(route.tf_max)[:2]:
        return f"; {who} no longer carries it (last: {route.tf_max})", False
    return "", True


def _best_gpu_features(
    gpus: tuple[Gpu, ...], features: list[Int8Feature]
) -> list[tuple[Int8Feature, tuple[Gpu, ...]]]:
    """Each GPU under its strongest feature (the highest min_cc it meets), grouped by feature."""
    ranked = sorted(features, key=lambda f: version_tuple(f.min_cc or ""), reverse=True)
    groups: dict[str, list[Gpu]] = {}
    for gpu in gpus:
        cc = version_tuple(gpu.compute_capability or "")
        if not cc:
            continue
        for feature in ranked:
            if cc >= version_tuple(feature.min_cc or ""):
                groups.setdefault(feature.key, []).append(gpu)
                break
    by_key = {f.key: f for f in features}
    return [(by_key[key], tuple(members)) for key, members in groups.items()]
