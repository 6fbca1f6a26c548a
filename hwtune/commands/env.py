"""`hwtune env [--format sh|systemd|dotenv|json]`: print the profile's environment.

For job scripts: `eval "$(hwtune env)"`. Under a launcher (srun, mpirun, torchrun) each rank
prints the variables for its own slice of the node (`hwtune.pipeline.ranks`). On this machine,
with no --set and no --root, the profile comes from the configure() cache (`hwtune.apply.cache`),
so the command costs a fingerprint, not a detection.
Exit status: 0; 1 when a value cannot be written in the chosen format (dotenv); 2 bad usage.
"""

from __future__ import annotations

import argparse

from hwtune.cli import Environment
from hwtune.commands.planning import add_plan_arguments, request_from_args
from hwtune.status import ExitStatus


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
        payload, _, _ = lookup(asked, env.environ, use_cache=not args.no_cache)
        entries = [EnvEntry(*map(str, item)) for item in payload["env"]]
        notes = [str(n) for n in payload.get("notes", [])]
    else:
        from hwtune.pipeline.request import profile_for

        planned = profile_for(request)
        entries, notes = env_entries(planned.profile), list(planned.notes)
    text = render_env_entries(entries, args.format, header=[*env_header(args.format), *notes])
    env.stdout.write(text)
    return ExitStatus.SUCCESS
