"""`hwtune exec [--instances N] [--mode …] -- CMD ARGS…`: run a command with the profile, pinned.

One instance (the default, or this rank's slice under srun/mpirun/torchrun) replaces hwtune
with CMD, pinned to its CPUs and NUMA node, with the profile's environment. `--instances N`
starts N copies on disjoint slices (CPUs, NUMA node, GPUs; pinned, except where no CPU list
was detected or a tune measured unpinned copies faster: then unpinned with capped pools), output
prefixed "[i] ", signals (job control included) forwarded, and exits with the worst child's
status (128+N for a death by signal N), or with --fail-fast the first failing one's.
`--mode batch` without a count starts the copies the plan chose (planner/copies.py).
Variables already set in the environment win over the profile (a note says so on stderr), and
when detection saw issues the plan's fallbacks are warned about there, as `hwtune plan` does.
Inside a copy an outer `hwtune exec` started, a plain `hwtune exec -- CMD` runs CMD as that copy
(its HWTUNE_INSTANCE(S), GPUs and CPU binding stay); --instances/--instance start a new launch.
Exit status: the command's (worst) status; 1 when hwtune itself fails; 2 bad usage.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from typing import BinaryIO, TextIO, cast

from hwtune.cli import Environment
from hwtune.commands.numbers import seconds
from hwtune.commands.planning import add_plan_arguments, request_from_args, warn_issues
from hwtune.errors import HwtuneError
from hwtune.status import ExitStatus


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_plan_arguments(parser, byte_sets=True)
    parser.add_argument(
        "--fail-fast",
        action="store_true",
        help="when one instance fails, terminate the others and exit with its status",
    )
    parser.add_argument(
        "--kill-after",
        type=seconds,
        default=10.0,
        metavar="S",
        help="when instances are terminated (--fail-fast, or one could not start): SIGKILL "
        "what is still running S seconds after SIGTERM (default 10)",
    )
    parser.add_argument(
        "--numa-policy",
        choices=("bind", "preferred", "none"),
        default="bind",
        help="memory policy on the instance's NUMA nodes (default bind)",
    )
    parser.add_argument("--no-pin", action="store_true", help="set the environment only")
    parser.add_argument("--no-prefix", action="store_true", help="do not prefix output with [i]")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- CMD ARGS...")


def run(args: argparse.Namespace, env: Environment) -> int:
    from hwtune.apply.launch import (
        InstanceSpec,
        divides_callers_gpus,
        env_for_instance,
        exec_replace,
        instance_pinning,
        instance_slice,
        merge_environment,
        passable_environment,
    )
    from hwtune.apply.launcher import Launcher
    from hwtune.apply.marker import in_exec_copy
    from hwtune.pipeline.request import load_hardware, profile_for

    command = list(args.command)
    if command and command[0] == "--":
        command = command[1:]
    if not command:
        env.say("exec", "error", "no command given (hwtune exec [options] -- CMD ARGS...)")
        return ExitStatus.USAGE
    request = request_from_args(args, env.environ, for_exec=True)
    hardware = load_hardware(request)
    request = dataclasses.replace(request, hardware=hardware)
    first = profile_for(request)
    warn_issues("exec", hardware, args, env)
    for note in first.notes:
        env.say("exec", "note", note)
    intent = first.profile.intent
    # All N copies when --instances was given without --instance, or when the count is what
    # `hwtune tune` measured or batch mode chose; else only this one's slice.
    every = request.instance is None and (
        request.instances is not None
        or first.measured_instances
        or first.profile.copies is not None
    )
    indices = list(range(intent.instances)) if every else [intent.instance]
    # Several instances are pinned only where their slices are big enough (the planner's rule)
    # or where `hwtune tune` measured that pinning wins: the profile's `pinning`.
    pinning = instance_pinning(first.profile, hardware)
    inherited, dropped = passable_environment(env.environ)
    for note in dropped:
        env.say("exec", "note", note)
    # A plain `hwtune exec -- CMD` in a copy an outer exec started (a wrapper script's) runs
    # CMD as that copy: its index, GPUs and CPU binding are the outer launch's and stay. Its
    # own plan would re-pin by the rule (not as the outer exec's --no-pin or tuned pick
    # left it) and renumber a copy already bound to its slice as instance 0 of 1. A count
    # or index given here is a new launch and wins ("explicit --instances/--instance win").
    as_copy = request.instances is None and request.instance is None and in_exec_copy(env.environ)
    if not args.no_pin and not pinning.pinned and not as_copy:
        env.say("exec", "note", pinning.reason)
    # Several copies share out the GPUs the caller's CUDA_VISIBLE_DEVICES leaves: each one's
    # share replaces the caller's list (which would give every copy all of them).
    force = (
        ("CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER")
        if intent.instances > 1 and divides_callers_gpus(hardware, env.environ)
        else ()
    )
    specs = []
    for index in indices:
        planned = (
            first
            if index == intent.instance
            else profile_for(
                dataclasses.replace(request, instances=intent.instances, instance=index)
            )
        )
        mine = instance_slice(planned.profile, index)
        child_env, notes = merge_environment(
            inherited,
            env_for_instance(planned.profile, index, hardware=hardware),
            keep_launch=as_copy,
            force=force,
        )
        if len(indices) == 1 or index == indices[0]:
            for note in notes:
                env.say("exec", "note", note)
        pin = not args.no_pin and pinning.pinned and not as_copy
        multi_node = len(hardware.numa) > 1
        specs.append(
            InstanceSpec(
                index,
                child_env,
                mine.cpus if pin else (),
                mine.numa_nodes if pin and multi_node else (),
            )
        )
    if len(specs) == 1:
        exec_replace(command, specs[0], args.numa_policy)
        raise HwtuneError("exec returned")  # unreachable: execve replaced this process
    # A stream hwtune was started without (`>&-`: Python makes it None) is a gone one from the
    # start: the instances still run, and their pipes to it are closed as under `| head`.
    stdout = _binary(env.stdout, sys.stdout)
    stderr = _binary(env.stderr, sys.stderr)
    launcher = Launcher(
        command,
        specs,
        stdout=stdout,
        stderr=stderr,
        policy=args.numa_policy,
        fail_fast=args.fail_fast,
        kill_after=args.kill_after,
        prefix=not args.no_prefix,
    )
    return launcher.run()


def _binary(stream: TextIO | None, default: TextIO | None) -> BinaryIO | None:
    """The byte stream under `stream` (flushed), else under `default` (sys.stdout for a
    text-only test stream); None when neither is open."""
    for candidate in (stream, default):
        if candidate is None:
            continue
        candidate.flush()
        binary = getattr(candidate, "buffer", None)
        if binary is not None:
            return cast(BinaryIO, binary)
    return None
