"""`hwtune plan`: the TensorFlow profile for this machine, as a table or JSON.

Exit status: 0; 1 on a bad config, an impossible intent (more instances than cores, an unknown
--tf-version) or an unreadable --root/--hardware; 2 on a bad command line or flag value; 3
(`ExitStatus.ISSUES`) with --strict when a probe failed or was partial.

The planning flags are `hwtune.commands.planning`'s, shared by every command that plans, and
the profile comes from `hwtune.pipeline.request.profile_for`, as theirs does.
"""

from __future__ import annotations

import argparse
import shutil

from hwtune.cli import Environment
from hwtune.commands.planning import add_plan_arguments, request_from_args, warn_issues
from hwtune.models.hardware import Hardware
from hwtune.models.profile import Profile
from hwtune.models.words import plural
from hwtune.probes.issues import printable
from hwtune.status import ExitStatus


def add_strict_argument(parser: argparse.ArgumentParser, then: str = "") -> None:
    parser.add_argument(
        "--strict",
        action="store_true",
        help=f"exit {int(ExitStatus.ISSUES)} if a probe failed or was partial"
        + (f" {then}" if then else ""),
    )


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_plan_arguments(parser)
    add_strict_argument(parser)
    parser.add_argument("--json", action="store_true", help="print the profile as JSON")


def planned_for_people(
    command: str, args: argparse.Namespace, env: Environment
) -> tuple[Hardware, Profile]:
    """profile_for, with its notes and what detection missed said on stderr (plan, explain)."""
    from hwtune.pipeline.request import profile_for

    planned = profile_for(request_from_args(args, env.environ))
    for note in planned.notes:
        env.say(command, "note", note)
    warn_issues(command, planned.hardware, args, env)
    return planned.hardware, planned.profile


def table_rows(profile: Profile) -> list[tuple[str, str, str]]:
    """(setting, value, reason) for every decision, then what was left out."""
    rows: list[tuple[str, str, str]] = []

    from hwtune.apply.render import env_entries
    from hwtune.planner.explain import shown_value

    def row(name: str, value: object, reason: str, source: str = "rule") -> None:
        shown = shown_value(name, value)
        rows.append((name, shown, reason if source == "rule" else f"[{source}] {reason}"))

    for entry in env_entries(profile):  # what `hwtune env` prints, thread variables included
        row(entry.name, entry.value, entry.reason, entry.source)
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
    if profile.int8 is not None:
        routes = sorted({f"{r.route} ({r.feature})" for r in profile.int8.routes if r.usable})
        row("int8.eligible", profile.int8.eligible, profile.int8.reason)
        if routes:
            row(
                "int8.routes", "; ".join(routes), "eligible routes; `hwtune explain int8` says how"
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
        row("gpu_memory", g.value, g.reason, g.source)
    from hwtune.planner.instances import cpus_named

    mine = profile.instance
    gpus = f"; GPUs {','.join(map(str, mine.gpus))}" if mine.gpus else ""
    if mine.devices and any(not d.isdigit() for d in mine.devices):
        gpus += f" ({', '.join(mine.devices)})"
    row(
        "instance",
        f"{mine.index} of {profile.intent.instances}",
        f"{cpus_named(mine.cpus, mine.cpus_assumed)}{gpus}; mode {profile.intent.mode}",
    )
    if profile.copies is not None:  # the count batch mode chose
        c = profile.copies
        row("copies", str(c.value), c.reason, c.source)
    if profile.pinning is not None:  # several instances: what `hwtune exec` does with them
        p = profile.pinning
        row("pinning", p.value, p.reason, p.source)
    if profile.bazel is not None:
        why = dict(line.partition(": ")[::2] for line in profile.bazel.reasons)
        row(
            "bazel.tf_version",
            profile.bazel.tf_version,
            why.get(f"tf_version {profile.bazel.tf_version}", ""),
        )
        for option in profile.bazel.options:
            row("bazel", option, why.get(option, ""))
    if profile.measurement is not None:
        m = profile.measurement
        planned = profile.intent.instances
        speed = (
            f"{m.ratio:.2f}× over the rule's choice"
            if m.ratio is not None
            else f"measured for {plural(m.instances, 'instance')}; speed-up not claimed for "
            f"{planned}"
        )
        row(
            "measured",
            m.workload,
            f"`hwtune tune` result taken {m.created}: {speed} ({m.file})",
            "measured",
        )
    for item in profile.left_out:
        row(item.name, "(left out)", item.reason.removeprefix("left out: "))
    return rows


def render_table(profile: Profile, width: int | None = None) -> str:
    # Values and reasons quote the machine (CPU and GPU names, cgroup paths): escaped as
    # detect's summary escapes them, before the widths are measured.
    cells = [(printable(n), printable(v), printable(r)) for n, v, r in table_rows(profile)]
    rows = [("SETTING", "VALUE", "REASON"), *cells]
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
    hardware, profile = planned_for_people("plan", args, env)
    if args.json:
        from hwtune.models.convert import dumps_json

        text = dumps_json(profile, "plan --json", indent=2, ensure_ascii=False)
        env.stdout.write(text + "\n")
    else:
        width = shutil.get_terminal_size().columns if env.stdout_isatty else None
        env.stdout.write(render_table(profile, width))
    for warning in profile.warnings:
        env.say("plan", "warning", warning)
    if args.strict and hardware.issues:
        return ExitStatus.ISSUES
    return ExitStatus.SUCCESS
