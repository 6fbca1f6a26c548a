"""The planning arguments every command that plans takes (plan, explain, apply, env, exec,
verify), and the `PlanRequest` they make: the same flags mean the same everywhere.

A bad value (`--instances 0`, `--set TF_NUM_INTRAOP_THREADS=abc`, `--tf-version two`) is a
usage error: the subcommand's own usage and exit 2, checked by the same rules as the config.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from hwtune.commands.pathargs import nonempty_path
from hwtune.errors import stderr_line
from hwtune.models.hardware import Hardware
from hwtune.models.profile import MODEL_HELP, MODEL_KINDS, MODES
from hwtune.pipeline.request import PlanRequest

if TYPE_CHECKING:
    from hwtune.cli import Environment


def checked_type(name: str, convert: Callable[[str], Any]) -> Callable[[str], Any]:
    """An argparse type: `convert`, then the config's check of `name` (ConfigError -> usage)."""
    from hwtune.errors import ConfigError
    from hwtune.models.overrides import Overrides
    from hwtune.pipeline.config import check_set_text, parse_count, parse_sets, with_flags

    def check(text: str) -> Any:
        try:
            if name in ("set", "set_bytes"):
                parse_sets([text])
                if name == "set":
                    check_set_text(text)
                return text
            if name in ("instances", "instance"):
                return parse_count(name, text, f"--{name}")
            value = convert(text)
            with_flags(Overrides(), **{name: value})
            return value
        except ConfigError as err:
            hint = f" ({err.hint})" if err.hint else ""
            # argparse says "argument --instances: " itself; the config's message names the
            # flag too ("--instances: 0 is below…"), which would say it twice.
            flag = "--" + name.removesuffix("_bytes").replace("_", "-")
            message = err.message.removeprefix(f"{flag}: ").removeprefix(f"{flag}=")
            raise argparse.ArgumentTypeError(f"{message}{hint}") from None

    check.__name__ = name  # argparse names the type in some messages
    return check


def add_plan_arguments(
    parser: argparse.ArgumentParser, *, measured: bool = True, byte_sets: bool = False
) -> None:
    """--root/--hardware, the intent flags, --set, --workload and --no-measured. A command that
    measures instead (`tune`, measured=False) takes neither of the last two: its own --workload
    names what it measures, and its plans never apply a measurement. `byte_sets`: --set takes
    values that are not UTF-8 (`exec`, which only puts them in its program's environment);
    every other command writes them as text, and refuses them."""
    group = parser.add_argument_group("planning")
    source = group.add_mutually_exclusive_group()
    source.add_argument(
        "--root",
        type=nonempty_path,
        metavar="DIR",
        default="/",
        help="plan for the machine captured under DIR (a `hwtune snapshot`) instead of this one",
    )
    source.add_argument(
        "--hardware",
        type=nonempty_path,
        metavar="FILE",
        help="plan from a hardware model saved by `hwtune detect --json` (- reads stdin)",
    )
    group.add_argument(
        "--mode",
        choices=MODES,
        help="the goal (default throughput); batch: independent batches or requests, run as "
        "several copies (`hwtune exec` starts them)",
    )
    group.add_argument(
        "--instances",
        type=checked_type("instances", int),
        metavar="N",
        help="N processes share this node (default: the launcher's ranks, else 1)",
    )
    group.add_argument(
        "--instance",
        type=checked_type("instance", int),
        metavar="K",
        help="plan for instance K (0-based)",
    )
    group.add_argument(
        "--precision",
        choices=("off", "eligible", "auto"),
        help="mixed precision: report eligibility only (default), enable the best, or off",
    )
    group.add_argument("--model", choices=MODEL_KINDS, help=MODEL_HELP)
    group.add_argument(
        "--tf-version",
        type=checked_type("tf_version", str),
        metavar="X.Y",
        help="plan a source build for this TensorFlow",
    )
    group.add_argument(
        "--set",
        action="append",
        default=[],
        dest="sets",
        type=checked_type("set_bytes" if byte_sets else "set", str),
        metavar="NAME=VALUE",
        help="add or override an environment variable of the profile (repeatable); "
        "TF_NUM_INTRAOP_THREADS/TF_NUM_INTEROP_THREADS set the thread counts",
    )
    if not measured:
        return
    group.add_argument(
        "--workload",
        type=checked_type("workload", str),
        metavar="NAME",
        help="apply what `hwtune tune` measured for this workload (builtin:NAME or a "
        "`tune --name`); default: HWTUNE_WORKLOAD or `workload` in config, else none",
    )
    group.add_argument(
        "--no-measured",
        action="store_true",
        help="ignore what `hwtune tune` measured: rules and overrides only",
    )


def request_from_args(
    args: argparse.Namespace,
    environ: Mapping[str, str],
    *,
    for_exec: bool = False,
    measured: bool = True,
) -> PlanRequest:
    """The PlanRequest of a command line parsed with `add_plan_arguments` (`measured` as
    given to it: False plans from the rules and overrides alone)."""
    return PlanRequest(
        environ=environ,
        root=args.root,
        hardware_file=args.hardware,
        mode=args.mode,
        instances=args.instances,
        instance=args.instance,
        precision=args.precision,
        tf_version=args.tf_version,
        model=args.model,
        sets=tuple(args.sets),
        workload=args.workload if measured else None,
        measured=measured and not args.no_measured,
        for_exec=for_exec,
    )


def issues_warning(
    command: str,
    found: tuple[int, str],
    *,
    root: str = "/",
    hardware_file: str | None = None,
    journal: bool = False,
) -> str:
    """The one warning every planning command prints when the plan used fallbacks, pointing
    at where the issues are listed: the --hardware file's own `issues`, else `hwtune detect`
    for the machine (or the --root tree) it detected."""
    from hwtune.probes.issues import printable

    count, first = found
    if hardware_file is not None:  # the model's own list: `hwtune detect` shows this machine
        model = "the model read from stdin" if hardware_file == "-" else hardware_file
        listed = f"the `issues` list in {model} has them all"
    elif root != "/":
        listed = f"`hwtune detect --root {root}` lists them"
    else:
        listed = "`hwtune detect` lists them"
    saw = f"detection saw {count} issue(s), planned with fallbacks; first: {first} ({listed})"
    return printable(stderr_line(command, "warning", saw, journal=journal))


def warn_issues(
    command: str, hardware: Hardware, args: argparse.Namespace, env: Environment
) -> bool:
    """Print `issues_warning` on `env`'s stderr when detection saw issues; whether it did."""
    from hwtune.pipeline.request import detection_issues

    found = detection_issues(hardware)
    if found is not None:
        warning = issues_warning(
            command, found, root=args.root, hardware_file=args.hardware, journal=env.journal
        )
        print(warning, file=env.stderr)
    return found is not None
