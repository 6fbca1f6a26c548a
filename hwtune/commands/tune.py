"""`hwtune tune`: measure settings on a workload, starting from the plan, and keep the best.

    hwtune tune --workload builtin:cnn --allow-precision
    hwtune tune --workload train -- python train.py --epochs 1  # prints hwtune-metric: …
    hwtune plan --workload train        # a result applies only where its workload is named
    hwtune tune --forget [NAME]         # remove this machine's result for NAME (all: no NAME)
    hwtune tune --forget -- python train.py   # … or for the workload named as when tuning it

It plans as `hwtune plan` does, with the same planning arguments (--root/--hardware, --mode,
--model, --instances, --precision, --tf-version, --set), config files and HWTUNE_* (files <
HWTUNE_* < flags), and the launcher's ranks; never with a measured result, which is what it
measures against. An instance count given anywhere (or by the ranks) is fixed; else searched.

Exit status: 0 when a result was found (and stored, unless --no-store); 1 when the plan's own
configuration fails, the budget ends before any comparison, the result cannot be stored
(checked before measuring; a failure at the end prints the result, then the error), or
--root/--hardware names other hardware than the one the trials would run on (a dry run and
--forget take any); 2 on a bad command line; 130 on Ctrl-C, 143 on SIGTERM and 129 on SIGHUP
(trials are killed, nothing is stored; each prints the trials so far and the fastest one).
"""

from __future__ import annotations

import argparse
import json
import signal
from typing import Any

from hwtune.cli import Environment
from hwtune.commands.numbers import integer, integer_from, positive_seconds, seconds
from hwtune.commands.planning import add_plan_arguments, request_from_args
from hwtune.status import ExitStatus

_BUILTIN_HELP = (
    "builtin:cnn (Keras CNN training), builtin:mlp (MLP training), builtin:matmul, "
    "builtin:pipeline (tf.data), builtin:transformer (encoder block training), "
    "builtin:inference (SavedModel batch inference), builtin:mixed (a CNN and an MLP, "
    "with --instances 2); default builtin:cnn. With -- CMD: the name to store the result "
    "under (as --name)"
)
MIXED = "builtin:mixed"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--workload", metavar="builtin:NAME|NAME", help=_BUILTIN_HELP)
    parser.add_argument(
        "--forget",
        nargs="?",
        const="",
        metavar="NAME",
        help="remove what was measured on this machine for workload NAME (or the one "
        "--workload, --name or -- CMD names), then exit; with none of them, every workload's",
    )
    parser.add_argument(
        "--budget",
        type=positive_seconds,
        default=600.0,
        metavar="SECONDS",
        help="wall-clock time the search may take (default 600)",
    )
    parser.add_argument(
        "--trial-timeout",
        type=positive_seconds,
        metavar="S",
        help="kill a trial after S seconds (default: 600 for the first, then 5× its time); "
        "never after the budget ends",
    )
    parser.add_argument(
        "--allow-precision",
        action="store_true",
        help="also try the eligible mixed-precision policy (changes numerics: bf16/fp16)",
    )
    parser.add_argument(
        "--name",
        help="store the result of -- CMD under this name (a built-in's is stored as builtin:NAME)",
    )
    parser.add_argument(
        "--metric",
        metavar="NAME",
        help="the hwtune-metric to maximise (default: the first one the command prints)",
    )
    parser.add_argument(
        "--time-whole",
        action="store_true",
        help="the command prints no metric: time each run as a whole (runs per second)",
    )
    parser.add_argument(
        "--seconds",
        type=seconds,
        default=3.0,
        metavar="S",
        help="measurement window of a built-in workload per trial (default 3)",
    )
    parser.add_argument(
        "--max-repeats",
        # A race compares arms from their second round on (search.py).
        type=integer_from(2, "a race needs at least 2 rounds to compare arms"),
        default=4,
        metavar="N",
        help="rounds of trials per arm in a race, at least 2 (default 4)",
    )
    parser.add_argument(
        "--seed", type=integer, default=0, metavar="N", help="seed of the trial order (default 0)"
    )
    parser.add_argument("--no-store", action="store_true", help="report only, store nothing")
    parser.add_argument(
        "--dry-run",
        action="store_true",
        help="show the plan's configuration and the space to search; run nothing",
    )
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    parser.add_argument(
        "command",
        nargs=argparse.REMAINDER,
        metavar="-- CMD ARGS",
        help="your workload; it prints `hwtune-metric: NAME=VALUE` (higher is better)",
    )
    add_plan_arguments(parser, measured=False)
    parser.epilog = (
        "Planning as `hwtune plan` does (config files < HWTUNE_* < flags and --set), never with "
        "a measured result. An instance count given there (--instances N, HWTUNE_INSTANCES, "
        "config, the launcher's local ranks) fixes the copies each trial runs; else --mode "
        "batch searches it (independent batches: the copies' throughputs add up) and the "
        "other modes run one."
    )


def run(args: argparse.Namespace, env: Environment) -> int:
    from hwtune.pipeline.request import load_hardware
    from hwtune.tune.progress import Progress
    from hwtune.tune.tuner import ResultNotStored, resolve_request, tune
    from hwtune.tune.workloads import resolve

    command = list(args.command)
    if command and command[0] == "--":
        command = command[1:]
        if not command:  # `-- $CMD` with CMD empty: not the built-in, not every workload
            print(
                "hwtune tune: error: no command after -- (hwtune tune [options] -- CMD ARGS...; "
                "without --, --workload builtin:NAME)",
                file=env.stderr,
            )
            return ExitStatus.USAGE
    planning = request_from_args(args, env.environ, measured=False)
    if args.forget is not None:
        target = _forget_target(args.forget or None, args, command)
        return _forget(target, load_hardware(planning), env)
    workload = resolve(
        args.workload,
        command,
        name=args.name,
        metric=args.metric,
        time_whole=args.time_whole,
        seconds=args.seconds,
    )
    hw = load_hardware(planning)
    request = resolve_request(
        planning,
        hw,
        workload=workload,
        budget_s=args.budget,
        trial_timeout_s=args.trial_timeout,
        allow_precision=args.allow_precision,
        store=not args.no_store,
        seed=args.seed,
        max_repeats=args.max_repeats,
    )
    if request.workload.key == MIXED and (
        request.instances == 1 or (request.instances is None and request.mode != "batch")
    ):
        # Its odd instances train the MLP (tune/builtin/mixed.py): one instance is the CNN alone.
        alone = (
            f"{MIXED} trains the MLP in a second instance only; with one instance it "
            "measures the CNN alone (give --instances 2)"
        )
        env.say("tune", "note", alone)
    if args.dry_run:
        return _dry_run(hw, request, env, as_json=args.json)
    _check_runs_here(hw, planning)
    progress = Progress(env.stderr, bool(getattr(env.stderr, "isatty", lambda: False)()))
    previous = _stop_on_signals()
    try:
        report = tune(
            hw,
            request,
            environ=env.environ,
            on_trial=progress,
            warn=lambda note: env.say("tune", "warning", note),
        )
    except KeyboardInterrupt:  # Ctrl-C: say what was found so far, exit 130 as shells do
        progress.finish()
        print(progress.summary(), file=env.stderr)
        return ExitStatus.INTERRUPTED
    except _Stopped as stopped:  # SIGTERM, SIGHUP: the same summary, exit 128 + N
        progress.finish()
        print(progress.summary(), file=env.stderr)
        return stopped.status
    except ResultNotStored as err:  # the budget is spent: show what it found, then the error
        progress.finish()
        _print_report(err.report, env, as_json=args.json)
        raise
    finally:
        progress.finish()
        for signum, handler in previous.items():
            signal.signal(signum, handler)
    _print_report(report, env, as_json=args.json)
    return ExitStatus.SUCCESS


def _print_report(report: Any, env: Environment, *, as_json: bool) -> None:
    if as_json:
        env.stdout.write(json.dumps(report.as_json(), indent=2) + "\n")
    else:
        from hwtune.tune.report import render_report

        env.stdout.write(render_report(report))


def _check_runs_here(hw: Any, planning: Any) -> None:
    """Trials run on this machine: a plan for another (--root/--hardware) would be measured
    here and stored under the other's fingerprint."""
    if planning.root == "/" and planning.hardware_file is None:
        return
    from hwtune.errors import ConfigError
    from hwtune.planner import fingerprint
    from hwtune.probes import detect

    planned, here = fingerprint(hw), fingerprint(detect())
    if planned != here:
        given = f"--root {planning.root}" if planning.hardware_file is None else "--hardware"
        raise ConfigError(
            f"{given} is other hardware ({planned}) than this machine ({here}), where the "
            "trials would run",
            hint="use it with --dry-run or --forget; tune on the machine itself",
        )


def _forget_target(named: str | None, args: argparse.Namespace, command: list[str]) -> str | None:
    """The workload whose result --forget removes: NAME, else the one --workload, --name or
    `-- CMD` names, under the key the tuner stores it by; None (every workload's) only when
    nothing names one."""
    from hwtune.errors import ConfigError

    given = _named_workload(args, command)
    if named and given and named != given:
        raise ConfigError(
            f"--forget {named!r} and the workload given otherwise ({given!r}) differ",
            hint="name the workload to forget once: --forget NAME, or --workload/--name/-- CMD",
        )
    return named or given


def _named_workload(args: argparse.Namespace, command: list[str]) -> str | None:
    """The key a tuning run with these arguments stores its result under; None when the
    arguments name no workload (a bare `hwtune tune` tunes builtin:cnn, but a bare --forget
    is documented to mean every workload)."""
    from hwtune.errors import ConfigError
    from hwtune.tune.workloads import BUILTIN_PREFIX, resolve

    spec: str | None = args.workload
    name: str | None = args.name
    if command or (spec or "").startswith(BUILTIN_PREFIX):
        return resolve(spec, command, name=name).key
    if spec and name and spec != name:
        raise ConfigError(
            f"--workload {spec!r} and --name {name!r} name two workloads",
            hint="name the workload to forget once",
        )
    return name or spec


def _forget(workload: str | None, hw: Any, env: Environment) -> int:
    from hwtune.pipeline.measured import forget
    from hwtune.planner import fingerprint

    removed = forget(fingerprint(hw), workload, environ=env.environ)
    for path in removed:
        env.stdout.write(f"forgot {path}\n")
    if not removed:
        what = f"workload {workload!r}" if workload else "any workload"
        env.stdout.write(f"nothing measured for {what} on this machine\n")
    return ExitStatus.SUCCESS


class _Stopped(SystemExit):
    """SIGTERM or SIGHUP arrived: a SystemExit(128 + N), so that anything between the handler
    and `run` (the trial's cleanup) unwinds as for an exit, and `run` prints the summary Ctrl-C
    prints before exiting with that status."""

    def __init__(self, signum: int) -> None:
        super().__init__(128 + signum)
        self.status = 128 + signum


def _stop_on_signals() -> dict[int, Any]:
    """SIGTERM and SIGHUP (`kill`, `timeout`, a closed terminal) become `_Stopped` (a
    SystemExit(128 + N)), so the trial's `finally` stops its process groups (they run in their
    own sessions, which these signals never reach) and removes its scratch directory; nothing
    is stored, and `run` says what was found so far, as on Ctrl-C. Returns the handlers to put
    back."""

    def terminated(signum: int, frame: object) -> None:
        raise _Stopped(signum)

    previous: dict[int, Any] = {}
    for signum in (signal.SIGTERM, signal.SIGHUP):
        try:
            previous[signum] = signal.signal(signum, terminated)
        except ValueError:  # not the main thread (an embedding caller): leave signals alone
            break
    return previous


def _dry_run(hw: Any, request: Any, env: Environment, *, as_json: bool) -> int:
    from hwtune.tune.config import to_json
    from hwtune.tune.tuner import prepare

    start, space, fingerprint = prepare(hw, request)
    grid = list(space.grid())
    if as_json:
        data = {
            "fingerprint": fingerprint,
            "workload": request.workload.key,
            "model": request.model,
            "start": to_json(start),
            "neighbors": [to_json(c) for c in space.neighbors(start)],
            "grid": [to_json(c) for c in grid],
        }
        env.stdout.write(json.dumps(data, indent=2) + "\n")
        return ExitStatus.SUCCESS
    lines = [
        f"hwtune tune --dry-run: {request.workload.display}, hardware {fingerprint}",
        f"  start (the plan, --model {request.model}): {start.label()}",
        f"  instances: {', '.join(str(k) for k in space.bases)}",
    ]
    for count in space.bases:
        lines.append(
            f"  ×{count}: intra-op {list(space.intra[count])}, inter-op {list(space.inter[count])}"
        )
    lines += [
        f"  oneDNN {list(space.onednn)}, XLA {list(space.jit)}, precision {list(space.precision)}",
        f"  {len(grid)} configurations in the grid; the search starts with "
        f"{len(space.neighbors(start))} neighbours of the plan",
    ]
    env.stdout.write("\n".join(lines) + "\n")
    return ExitStatus.SUCCESS
