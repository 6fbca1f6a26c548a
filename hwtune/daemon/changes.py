"""What changed, in one line: the hardware facts that moved and the settings that followed.

    cpu quota 2.0→1.0: threads.intra_op 2→1, tf_data.private_threadpool_size 2→1

Pure functions of two `Hardware`s and two `Profile`s; the daemon logs the line and sends it as
`STATUS=`. Only values are compared: a reason that was reworded is not a change.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

from hwtune.models.cpulist import format_cpulist
from hwtune.models.hardware import Hardware, ProbeIssue
from hwtune.models.profile import Profile, Setting

ARROW = "→"
UNSET = "unset"
# Profile fields that are not settings: the hardware fingerprint moves with every change, the
# rendered bazelrc repeats `bazel.options`, reasons and sources are explanations.
_SKIP = frozenset({"fingerprint", "reason", "reasons", "source", "bazelrc", "schema_version"})


def _quota(value: float | None) -> str:
    if value is None:
        return "none"
    text = f"{value:.2f}".rstrip("0")
    return text + "0" if text.endswith(".") else text


def _cpus(value: Sequence[int] | None) -> str:
    return "none" if value is None else (format_cpulist(value) or "none")


def _bytes(value: int | None) -> str:
    if value is None:
        return "none"
    return f"{value / (1 << 30):.1f}GiB"


def _gpus(hw: Hardware) -> str:
    if not hw.gpus:
        return "0"
    names = sorted({g.name for g in hw.gpus})
    return f"{len(hw.gpus)} ({', '.join(names)})"


def _mig(hw: Hardware) -> str:
    return ",".join(f"{g.index}:{len(g.mig_devices)}" for g in hw.gpus if g.mig_enabled) or "off"


def _tensorflow(hw: Hardware) -> str:
    tf = hw.tensorflow
    return "none" if tf is None else f"{tf.distribution} {tf.version}"


def _numa(hw: Hardware) -> str:
    return "; ".join(f"{n.id}:{format_cpulist(n.cpus)}" for n in hw.numa) or "none"


# (label, how to show it) in the order a log line lists them.
HARDWARE_FACTS: tuple[tuple[str, Callable[[Hardware], str]], ...] = (
    ("online cpus", lambda hw: _cpus(hw.cpu.online_cpus)),
    ("cpu quota", lambda hw: _quota(hw.limits.cpu_quota)),
    ("cpuset", lambda hw: _cpus(hw.limits.cpuset_cpus)),
    ("affinity", lambda hw: _cpus(hw.limits.affinity_cpus)),
    ("memory limit", lambda hw: _bytes(hw.limits.memory_limit_bytes)),
    ("numa", _numa),
    ("gpus", _gpus),
    ("mig", _mig),
    ("tensorflow", _tensorflow),
)


def hardware_changes(old: Hardware, new: Hardware) -> list[str]:
    """`label old→new` for each fact that differs; effective CPUs only when nothing that
    explains them (online, quota, cpuset, affinity) is listed already."""
    moved = []
    for label, show in HARDWARE_FACTS:
        before, after = show(old), show(new)
        if before != after:
            moved.append(f"{label} {before}{ARROW}{after}")
    if not moved and old.limits.effective_cpus != new.limits.effective_cpus:
        moved.append(
            f"effective cpus {old.limits.effective_cpus}{ARROW}{new.limits.effective_cpus}"
        )
    return moved


def _scalar(value: Any) -> str:
    if value is None:
        return "none"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, tuple) and all(isinstance(v, int) for v in value):
        return format_cpulist(value) or "none"
    if isinstance(value, tuple):
        return ",".join(_scalar(v) for v in value) or "none"
    return str(value)


def _flatten(value: Any, prefix: str, out: dict[str, Any]) -> None:
    if isinstance(value, Setting):
        out[prefix] = value.value
    elif dataclasses.is_dataclass(value) and not isinstance(value, type):
        for f in dataclasses.fields(value):
            if f.name not in _SKIP:
                _flatten(getattr(value, f.name), f"{prefix}.{f.name}" if prefix else f.name, out)
    elif isinstance(value, dict):
        for key in sorted(value):
            _flatten(value[key], f"{prefix}.{key}", out)
    elif isinstance(value, tuple) and value and dataclasses.is_dataclass(value[0]):
        for i, item in enumerate(value):
            name = getattr(item, "name", None)
            _flatten(item, f"{prefix}.{name}" if isinstance(name, str) else f"{prefix}[{i}]", out)
    else:
        out[prefix] = value


def flatten_profile(profile: Profile) -> dict[str, str]:
    """Every setting of the profile as `dotted.name -> value text`."""
    out: dict[str, Any] = {}
    _flatten(profile, "", out)
    return {name: _scalar(value) for name, value in out.items()}


def _change(name: str, before: Any, after: Any) -> str | None:
    """`name old→new`; lists of options as `name added X; removed Y`; None when equal."""
    strings = (
        isinstance(before, tuple)
        and isinstance(after, tuple)
        and all(isinstance(v, str) for v in (*before, *after))
    )
    if strings and before and after:
        added = [v for v in after if v not in before]
        removed = [v for v in before if v not in after]
        parts = ([f"added {' '.join(added)}"] if added else []) + (
            [f"removed {' '.join(removed)}"] if removed else []
        )
        if parts:
            return f"{name} {'; '.join(parts)}"
    a = UNSET if before is _MISSING else _scalar(before)
    b = UNSET if after is _MISSING else _scalar(after)
    return None if a == b else f"{name} {a}{ARROW}{b}"


_MISSING = object()


def profile_changes(old: Profile | None, new: Profile) -> list[str]:
    """One entry per setting whose value differs, threads first, env after."""
    before: dict[str, Any] = {}
    after: dict[str, Any] = {}
    if old is not None:
        _flatten(old, "", before)
    _flatten(new, "", after)
    moved = []
    for name in sorted(before.keys() | after.keys(), key=_order):
        text = _change(name, before.get(name, _MISSING), after.get(name, _MISSING))
        if text:
            moved.append(text)
    return moved


def _order(name: str) -> tuple[int, str]:
    # Threads and env first: they are what most users look for in the journal.
    for rank, head in enumerate(("threads.", "env.", "instance.", "jit.", "precision.")):
        if name.startswith(head):
            return rank, name
    return 9, name


def summary(trigger: Sequence[str], hw_moved: Sequence[str], settings: Sequence[str]) -> str:
    """The one log line for a change (at most 20 settings listed, then a count)."""
    what = ", ".join(hw_moved) if hw_moved else f"{', '.join(trigger) or 'input'} changed"
    if not settings:
        return f"{what}: profile unchanged"
    shown = list(settings[:20])
    if len(settings) > 20:
        shown.append(f"and {len(settings) - 20} more")
    return f"{what}: {', '.join(shown)}"


# ---------------------------------------------------------------- new probe issues


def issue_key(issue: ProbeIssue) -> tuple[str, str, str | None]:
    """What makes an issue the same one in two detections (its line may move)."""
    return issue.probe, issue.reason, issue.path


def is_failure(issue: ProbeIssue) -> bool:
    """A probe that crashed (detect() records those as "probe failed unexpectedly") or read a
    malformed file (an issue with a line number): its facts are fallbacks, not the machine.
    Other issues describe the machine as it is (a CPU offline, no NUMA information) and are
    applied like any other change."""
    return issue.line is not None or issue.reason.startswith("probe failed unexpectedly")


def describe_issue(issue: ProbeIssue) -> str:
    where = f" ({issue.path}{f':{issue.line}' if issue.line else ''})" if issue.path else ""
    return f"probe {issue.probe}: {issue.reason}{where}"
