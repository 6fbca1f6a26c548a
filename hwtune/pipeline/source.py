"""The profile behind `apply`, `env`, `exec`, `verify` and `configure()`'s cold path.

detect (under a root) -> user overrides (config files, HWTUNE_*, --set, flags) -> this
process's share of the node (explicit flags, else the launcher's local rank) -> plan. The
planning itself is `hwtune.planner.plan`; this module only decides the intent to ask for.
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hwtune.models.digits import whole_number
from hwtune.models.hardware import Hardware
from hwtune.models.profile import MODEL_HELP, MODEL_KINDS, Intent, Profile
from hwtune.pipeline.ranks import LocalRank, already_pinned, local_rank

INTENT_FLAGS = ("mode", "instances", "instance", "precision", "tf_version", "model")


@dataclass(frozen=True)
class Planned:
    hardware: Hardware
    profile: Profile
    notes: tuple[str, ...] = ()  # how the intent was chosen (rank, pinning), for reports
    rank: LocalRank | None = None


def add_intent_arguments(parser: argparse.ArgumentParser, *, instances: bool = True) -> None:
    """The plan intent flags shared by apply, env, exec and verify."""
    group = parser.add_argument_group("plan")
    group.add_argument("--root", default="/", metavar="DIR", help="machine root (a snapshot)")
    group.add_argument("--mode", choices=("throughput", "latency"), default=None)
    if instances:
        group.add_argument(
            "--instances",
            type=whole_number,
            default=None,
            metavar="N",
            help="processes sharing the node (default: launcher's ranks, else 1)",
        )
        group.add_argument(
            "--instance",
            type=whole_number,
            default=None,
            metavar="I",
            help="which of them this is (0-based)",
        )
    group.add_argument("--precision", choices=("off", "eligible", "auto"), default=None)
    group.add_argument("--model", choices=MODEL_KINDS, default=None, help=MODEL_HELP)
    group.add_argument(
        "--tf-version",
        default=None,
        metavar="X.Y",
        help="the TensorFlow a source build is planned for",
    )
    group.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        dest="sets",
        help="set an environment variable of the profile (repeatable)",
    )


def explicit_intent(args: argparse.Namespace) -> dict[str, Any]:
    """The intent flags that were given (None means not given)."""
    return {k: getattr(args, k) for k in INTENT_FLAGS if getattr(args, k, None) is not None}


def detect_hardware(root: str | Path = "/") -> Hardware:
    from hwtune.probes import detect

    return detect(root)


def resolve_share(
    explicit: Mapping[str, Any], environ: Mapping[str, str], hardware: Hardware
) -> tuple[dict[str, Any], list[str], LocalRank | None]:
    """Add instances/instance from the launcher's local rank unless flags gave them."""
    flags = dict(explicit)
    notes: list[str] = []
    if "instances" in flags or "instance" in flags:
        return flags, notes, None
    rank = local_rank(environ)
    if rank is None:
        return flags, notes, None
    limits = hardware.limits
    allowed = limits.cpuset_cpus if limits.cpuset_cpus is not None else hardware.cpu.online_cpus
    if already_pinned(limits.affinity_cpus, allowed):
        from hwtune.models.cpulist import format_cpulist

        flags.update(instances=1, instance=0)
        notes.append(
            f"{rank.describe()}; the launcher already bound it to CPUs "
            f"{format_cpulist(limits.affinity_cpus)}, so one instance is planned on those"
        )
    else:
        flags.update(instances=rank.size, instance=rank.rank)
        notes.append(f"{rank.describe()}: planning slice {rank.rank} of {rank.size}")
    return flags, notes, rank


def plan_for(
    explicit: Mapping[str, Any],
    environ: Mapping[str, str],
    *,
    root: str | Path = "/",
    sets: Sequence[str] = (),
    hardware: Hardware | None = None,
) -> Planned:
    """Detect (unless `hardware` is given) and plan for the intent, ranks and overrides."""
    from hwtune.pipeline.config import load_overrides, with_flags
    from hwtune.planner import plan

    hw = hardware if hardware is not None else detect_hardware(root)
    flags, notes, rank = resolve_share(explicit, environ, hw)
    overrides = with_flags(load_overrides(environ, sets), **flags)
    intent = Intent(
        mode=overrides.mode or "throughput",
        instances=overrides.instances or 1,
        instance=overrides.instance or 0,
        precision=overrides.precision or "eligible",
        tf_version=overrides.tf_version,
        model=overrides.model or "unknown",
    )
    profile = plan(hw, intent, overrides)
    from hwtune.pipeline.measured import apply_measured

    # Tuner results are keyed by the plan's hardware fingerprint (as `hwtune plan`).
    profile, ignored = apply_measured(
        profile, lambda measured: plan(hw, intent, overrides, measured), environ
    )
    if ignored:
        notes.append(ignored)
    return Planned(hw, profile, tuple(notes), rank)
