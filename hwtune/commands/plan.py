"""`hwtune plan`: the TensorFlow profile for this machine, as a table or JSON.

Exit status: 0; 1 on a bad config, an impossible intent (more instances than cores, an unknown
--tf-version) or an unreadable --root/--hardware; 2 on a bad command line; 3
(`ExitStatus.ISSUES`) with --strict when a probe failed or was partial.

Other commands that plan (apply, env, exec, explain…) reuse `add_plan_arguments` and
`plan_from_args`, so `--mode`, `--instances`, `--set` and the config files mean the same
everywhere.
"""

from __future__ import annotations

import argparse
import json
import shutil
from pathlib import Path

from hwtune.cli import Environment
from hwtune.errors import HwtuneError
from hwtune.models.digits import whole_number
from hwtune.models.hardware import Hardware
from hwtune.models.profile import MODEL_HELP, MODEL_KINDS, Profile
from hwtune.status import ExitStatus


def add_plan_arguments(parser: argparse.ArgumentParser) -> None:
    """--root/--hardware, the intent flags, --set and --strict."""
    source = parser.add_mutually_exclusive_group()
    source.add_argument(
        "--root",
        metavar="DIR",
        default="/",
        help="plan for the machine captured under DIR (a `hwtune snapshot`) instead of this one",
    )
    source.add_argument(
        "--hardware",
        metavar="FILE",
        help="plan from a hardware model saved by `hwtune detect --json`",
    )
    parser.add_argument(
        "--mode", choices=("throughput", "latency"), help="the goal (default throughput)"
    )
    parser.add_argument(
        "--instances", type=whole_number, metavar="N", help="N processes share this node"
    )
    parser.add_argument(
        "--instance", type=whole_number, metavar="K", help="plan for instance K (0-based)"
    )
    parser.add_argument(
        "--precision",
        choices=("off", "eligible", "auto"),
        help="mixed precision: report eligibility only (default), enable the best, or off",
    )
    parser.add_argument("--model", choices=MODEL_KINDS, help=MODEL_HELP)
    parser.add_argument(
        "--tf-version", metavar="X.Y", help="plan a source build for this TensorFlow"
    )
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="add or override an environment variable of the profile (repeatable)",
    )
    parser.add_argument(
        "--no-measured",
        action="store_true",
        help="ignore what `hwtune tune` measured on this machine: rules and overrides only",
    )
    parser.add_argument(
        "--strict",
        action="store_true",
        help=f"exit {int(ExitStatus.ISSUES)} if a probe failed or was partial",
    )


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_plan_arguments(parser)
    parser.add_argument("--json", action="store_true", help="print the profile as JSON")


def load_hardware(args: argparse.Namespace) -> Hardware:
    if getattr(args, "hardware", None):
        from hwtune.errors import ModelError
        from hwtune.models.convert import load

        path = Path(args.hardware)
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError) as err:
            raise HwtuneError(f"--hardware {path}: cannot read: {err}") from err
        except json.JSONDecodeError as err:
            raise HwtuneError(
                f"--hardware {path}: line {err.lineno}: invalid JSON: {err.msg}"
            ) from err
        try:
            return load(Hardware, data, where=str(path))
        except ModelError as err:
            raise HwtuneError(err.message, hint=err.hint) from err
    root = Path(args.root)
    if not root.is_dir():
        raise HwtuneError(
            f"--root {args.root}: not a directory", hint="give / or a `hwtune snapshot` directory"
        )
    from hwtune.probes import detect

    return detect(root)


def plan_from_args(args: argparse.Namespace, env: Environment) -> tuple[Hardware, Profile]:
    """Hardware from --root/--hardware, overrides from config + HWTUNE_* + flags, then plan()."""
    from hwtune.pipeline.config import load_overrides, with_flags
    from hwtune.planner import plan

    overrides = load_overrides(env.environ, args.set)
    overrides = with_flags(
        overrides,
        mode=args.mode,
        instances=args.instances,
        instance=args.instance,
        precision=args.precision,
        tf_version=args.tf_version,
        model=args.model,
    )
    hardware = load_hardware(args)
    profile = plan(hardware, overrides=overrides)
    if getattr(args, "no_measured", False):
        return hardware, profile
    from hwtune.pipeline.measured import apply_measured

    # Tuner results are keyed by the plan's hardware fingerprint, so plan once without them.
    profile, ignored = apply_measured(
        profile,
        lambda measured: plan(hardware, overrides=overrides, measured=measured),
        env.environ,
    )
    if ignored:
        print(f"hwtune: warning: {ignored}", file=env.stderr)
    return hardware, profile


def table_rows(profile: Profile) -> list[tuple[str, str, str]]:
    """(setting, value, reason) for every decision, then what was left out."""
    rows: list[tuple[str, str, str]] = []

    def row(name: str, value: object, reason: str, source: str = "rule") -> None:
        shown = (
            "(unset)"
            if value is None
            else str(value).lower()
            if isinstance(value, bool)
            else str(value)
        )
        rows.append((name, shown, reason if source == "rule" else f"[{source}] {reason}"))

    for name, setting in profile.env.items():
        row(name, setting.value, setting.reason, setting.source)
    for key in ("intra_op", "inter_op"):
        setting = getattr(profile.threads, key)
        row(f"threads.{key}", setting.value, setting.reason, setting.source)
    row("jit.level", profile.jit.level.value, profile.jit.level.reason, profile.jit.level.source)
    precision = profile.precision
    why_eligible, _, why_enabled = precision.reason.partition("; ")
    row("precision.eligible", ",".join(precision.eligible) or "none", why_eligible)
    row(
        "precision.enabled",
        precision.enabled or "none",
        why_enabled or why_eligible,
        precision.source,
    )
    row(
        "data_format",
        profile.data_format.value,
        profile.data_format.reason,
        profile.data_format.source,
    )
    for key in (
        "private_threadpool_size",
        "autotune_cpu_budget",
        "autotune_ram_budget",
        "parallel_calls",
        "interleave_cycle_length",
        "prefetch",
    ):
        setting = getattr(profile.tf_data, key)
        row(f"tf_data.{key}", setting.value, setting.reason, setting.source)
    if profile.distribution is not None:
        for key in ("strategy", "cross_device_ops", "variable_placement"):
            setting = getattr(profile.distribution, key)
            row(f"distribution.{key}", setting.value, setting.reason, setting.source)
    if profile.allow_soft_placement is not None:
        s = profile.allow_soft_placement
        row("allow_soft_placement", s.value, s.reason, s.source)
    if profile.gpu_memory is not None:
        g = profile.gpu_memory
        row(
            "gpu_memory",
            "whole device" if g.value is None else f"{g.value} MiB",
            g.reason,
            g.source,
        )
    from hwtune.models.cpulist import format_cpulist

    mine = profile.instance
    gpus = f"; GPUs {','.join(map(str, mine.gpus))}" if mine.gpus else ""
    if mine.devices and any(not d.isdigit() for d in mine.devices):
        gpus += f" ({', '.join(mine.devices)})"
    row(
        "instance",
        f"{mine.index} of {profile.intent.instances}",
        f"CPUs {format_cpulist(mine.cpus)}{gpus}; mode {profile.intent.mode}",
    )
    if profile.bazel is not None:
        why = dict(line.partition(": ")[::2] for line in profile.bazel.reasons)
        row(
            "bazel.tf_version",
            profile.bazel.tf_version,
            why.get(f"tf_version {profile.bazel.tf_version}", ""),
        )
        for option in profile.bazel.options:
            row("bazel", option, why.get(option, ""))
    for item in profile.left_out:
        row(item.name, "(left out)", item.reason.removeprefix("left out: "))
    return rows


def render_table(profile: Profile, width: int | None = None) -> str:
    rows = [("SETTING", "VALUE", "REASON"), *table_rows(profile)]
    name_w = max(len(r[0]) for r in rows)
    value_w = min(max(len(r[1]) for r in rows), 40)
    lines = []
    for name, value, reason in rows:
        line = f"{name:<{name_w}}  {value:<{value_w}}  {reason}"
        if width and len(line) > width:
            line = line[: max(width - 1, name_w + value_w + 8)] + "…"
        lines.append(line.rstrip())
    return "\n".join(lines) + "\n"


def run(args: argparse.Namespace, env: Environment) -> int:
    hardware, profile = plan_from_args(args, env)
    if args.json:
        from hwtune.models.convert import dump

        env.stdout.write(json.dumps(dump(profile), indent=2, ensure_ascii=False) + "\n")
    else:
        width = shutil.get_terminal_size().columns if env.stdout_isatty else None
        env.stdout.write(render_table(profile, width))
    for warning in profile.warnings:
        print(f"hwtune: warning: {warning}", file=env.stderr)
    if args.strict and hardware.issues:
        return ExitStatus.ISSUES
    return ExitStatus.SUCCESS
