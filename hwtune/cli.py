"""The `hwtune` command: a thin argparse layer over the library.

`main(argv) -> int` owns all top-level error handling: a `HwtuneError` becomes one line on
stderr (plus its hint) and `ExitStatus.ERROR`; `--debug` re-raises with the traceback. Each
subcommand lives in `hwtune/commands/<name>.py`; only the selected one is imported, which keeps
`hwtune detect --json` inside its start-up budget.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import os
import signal
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Protocol, TextIO

from hwtune.errors import CommandNotStarted, HwtuneError, Kind, hint_line, stderr_line
from hwtune.fs.streams import OutputError, guard_stderr, guard_stdout
from hwtune.status import ExitStatus

# name -> (module, one-line help). The order is the order of `hwtune --help`.
COMMANDS: dict[str, tuple[str, str]] = {
    "detect": ("hwtune.commands.detect", "probe CPU, limits, NUMA, GPUs and TensorFlow"),
    "snapshot": ("hwtune.commands.snapshot", "save what detect reads into a directory"),
    "schema": ("hwtune.commands.schema", "print the JSON Schema of the hardware or profile"),
    "plan": ("hwtune.commands.plan", "plan a TensorFlow profile for this machine"),
    "explain": ("hwtune.commands.explain", "say why a setting has its value or was left out"),
    "apply": ("hwtune.commands.apply", "write env files, ConfigProto and bazelrc"),
    "env": ("hwtune.commands.env", "print the profile's environment"),
    "exec": ("hwtune.commands.exec", "run a command with the profile, pinned"),
    "verify": ("hwtune.commands.verify", "check a running TensorFlow got the profile"),
    "revert": ("hwtune.commands.revert", "restore the files the last apply replaced"),
    "daemon": ("hwtune.commands.daemon", "keep the applied profile current (systemd)"),
    "nfd": ("hwtune.commands.nfd", "write a Node Feature Discovery feature file"),
    "tune": ("hwtune.commands.tune", "measure settings on a workload and keep the best"),
    "doctor": ("hwtune.commands.doctor", "say what slows a running TensorFlow job"),
}


@dataclass
class Environment:
    """The process's streams and variables, injectable for tests (as httpie's Environment)."""

    stdout: TextIO = field(default_factory=lambda: sys.stdout)
    stderr: TextIO = field(default_factory=lambda: sys.stderr)
    environ: Mapping[str, str] = field(default_factory=lambda: os.environ)
    # stderr is the journal stream (systemd.exec(5) $JOURNAL_STREAM): lines get "<N>"; set
    # by `_main`
    journal: bool = False

    @property
    def stdout_isatty(self) -> bool:
        return bool(getattr(self.stdout, "isatty", lambda: False)())

    def say(self, command: str | None, kind: Kind, text: str, hint: str | None = None) -> None:
        """Print a `stderr_line` (and a hint after it at its priority) to this stderr."""
        print(stderr_line(command, kind, text, journal=self.journal), file=self.stderr)
        if hint:
            print(hint_line(hint, kind, journal=self.journal), file=self.stderr)


class CommandModule(Protocol):
    def add_arguments(self, parser: argparse.ArgumentParser) -> None: ...

    def run(self, args: argparse.Namespace, env: Environment) -> int: ...


def _load(name: str) -> CommandModule:
    module: CommandModule = importlib.import_module(COMMANDS[name][0])
    return module


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The parser. Only the `only` subcommand's module is imported and given its arguments;
    the others are listed for `--help` without importing anything."""
    from hwtune import __version__

    parser = argparse.ArgumentParser(
        prog="hwtune",
        description="Fit TensorFlow to this machine: detect, plan, apply, verify, tune.",
    )
    parser.add_argument("--version", action="version", version=f"hwtune {__version__}")
    parser.add_argument("--debug", action="store_true", help="show tracebacks on errors")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, (_, help_text) in COMMANDS.items():
        if name != only:
            sub.add_parser(name, help=help_text, add_help=False)
            continue
        command_parser = sub.add_parser(name, help=help_text, description=help_text)
        _load(name).add_arguments(command_parser)
        # The subcommand's parser, so that an unknown flag shows its usage, not hwtune's.
        command_parser.set_defaults(_command=name, _parser=command_parser)
    return parser


def _selected_command(argv: Sequence[str]) -> str | None:
    for arg in argv:
        if arg in COMMANDS:
            return arg
        if not arg.startswith("-"):
            return None
    return None


def main(argv: Sequence[str] | None = None, env: Environment | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    env = env or Environment()
    # A closed stderr must not send errors to stdout, nor a failing stdout end in a traceback
    # (hwtune/fs/streams.py).
    env = replace(env, stdout=guard_stdout(env.stdout), stderr=guard_stderr(env.stderr))
    if _selected_command(argv) != "daemon":
        return _main(argv, env)
    # Before the imports of the next 0.1-0.3 s: a signal sent then waits for the daemon's
    # handlers instead of killing it (hwtune.daemon.early).
    from hwtune.daemon.early import hold_early_signals

    previous = hold_early_signals()
    try:
        return _main(argv, env)
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)


def _main(argv: list[str], env: Environment) -> int:
    if env.environ.get("JOURNAL_STREAM"):  # under systemd: the daemon's own check decides
        from hwtune.daemon.logstream import is_journal_stream

        env = replace(env, journal=is_journal_stream(env.environ["JOURNAL_STREAM"], env.stderr))
    try:
        # Importing the subcommand (TensorFlow-free, but pydantic and friends) takes tens of
        # milliseconds: Ctrl-C then is an interrupted start, not a traceback.
        parser = build_parser(only=_selected_command(argv))
        # argparse writes usage and errors to sys.std*: send them to this Environment's.
        with contextlib.redirect_stdout(env.stdout), contextlib.redirect_stderr(env.stderr):
            args, extra = parser.parse_known_args(argv)
            command = getattr(args, "_command", None)
            # A command may take what argparse left over (explain: a bazel option, which
            # looks like a flag) and may name its own usage error.
            finish = getattr(_load(command), "finish_args", None) if command else None
            problem = finish(args, extra) if finish is not None else None
            if problem is None and extra and finish is None:
                problem = f"unrecognized arguments: {' '.join(extra)}"
            if problem:
                owner = getattr(args, "_parser", None) or parser
                owner.error(problem)
    except SystemExit as exit_:  # argparse exits 2 on bad usage, 0 on --help
        return int(exit_.code or 0)
    except OutputError as err:  # --help to a stdout that fails
        env.say(None, "error", err.message)
        return ExitStatus.ERROR
    except KeyboardInterrupt:
        if "--debug" in argv:
            raise
        return ExitStatus.INTERRUPTED
    if getattr(args, "_command", None) is None:
        try:
            parser.print_help(env.stdout)
        except OutputError as err:
            env.say(None, "error", err.message)
        return ExitStatus.USAGE
    try:
        status = int(_load(args._command).run(args, env))
        env.stdout.flush()  # a full disk fails here for output the stream still buffered
        return status
    except HwtuneError as err:
        if args.debug:
            raise
        env.say(args._command, "error", err.message, err.hint)
        if isinstance(err, CommandNotStarted):
            return ExitStatus.NOT_FOUND if err.not_found else ExitStatus.CANNOT_EXECUTE
        return ExitStatus.ERROR
    except KeyboardInterrupt as interrupt:
        if args.debug:
            raise
        if str(interrupt):  # what an interrupted step left on disk (hwtune.apply.outputs)
            print(f"hwtune {args._command}: {interrupt}", file=env.stderr)
        return ExitStatus.INTERRUPTED
    except BrokenPipeError:  # `hwtune detect | head`: not an error worth a traceback
        return ExitStatus.SUCCESS
    except OSError as err:
        # A path the system refuses wherever it is first touched (a name past NAME_MAX or
        # PATH_MAX in --root, --output…: pathlib's exists() and is_dir() raise
        # ENAMETOOLONG) is the user's input, so it gets a message, not a traceback.
        if args.debug or err.filename is None:
            raise
        env.say(args._command, "error", f"{_shown(err.filename)}: {err.strerror or err}")
        return ExitStatus.ERROR


def _shown(filename: object, limit: int = 200) -> str:
    """A path for an error line: a name of thousands of characters is cut, not printed."""
    text = os.fsdecode(filename) if isinstance(filename, (str, bytes)) else str(filename)
    return text if len(text) <= limit else f"{text[:limit]}… ({len(text)} characters)"


def main_entry() -> None:
    """Console-script entry point: `hwtune ...`."""
    sys.exit(main())
