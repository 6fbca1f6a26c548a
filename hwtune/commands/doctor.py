"""`hwtune doctor [--seconds S] [--json] (-- CMD ARGS… | --pid PID)`: what slows the job.

With `-- CMD` it starts the job (its output goes to stderr, so stdout holds only the report),
waits for TensorFlow's runtime to start and a warm-up, samples for S seconds, then stops the
job with SIGINT (as Ctrl-C; SIGKILL if it has not ended 10 s later) unless --wait is given,
and prints the findings. With `--pid` it samples a running job and leaves it alone.
The verdict is explained in docs/doctor.md. Exit status: 0 a report was printed; 1 nothing
could be observed (the job ended before TensorFlow started or never started it, or --pid
names no process, or none at or below it loaded TensorFlow); 2 bad usage.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import replace
from typing import IO, TYPE_CHECKING

from hwtune.cli import Environment
from hwtune.commands.numbers import number_text, process_id, seconds
from hwtune.commands.pathargs import nonempty_path
from hwtune.commands.verify import STOP_GRACE_S, command_or_pid, exit_on_sigterm
from hwtune.errors import HwtuneError
from hwtune.status import ExitStatus

if TYPE_CHECKING:
    from hwtune.apply.verify import Check
    from hwtune.doctor.samples import SampleSet

WARMUP_S = 5.0  # the first steps trace and compile (docs/doctor.md)
STARTUP_S = 120.0


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--pid", type=process_id, default=None, help="watch this running process")
    parser.add_argument(
        "--seconds", type=seconds, default=20.0, metavar="S", help="how long to sample (20)"
    )
    parser.add_argument(
        "--warmup",
        type=seconds,
        default=None,
        metavar="S",
        help="with -- CMD: seconds to let the job settle after TensorFlow starts (5)",
    )
    parser.add_argument(
        "--startup",
        type=seconds,
        default=None,
        metavar="S",
        help="with -- CMD: how long to wait for TensorFlow to start (120)",
    )
    parser.add_argument(
        "--wait",
        action="store_true",
        help="with -- CMD: let the job finish instead of stopping it",
    )
    parser.add_argument("--json", action="store_true", help="print the diagnosis as JSON")
    parser.add_argument(
        "--root", type=nonempty_path, default="/", metavar="DIR", help=argparse.SUPPRESS
    )
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- CMD ARGS...")


# The longest --seconds, --warmup or --startup: ten years. time.sleep() takes no more than
# time_t holds, and `--warmup 1e300` was an OverflowError traceback once TensorFlow started.
MAX_SECONDS = 315_360_000.0


def _in_range(value: float, flag: str, *, zero: bool = False) -> None:
    if not ((value >= 0 if zero else value > 0) and value <= MAX_SECONDS):
        low = "from 0" if zero else "above 0,"
        raise ValueError(
            f"{flag} must be a number of seconds {low} up to {number_text(MAX_SECONDS)} "
            f"(10 years), got {number_text(value)}"
        )


class _Job:
    """The job the doctor started: its output is read (for TF's signals) and passed on."""

    def __init__(self, command: list[str], env: Environment) -> None:
        from hwtune.apply.steps import STEPS_ENV
        from hwtune.doctor.signals import ONEDNN_VERBOSE_ENV, ONEDNN_VERBOSE_VALUE, SignalReader

        environ = dict(os.environ)
        self.verbose_ours = ONEDNN_VERBOSE_ENV not in environ
        if self.verbose_ours:
            environ[ONEDNN_VERBOSE_ENV] = ONEDNN_VERBOSE_VALUE
        # Step times, where the job calls hwtune.configure() (hwtune/apply/steps.py).
        self._scratch = tempfile.TemporaryDirectory(prefix="hwtune-doctor-")
        self.steps_file = os.path.join(self._scratch.name, "steps")
        environ[STEPS_ENV] = self.steps_file
        self.reader = SignalReader()
        self._out = env.stderr
        try:
            self.process = subprocess.Popen(
                command,
                env=environ,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # its own group: stopping it stops what it started
            )
        except OSError as err:
            raise HwtuneError(f"cannot run {command[0]!r}: {err.strerror}") from err
        assert self.process.stdout is not None
        self._pump = threading.Thread(target=self._forward, args=(self.process.stdout,))
        self._pump.daemon = True
        self._pump.start()

    def _forward(self, stream: IO[bytes]) -> None:
        from hwtune.doctor.signals import passes_on

        for raw in stream:
            line = raw.decode("utf-8", "replace")
            self.reader.feed(line)
            if passes_on(line, verbose_ours=self.verbose_ours):
                try:
                    self._out.write(line)
                    self._out.flush()
                except (OSError, ValueError):
                    pass

    def alive(self) -> bool:
        return self.process.poll() is None

    def stop(self) -> int:
        """SIGINT (Python's KeyboardInterrupt: buffers are flushed), then SIGKILL."""
        for sig in (signal.SIGINT, signal.SIGKILL):
            if self.process.poll() is not None:
                break
            try:
                os.killpg(self.process.pid, sig)
            except ProcessLookupError:
                break
            try:
                self.process.wait(STOP_GRACE_S)
            except subprocess.TimeoutExpired:
                continue
        return self.finish()

    def finish(self) -> int:
        code = self.process.wait()
        self._pump.join(STOP_GRACE_S)
        return code

    def step_ends(self) -> list[float]:
        """The step ends the job's Keras callback wrote; the scratch folder goes away."""
        from hwtune.apply.steps import parse_steps

        try:
            with open(self.steps_file, encoding="ascii", errors="replace") as handle:
                return parse_steps(handle.read())
        except OSError:
            return []
        finally:
            self._scratch.cleanup()


def _progress(env: Environment, pid: int, seconds: float) -> Callable[[float], None]:
    tty = bool(getattr(env.stderr, "isatty", lambda: False)())
    print(f"hwtune doctor: sampling pid {pid} for {seconds:g} s", file=env.stderr)
    shown = [-1]

    def update(elapsed: float) -> None:
        if tty and int(elapsed) != shown[0]:
            shown[0] = int(elapsed)
            env.stderr.write(f"\rhwtune doctor: sampling pid {pid}: {elapsed:.0f}/{seconds:g} s")
            env.stderr.flush()

    return update


def _observe(
    pid: int, args: argparse.Namespace, env: Environment
) -> tuple[SampleSet, list[Check]]:
    """Sample `pid`, then check its settings against the plan (as `hwtune verify`)."""
    from hwtune.doctor.gpu import GpuSampler
    from hwtune.doctor.settings import settings_checks
    from hwtune.doctor.watch import sample

    gpus = GpuSampler()
    try:
        data = sample(pid, args.seconds, progress=_progress(env, pid, args.seconds), gpus=gpus)
    finally:
        gpus.close()
    if getattr(env.stderr, "isatty", lambda: False)():
        env.stderr.write("\n")
    try:
        checks = settings_checks(pid, args.root)
    except HwtuneError as err:
        env.say("doctor", "note", f"settings not checked: {err.message}")
        checks = []
    return data, checks


def _not_started(code: int, ended: bool, startup: float) -> str:
    """Why no TensorFlow was found in a job doctor started: it ended first (with its status,
    or the signal that ended it), or it ran --startup seconds without starting it."""
    if ended:
        how = f"status {code}" if code >= 0 else f"killed by signal {-code}"
        return f"the job exited ({how}) before TensorFlow started"
    return f"TensorFlow did not start in the job within {startup:g} s (it was stopped)"


def run(args: argparse.Namespace, env: Environment) -> int:
    from hwtune.doctor.analysis import analyse
    from hwtune.doctor.report import render_json, render_text
    from hwtune.doctor.watch import steps_in_window, tensorflow_target, wait_for_tensorflow

    command = command_or_pid(args, env, "doctor")
    if command is None:
        return ExitStatus.USAGE
    # The job's start-up, warm-up and end are the doctor's only when it starts the job: with
    # --pid these were silently ignored (`--pid N --wait` sampled 20 s, then left).
    started_only = [
        flag
        for flag, given in (
            ("--wait", args.wait),
            ("--warmup", args.warmup is not None),
            ("--startup", args.startup is not None),
        )
        if given
    ]
    if args.pid is not None and started_only:
        print(
            f"hwtune doctor: error: {', '.join(started_only)} goes with -- CMD (--pid samples "
            "a running job and leaves it alone)",
            file=env.stderr,
        )
        return ExitStatus.USAGE
    startup = STARTUP_S if args.startup is None else args.startup
    warmup = WARMUP_S if args.warmup is None else args.warmup
    try:
        _in_range(args.seconds, "--seconds")
        _in_range(startup, "--startup")
        _in_range(warmup, "--warmup", zero=True)
    except ValueError as err:
        env.say("doctor", "error", str(err))
        return ExitStatus.USAGE
    job: _Job | None = None
    if args.pid is not None:
        if not os.path.isdir(f"/proc/{args.pid}"):
            raise HwtuneError(f"no process {args.pid}")
        target = tensorflow_target(args.pid)
        if target is None:
            raise HwtuneError(
                f"no TensorFlow in pid {args.pid} or below it (no process there loaded it)",
                hint="give the pid of the job that imported TensorFlow, or start it with "
                "`hwtune doctor -- CMD`",
            )
        data, checks = _observe(target, args, env)
    else:
        job = _Job(command, env)
        with exit_on_sigterm():
            try:
                found = wait_for_tensorflow(job.process.pid, startup, job.alive)
                if found is None:
                    ended = not job.alive()
                    code = job.stop()
                    raise HwtuneError(_not_started(code, ended, startup))
                time.sleep(warmup)
                data, checks = _observe(found, args, env)
            finally:
                # Also on Ctrl-C: the job has a session of its own, the terminal's SIGINT
                # does not reach it.
                if args.wait and job.alive():
                    job.finish()
                else:
                    job.stop()
        data = replace(
            data, signals=job.reader.signals, steps=steps_in_window(job.step_ends(), data)
        )
    if len(data.samples) < 2:
        raise HwtuneError(f"pid {data.pid} ended before two samples could be taken")
    window = data.samples[-1].time - data.samples[0].time
    if window < 0.9 * args.seconds:  # the process ended (or went away) mid-window
        cut = f"pid {data.pid} ended {window:.1f} s into the {args.seconds:g} s window"
        env.say("doctor", "note", f"{cut}: the figures cover that part only")
    diagnosis = analyse(data, checks)
    render = render_json if args.json else render_text
    env.stdout.write(render(diagnosis, data))
    return ExitStatus.SUCCESS
