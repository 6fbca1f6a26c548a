"""`explain(profile, name)`: why a setting has its value, or why hwtune left it out.

Names: environment variables (TF_NUM_INTRAOP_THREADS, KMP_AFFINITY…, any case), dotted
profile fields (threads.intra_op, jit.level, precision, int8, data_format, tf_data.prefetch,
distribution.strategy, instance, bazel.tf_version, bazel.options), groups (threads, tf_data,
distribution, bazel) and bazel options themselves
(--copt=-march=znver4). An unknown name is a PlanError with a did-you-mean hint.
"""

from __future__ import annotations

import dataclasses
import difflib

from hwtune.errors import PlanError
from hwtune.models.profile import Profile, Setting
from hwtune.planner.instances import cpus_named


def _setting(name: str, setting: Setting) -> str:
    shown = shown_value(name, setting.value)
    return f"{name} = {shown}\n  source: {setting.source}\n  why: {setting.reason}"


def shown_value(name: str, value: object) -> str:
    """A setting's value as `hwtune plan`'s table and `hwtune explain` both print it: the two
    views of one profile must not disagree on how a value reads."""
    if name == "pinning":  # what `hwtune exec` does with several instances
        return "pinned" if value else "unpinned"
    if name == "gpu_memory":  # a cap per GPU, or none
        return "whole device" if value is None else f"{value} MiB"
    if value is None:
        return "(unset)"
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _entries(profile: Profile) -> dict[str, str]:
    entries: dict[str, str] = {}
    for item in profile.left_out:
        reason = item.reason if item.reason.startswith("left out") else f"left out: {item.reason}"
        entries[item.name] = f"{item.name}: {reason}"
    for name, setting in profile.env.items():
        entries[name] = _setting(name, setting)
    entries["threads.intra_op"] = _setting("threads.intra_op", profile.threads.intra_op)
    entries["threads.inter_op"] = _setting("threads.inter_op", profile.threads.inter_op)
    entries["threads"] = entries["threads.intra_op"] + "\n" + entries["threads.inter_op"]
    # The variables rendering derives from the counts (hwtune/apply/render.py thread_entries).
    derived = {"TF_NUM_INTRAOP_THREADS": "intra_op", "TF_NUM_INTEROP_THREADS": "inter_op"}
    if profile.threads.openmp:
        derived["OMP_NUM_THREADS"] = "intra_op"
    for name, key in derived.items():
        if name not in profile.env:
            entries[name] = _setting(name, getattr(profile.threads, key))
    entries["jit.level"] = _setting("jit.level", profile.jit.level)
    precision = profile.precision
    entries["precision"] = (
        f"precision: eligible {', '.join(precision.eligible) or 'none'}; "
        f"enabled {precision.enabled or 'none'}\n  source: {precision.source}\n"
        f"  why: {precision.reason}"
    )
    if profile.int8 is not None:
        entries["int8"] = _int8_entry(profile)
    entries["data_format"] = _setting("data_format", profile.data_format)
    for f in dataclasses.fields(profile.tf_data):
        entries[f"tf_data.{f.name}"] = _setting(
            f"tf_data.{f.name}", getattr(profile.tf_data, f.name)
        )
    entries["tf_data"] = "\n".join(
        entries[f"tf_data.{f.name}"] for f in dataclasses.fields(profile.tf_data)
    )
    if profile.distribution is not None:
        dist = profile.distribution
        for key in ("strategy", "cross_device_ops", "variable_placement"):
            entries[f"distribution.{key}"] = _setting(f"distribution.{key}", getattr(dist, key))
        entries["distribution"] = "\n".join(
            entries[f"distribution.{key}"]
            for key in ("strategy", "cross_device_ops", "variable_placement")
        )
    if profile.allow_soft_placement is not None:
        entries["allow_soft_placement"] = _setting(
            "allow_soft_placement", profile.allow_soft_placement
        )
    if profile.gpu_memory is not None:
        entries["gpu_memory"] = _setting("gpu_memory", profile.gpu_memory)
    if profile.warnings:
        entries["warnings"] = "warnings:\n" + "\n".join(f"  {w}" for w in profile.warnings)
    mine = profile.instance
    entries["instance"] = (
        f"instance {mine.index} of {profile.intent.instances}: "
        + cpus_named(mine.cpus, mine.cpus_assumed)
        + (f", NUMA {','.join(map(str, mine.numa_nodes))}" if mine.numa_nodes else "")
        + (f", GPUs {','.join(map(str, mine.gpus))}" if mine.gpus else "")
        + (f" (devices {', '.join(mine.devices)})" if mine.devices else "")
        + f"\n  mode {profile.intent.mode}; slices never share a physical core"
    )
    if profile.copies is not None:  # batch mode chose the count
        entries["copies"] = _setting("copies", profile.copies)
        entries["instance"] += "\n" + entries["copies"]
    if profile.pinning is not None:  # several instances: does `hwtune exec` pin them?
        entries["pinning"] = _setting("pinning", profile.pinning)
        entries["instance"] += "\n" + entries["pinning"]
    if profile.bazel is not None:
        _bazel_entries(profile, entries)
    return entries


def _int8_entry(profile: Profile) -> str:
    assert profile.int8 is not None
    int8 = profile.int8
    lines = [
        f"int8: {'eligible' if int8.eligible else 'not eligible'} (reported, never enabled)",
        f"  why: {int8.reason}",
    ]
    for route in int8.routes:
        lines += [
            f"  {route.device}: {route.feature} -> {route.route}"
            f" ({'usable' if route.usable else 'not usable as planned'})",
            f"    note: {route.note}",
            f"    how: {route.how}",
            f"    source: {route.source}",
        ]
    return "\n".join(lines)


def _bazel_entries(profile: Profile, entries: dict[str, str]) -> None:
    assert profile.bazel is not None
    bazel = profile.bazel
    why: dict[str, str] = {}
    for line in bazel.reasons:
        key, _, reason = line.partition(": ")
        why.setdefault(key, reason)
    entries["bazel.tf_version"] = (
        f"bazel.tf_version = {bazel.tf_version}\n"
        f"  why: {why.get(f'tf_version {bazel.tf_version}', '')}"
    )
    for option in bazel.options:
        entries[option] = f"{option}\n  why: {why.get(option, '')}"
    entries["bazel.options"] = (
        "\n".join(entries[option] for option in bazel.options) or "no options"
    )
    entries["bazel"] = "bazel:\n" + "\n".join(f"  {line}" for line in bazel.reasons)
    for line in bazel.reasons:
        if line.startswith("--config=") and "left out" in line:
            name = line.partition(":")[0]
            entries.setdefault(name, line)


def setting_names(profile: Profile) -> list[str]:
    """Every name `explain` answers for, in the profile's order."""
    return list(_entries(profile))


def explain(profile: Profile, name: str) -> str:
    entries = _entries(profile)
    wanted = name.strip()
    if wanted in entries:
        return entries[wanted]
    folded = {key.casefold(): key for key in entries}
    if wanted.casefold() in folded:
        return entries[folded[wanted.casefold()]]
    aliases = {
        "jit": "jit.level",
        "intra_op": "threads.intra_op",
        "inter_op": "threads.inter_op",
        "precision.enabled": "precision",
        "precision.eligible": "precision",
    }
    if wanted in aliases:
        return entries[aliases[wanted]]
    close = difflib.get_close_matches(
        wanted, list(entries), n=1, cutoff=0.6
    ) or difflib.get_close_matches(wanted.upper(), list(entries), n=1, cutoff=0.6)
    hint = f"did you mean {close[0]}?" if close else "`hwtune plan` lists the settings"
    raise PlanError(
        f"no setting named {wanted!r} in this profile", hint=_ABSENT.get(wanted.casefold(), hint)
    )


# Names a user meets elsewhere that only some profiles have, or that are not settings.
_ABSENT = {
    "pinning": "pinning is a setting of several instances and this plan has one: "
    "`hwtune explain pinning --instances N`",
    "distribution": "distribution is planned only with GPUs, and this plan has none",
    "hwtune_profile": "HWTUNE_PROFILE is not a setting: it is the marker that tells the values "
    "hwtune wrote from the user's (docs/apply.md, hwtune/apply/marker.py)",
}
_ABSENT.update(
    {
        f"distribution.{key}": _ABSENT["distribution"]
        for key in ("strategy", "cross_device_ops", "variable_placement")
    }
)
