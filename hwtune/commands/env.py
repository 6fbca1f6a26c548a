"""`hwtune env [--format sh|systemd|dotenv|json]`: print the profile's environment.

For job scripts: `eval "$(hwtune env)"`. Under a launcher (srun, mpirun, torchrun) each rank
prints the variables for its own slice of the node (`hwtune.pipeline.ranks`). On this machine,
with no --set and no --root, the profile comes from the configure() cache (`hwtune.apply.cache`),
so the command costs a fingerprint, not a detection.

In the sh format, which is evaluated into the caller's shell, a variable the user set to another
value is kept (left out, with a note) and one an earlier `eval "$(hwtune env)"` set that this
plan no longer sets is unset (`hwtune.apply.marker`), as `hwtune exec` and `configure()` do;
inside a copy `hwtune exec` started, the variables exec set for that copy (its index, its GPUs)
are never unset (`hwtune.apply.marker.stale`) and the new HWTUNE_PROFILE still names them
(`hwtune.apply.marker.launch_kept`). The other formats are files for other processes
(a unit, a container): they hold the plan alone.
When detection saw issues and the plan used fallbacks, the one warning `hwtune plan` prints
goes to stderr (never stdout, which the shell evaluates).
Exit status: 0; 1 when a value cannot be written in the chosen format (dotenv); 2 bad usage.
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping
from typing import TYPE_CHECKING

from hwtune.cli import Environment
from hwtune.commands.planning import (
    add_plan_arguments,
    issues_warning,
    request_from_args,
    warn_issues,
)
from hwtune.status import ExitStatus

if TYPE_CHECKING:
    from hwtune.apply.render import EnvEntry


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--format",
        choices=("sh", "systemd", "dotenv", "json"),
        default="sh",
        help="sh: export lines for eval/source (default); systemd: EnvironmentFile=; "
        "dotenv: docker --env-file; json: an object",
    )
    parser.add_argument("--no-cache", action="store_true", help="detect and plan afresh")
    add_plan_arguments(parser)


def run(args: argparse.Namespace, env: Environment) -> int:
    from hwtune.apply.render import EnvEntry, env_entries, env_header, render_env_entries

    request = request_from_args(args, env.environ)
    if request.root == "/" and not request.sets and request.hardware_file is None:
        from hwtune.apply.cache import lookup

        asked = {**request.flags(), "workload": request.workload}
        asked["measured"] = None if request.measured else False
        payload, _, _ = lookup(asked, env.environ, use_cache=not args.no_cache, command="env")
        entries = [EnvEntry(*map(str, item)) for item in payload["env"]]
        notes = [str(n) for n in payload.get("notes", [])]
        found = payload.get("detection_issues")
        if isinstance(found, list) and len(found) == 2:
            # stderr: stdout is what `eval "$(hwtune env)"` runs
            found_at = (int(found[0]), str(found[1]))
            print(issues_warning("env", found_at, journal=env.journal), file=env.stderr)
    else:
        from hwtune.pipeline.request import profile_for

        planned = profile_for(request)
        entries, notes = env_entries(planned.profile), list(planned.notes)
        warn_issues("env", planned.hardware, args, env)
    unset: list[str] = []
    marked: dict[str, str] = {}
    if args.format == "sh":
        from hwtune.apply.marker import launch_kept

        # Computed from the plan before the user's values are left out: a launch variable the
        # plan sets is the plan's (replaced), not one exec left in place.
        marked = launch_kept(env.environ, [e.name for e in entries])
        entries, kept, unset = _respect_the_shell(entries, env.environ)
        notes += kept
    text = render_env_entries(
        entries,
        args.format,
        header=[*env_header(args.format, written=False), *notes],
        unset=unset,
        marked=marked,
    )
    env.stdout.write(text)
    return ExitStatus.SUCCESS


def _respect_the_shell(
    entries: list[EnvEntry], environ: Mapping[str, str]
) -> tuple[list[EnvEntry], list[str], list[str]]:
    """The entries to export into this shell, notes on the user's values kept, and the names
    to unset: what hwtune exported earlier that this plan no longer sets, less what `hwtune
    exec` set for the instance this shell runs in (`hwtune.apply.marker.stale`)."""
    from hwtune.apply.marker import (
        INSTANCE_VARIABLES,
        fatal_values,
        replace_own,
        replaced_note,
        stale,
    )

    planned = {e.name: e.value for e in entries}
    always = [name for name in INSTANCE_VARIABLES if name in planned]
    fatal = fatal_values(environ, planned)
    _, kept = replace_own(environ, planned, always=[*always, *fatal])
    notes = [
        f"keeping {name}={user!r} from the environment (profile: {value!r})"
        for name, (user, value) in kept.items()
    ]
    notes += [replaced_note(n, environ[n], planned[n], why) for n, why in fatal.items()]
    unset = sorted(stale(environ, planned))
    return [e for e in entries if e.name not in kept], notes, unset
