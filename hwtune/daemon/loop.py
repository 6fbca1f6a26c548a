"""The daemon's loop: detect → plan → apply, then wait for an input to change, and again.

One thread, one `select()`: on the signal wake-up pipe (SIGTERM, SIGINT, SIGHUP, SIGUSR1,
SIGUSR2), on the
inotify descriptor, with a timeout that is the next of: the poll interval, the watchdog ping,
the NFD file refresh. Nothing is done while nothing changes but reading a few dozen small files
once per interval.

Signals are taken in batches: everything that arrived since the last look is acted on once,
SIGTERM/SIGINT first (stop), then SIGHUP (reload), else SIGUSR1/SIGUSR2 (check the inputs now).
Standard signals pending together have no order (signal(7): "the order in which the signals
are delivered is unspecified"; Linux, and Python's dispatch to handlers, take the lowest number
first), so a batch has none to keep; what arrives while one is handled is the next batch,
handled after it. SIGUSR1/SIGUSR2 are what logrotate's `postrotate` scripts and
stray `kill -USR1`s send to daemons to reopen their log files; their default action ends the
process. This daemon logs to stderr and has no file to reopen, so either one is logged and
makes it check its inputs at once, as a poll would; with a SIGHUP in the same batch the reload,
which re-reads everything, is that check.

Failure policy: a config file that does not parse, a plan or an apply that raises, or a probe
that fails where it did not before (a new `ProbeIssue` that says the probe crashed or read a
malformed file, compared with the last applied detection) leaves the last good profile in
place; the problem goes to `STATUS=` and the log, and every interval the daemon tries again,
so fixing the input is enough to recover. SIGHUP re-reads everything and accepts the detection
as it is (issues included) as the new baseline. Other new issues (a CPU taken offline makes the
CPU probe say that it counted only the online ones) describe the machine as it now is: they are
applied like any change and named in the log line.
"""

from __future__ import annotations

import os
import select
import signal
import time
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from types import FrameType
from typing import TextIO

from hwtune.daemon import changes
from hwtune.daemon.changes import describe_issue, is_failure, issue_key
from hwtune.daemon.early import EARLY_SIGNALS
from hwtune.daemon.inputs import (
    OUTPUTS,
    config_paths,
    output_input,
    plan_inputs,
    site_directories,
    tuned_directory,
)
from hwtune.daemon.instance import LOCK_NAME, AlreadyRunning, hold_output, is_current
from hwtune.daemon.logstream import flush_or_discard, is_journal_stream, own_usage
from hwtune.daemon.sdnotify import MIN_PING_S, Notifier, monotonic_usec, watchdog_interval
from hwtune.daemon.watch import Input, Watcher
from hwtune.errors import HwtuneError
from hwtune.fs.streams import guard_stderr, unguarded
from hwtune.models.hardware import Hardware, ProbeIssue
from hwtune.models.profile import Profile
from hwtune.status import ExitStatus

# After an inotify event, wait this long for the writer to finish (an editor writes, renames
# and chmods in quick succession) before fingerprinting, so one edit is one re-plan.
SETTLE_S = 0.05
# Plans made again when a config changes between the stable reads around profile_for.
CONFIG_RETRIES = 3
# NFD re-reads features.d every core.sleepInterval, 60 s by default (NFD docs, "nfd-worker
# configuration"); an expiry of at least two of those, refreshed at half-life, means the labels
# never lapse while the daemon runs and disappear within ~3 minutes when it stops.
NFD_MIN_TTL_S = 120.0
NFD_TTL_INTERVALS = 4
# Not a reason to stop (see the module doc): logged, and the inputs are checked at once.
CHECK_SIGNALS = (signal.SIGUSR1, signal.SIGUSR2)
# Inputs that change the plan but no labelled fact (inputs.plan_inputs' names): while only the
# config failed, their moving leaves the last good apply's labels true (`_labels_hold`).
PLAN_ONLY_INPUTS = ("config", "measured")


class _Stop(BaseException):
    """Raised from the SIGTERM handler to abandon a detection in progress (not an Exception,
    so that no probe's `except Exception` swallows it)."""


@dataclass
class DaemonOptions:
    root: Path
    output: Path
    interval: float
    nfd_dir: Path | None = None
    use_inotify: bool = True


@dataclass(frozen=True)
class _Good:
    hardware: Hardware
    profile: Profile
    at: float  # time.time() of the apply


class Daemon:
    def __init__(
        self,
        options: DaemonOptions,
        environ: Mapping[str, str],
        log: TextIO,
        notifier: Notifier | None = None,
    ) -> None:
        from hwtune.probes.root import is_live

        self.options = options
        self.environ = environ
        # The stream itself for the last flush, which must see the error of a full disk that
        # the guard hides (`logstream.flush_or_discard`); the lines go through the CLI's
        # stderr guard, wrapped once here (`log`).
        self.log_stream = unguarded(log)
        self._log_lines = guard_stderr(log)
        self.notifier = notifier or Notifier.from_environ(environ)
        self.live = is_live(options.root)
        self.config_files = config_paths(environ)
        self.good: _Good | None = None
        self.error: str | None = None
        # The NFD file apart from the profile: its failure is retried alone, not by re-planning
        self.nfd_error: str | None = None
        # Whether the labels of the last good apply still hold while degraded: the failure is
        # in the config files alone (`_config_failed`), and since that apply no input of a
        # labelled fact (CPUs, cgroup, NUMA, memory, GPUs, TensorFlow) has moved and no
        # profile file failed to be put back (`_labels_unconfirmed`).
        self._config_failed = False
        self._labels_unconfirmed = False
        self.status = "starting"
        self.cycles = 0
        # sd-daemon(3) "<N>" priority prefixes only when stderr goes to the journal.
        self.journal = is_journal_stream(environ.get("JOURNAL_STREAM", ""), log)
        self._signals: list[int] = []
        self._interruptible = False
        self._watcher: Watcher | None = None
        # When the NFD file was last stamped, by the wall clock (its expiry is wall-clock time)
        # and by the monotonic one (the wall clock can be stepped back; `_nfd_due`).
        self._nfd_written_at = 0.0
        self._nfd_written_mono = 0.0
        self._notify_failing = False
        # OUTPUT/.daemon.lock, held for the daemon's life (`run`, `_keep_lock`), and why it
        # could not be had (None: held), logged once per distinct reason
        self._lock_fd: int | None = None
        self._lock_problem: str | None = None

    # ------------------------------------------------------------------ output
    def log(self, text: str, priority: int = 6) -> None:
        prefix = f"<{priority}>" if self.journal else ""
        # journald restarting, stderr closed or its reader gone must not end the daemon: the
        # CLI's stderr guard drops such a line (and points a stream whose reader is gone at
        # /dev/null, hwtune/fs/streams.py)
        print(f"{prefix}hwtune daemon: {text}", file=self._log_lines, flush=True)

    def _status(self, text: str) -> None:
        self.status = text
        self._notify(STATUS=text)

    def _notify(self, **fields: str | int) -> None:
        """sd_notify, logging the first failure of a run of them and the recovery, not every
        dropped message (a watchdog ping every few seconds into a full queue)."""
        if not self.notifier.enabled:  # unset, or a kind of socket logged once at start
            return
        if self.notifier.send(**fields):
            if self._notify_failing:
                self.log(f"sd_notify delivered again ({self.notifier.dropped} dropped so far)", 5)
                self._notify_failing = False
        elif self.notifier.error and not self._notify_failing:
            self.log(self.notifier.error, 4)
            self._notify_failing = True

    # ------------------------------------------------------------------ signals
    def _on_signal(self, signum: int, _frame: FrameType | None) -> None:
        self._signals.append(signum)
        if signum in (signal.SIGTERM, signal.SIGINT) and self._interruptible:
            raise _Stop()

    def _stop_if_asked(self) -> None:
        """Called between tries for the output lock (another `hwtune apply` may hold it for up
        to its 30 s lock timeout) and for a config file someone is writing (up to
        stable.WAIT_S, once per read): systemd kills a service that has not stopped within
        TimeoutStopSec= (5 s in systemd/hwtune.service) of SIGTERM. Nothing is written yet."""
        if signal.SIGTERM in self._signals or signal.SIGINT in self._signals:
            raise _Stop()

    # ------------------------------------------------------------------ one cycle
    def _inputs(self) -> None:
        try:
            inputs = plan_inputs(
                self.options.root,
                live=self.live,
                config_files=self.config_files,
                site_dirs=site_directories() if self.live else (),
                tuned_dir=tuned_directory(self.environ),
            )
        except Exception as err:  # noqa: BLE001 - keep watching what was watched before
            self.log(f"cannot list the inputs to watch: {type(err).__name__}: {err}", 4)
            if self._watcher is not None:
                return
            inputs = []
        inputs.append(self._outputs())
        if self._watcher is None:
            self._watcher = Watcher(inputs, use_inotify=self.options.use_inotify)
            if self._watcher.note:
                self.log(self._watcher.note, 5)
        else:
            self._watcher.set_inputs(inputs)

    def _outputs(self) -> Input:
        from hwtune.apply.render import OUTPUT_FILES

        # the lock too: its deletion wakes the daemon to take it again (`_keep_lock`)
        names = (*OUTPUT_FILES, LOCK_NAME)
        return output_input(self.options.output, names, self.options.nfd_dir)

    def _compute(self, accept_issues: bool) -> tuple[Hardware, Profile]:
        """detect → plan; raises HwtuneError for what must keep the last good profile.

        Planning goes through `hwtune.pipeline.request.profile_for`, as `hwtune apply` does
        (config files, HWTUNE_* variables, measurements), so both write the same files."""
        from hwtune.pipeline.request import PlanRequest, profile_for
        from hwtune.probes import detect

        texts = self._stable_configs()  # a bad config file fails here, before detecting
        self._interruptible = True
        try:
            # The daemon's CUDA_VISIBLE_DEVICES limits the live machine's GPUs, as for detect.
            hardware = detect(self.options.root, environ=self.environ if self.live else None)
        finally:
            self._interruptible = False
        if self.good is not None and not accept_issues:
            failed = [i for i in self._new_issues(hardware) if is_failure(i)]
            if failed:
                more = f" (+{len(failed) - 1} more)" if len(failed) > 1 else ""
                raise HwtuneError(describe_issue(failed[0]) + more)
        for _ in range(CONFIG_RETRIES):
            profile = profile_for(PlanRequest(self.environ, hardware=hardware)).profile
            # profile_for read the files again: a write that began meanwhile makes them differ
            # from the stable read before and after, and the plan is made again.
            again = self._stable_configs()
            if again == texts:
                return hardware, profile
            texts = again
        raise HwtuneError("the config files kept changing while planning; not applied yet")

    def _stable_configs(self) -> dict[Path, bytes | None]:
        """The config files' bytes, read when no one is writing them (`daemon.stable`), and
        checked: a partial write is never planned from, and a parse error keeps the last
        good profile (the caller's failure policy), remembered as a config failure
        (`_labels_hold`)."""
        from hwtune.daemon.stable import read_stable
        from hwtune.pipeline.config import load_overrides, parse_config_text

        try:
            texts = read_stable(self.config_files, while_waiting=self._stop_if_asked)
            for path, data in texts.items():
                if data is not None:
                    try:
                        text = data.decode("utf-8")
                    except UnicodeDecodeError as err:
                        raise HwtuneError(f"{path}: cannot read: {err}") from err
                    parse_config_text(text, str(path))
            load_overrides(self.environ, config_paths=())  # HWTUNE_* variables
        except HwtuneError:
            self._config_failed = True
            raise
        return texts

    def _new_issues(self, hardware: Hardware) -> list[ProbeIssue]:
        known = {issue_key(i) for i in self.good.hardware.issues} if self.good else set()
        return [i for i in hardware.issues if issue_key(i) not in known]

    def cycle(self, trigger: list[str], *, accept_issues: bool = False) -> bool:
        """One detect → plan → apply; True when the profile on disk is the machine's now."""
        from hwtune.apply.outputs import apply_all, edit_notes

        self.cycles += 1
        self._config_failed = False
        try:
            try:
                hardware, profile = self._compute(accept_issues)
            finally:
                self._inputs()  # whatever happened, watch what the plan depends on now
            report = apply_all(
                self.options.output, profile, hardware, while_waiting=self._stop_if_asked
            )
        except HwtuneError as err:
            self._fail(trigger, err.message)
            return False
        except Exception as err:  # noqa: BLE001 - a bug in one cycle must not end the daemon
            self._fail(trigger, f"unexpected {type(err).__name__}: {err}")
            return False
        previous = self.good
        notes = self._new_issues(hardware) if previous is not None else []
        self.good = _Good(hardware, profile, time.time())
        self._labels_unconfirmed = False
        recovered = self.error is not None
        self.error = None
        if previous is None:
            line = f"applied to {self.options.output}: {self._summary(profile)}"
        else:
            line = self._change_line(trigger, previous, hardware, profile)
            if notes or recovered:
                line = line or f"{', '.join(trigger)} changed: profile unchanged"
            if notes:
                line += "; note: " + "; ".join(describe_issue(i) for i in notes)
        if recovered:
            line = f"recovered: {line}"
        if line:  # nothing when an input's fingerprint moved but no fact or setting did
            self.log(line)
        for note in edit_notes(report, daemon=True):
            self.log(note, 4)
        self._write_nfd(force=True)
        if self._watcher is not None:  # all written: from now on a deletion is a change
            self._watcher.rebase(OUTPUTS)
        self._status(self._ok_status(line))
        return True

    def _change_line(
        self, trigger: list[str], previous: _Good, hw: Hardware, profile: Profile
    ) -> str:
        hw_moved = changes.hardware_changes(previous.hardware, hw)
        settings = changes.profile_changes(previous.profile, profile)
        if not hw_moved and not settings:
            return ""
        return changes.summary(trigger, hw_moved, settings)

    def _summary(self, profile: Profile) -> str:
        from hwtune.apply.render import env_map

        intra, inter = profile.threads.intra_op.value, profile.threads.inter_op.value
        # env_map: what the env files hold, thread variables included (profile.env is the rest)
        variables = len(env_map(profile))
        return f"intra_op {intra}, inter_op {inter}, {variables} environment variables"

    def _ok_status(self, line: str) -> str:
        assert self.good is not None
        text = line or f"applied: {self._summary(self.good.profile)}"
        return f"{text}; degraded: {self.nfd_error}" if self.nfd_error else text

    def _fail(self, trigger: list[str], message: str) -> None:
        changed = self.error != message
        self.error = message
        if self.good is not None:
            kept = datetime.fromtimestamp(self.good.at).strftime("%H:%M:%S")
            text = f"degraded: {message}; keeping the profile applied at {kept}"
        else:
            text = f"error: {message}; no profile applied"
        if changed:  # once per distinct problem, not once per retry
            self.log(f"{', '.join(trigger) or 'start'}: {text}", 3)
        self._status(text)

    # ------------------------------------------------------------------ NFD
    def _nfd_ttl(self) -> float:
        return max(NFD_MIN_TTL_S, NFD_TTL_INTERVALS * self.options.interval)

    def _labels_hold(self) -> bool:
        """While degraded, whether the last good apply's labels are still true: only a config
        file failed (the profile on disk is still that apply's, `_fail` keeps it), no input
        of a labelled fact moved since, and no profile file failed to be put back. A config
        typo then leaves the node's labels in place rather than dropping them from the
        scheduler's view (docs/daemon.md)."""
        return self._config_failed and not self._labels_unconfirmed

    def _nfd_due(self, now: float, mono: float) -> bool:
        """Whether the NFD file's half-life refresh is due, by either clock. By the wall clock
        alone, a clock stepped back an hour (NTP correcting a clock that ran ahead) stopped
        the refresh for that hour, and the expiry stamped by the fast clock kept the labels
        for an hour after the daemon stopped or degraded; a fresh stamp brings it back to
        one TTL. A clock stepped forward makes the wall-clock age large at once."""
        half = self._nfd_ttl() / 2
        return not 0 <= now - self._nfd_written_at < half or mono - self._nfd_written_mono >= half

    def _write_nfd(self, *, force: bool = False) -> None:
        # While degraded otherwise (a probe or an apply failed, or hardware moved since the
        # last good apply) the labels are facts the daemon can no longer confirm: the file is
        # left to lapse at the expiry stamped then, as if the daemon had stopped
        # (docs/daemon.md), rather than made to look fresh.
        if self.options.nfd_dir is None or self.good is None:
            return
        if self.error is not None and not self._labels_hold():
            return
        now, mono = time.time(), time.monotonic()
        if not force and not self._nfd_due(now, mono):
            return
        from hwtune.apply import nfd

        moment = datetime.fromtimestamp(now, timezone.utc)
        text = nfd.render(
            nfd.labels(self.good.hardware, self.good.profile),
            expiry=nfd.expiry_after(moment, self._nfd_ttl()),
            generated=moment,
        )
        try:
            nfd.write_feature_file(self.options.nfd_dir, text)
        except (OSError, ValueError) as err:
            message = f"NFD feature file: {err}"
            if message != self.nfd_error:  # once per distinct problem, not once per retry
                self.log(f"nfd: degraded: {message}", 3)
            self.nfd_error = message
            return
        if self.nfd_error is not None:
            self.log(f"nfd: recovered: {self.options.nfd_dir} written")
            self.nfd_error = None
        self._nfd_written_at, self._nfd_written_mono = now, mono

    # ------------------------------------------------------------------ main loop
    def run(self) -> int:
        """Serve until SIGTERM/SIGINT; AlreadyRunning at once when another daemon keeps the
        same output directory current (`instance.hold_output`), ExitStatus.LOCKED when another
        one took it over while this one's lock file was deleted (`_keep_lock`)."""
        self._lock_fd, why_not = self._hold()
        if why_not is not None:
            self._lock_unheld(why_not)
        try:
            return self._run()
        finally:
            if self._lock_fd is not None:
                os.close(self._lock_fd)

    def _run(self) -> int:
        wake_r, wake_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        previous_fd = signal.set_wakeup_fd(wake_w, warn_on_full_buffer=False)
        handled = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, *CHECK_SIGNALS)
        old_handlers = {s: signal.signal(s, self._on_signal) for s in handled}
        # Blocked since the start (`hold_early_signals`): one sent meanwhile is delivered now,
        # to the handlers above, and served by the loop.
        old_mask = signal.pthread_sigmask(signal.SIG_UNBLOCK, EARLY_SIGNALS)
        try:
            return self._serve(wake_r)
        except _Stop:
            return self._stop(self._signals)
        except AlreadyRunning as err:  # from _keep_lock: another daemon has the directory now
            self.log(err.message, 3)
            self.log(f"hint: {err.hint}", 3)
            self._stop([])
            return ExitStatus.LOCKED  # as at start: systemd must not restart it (instance doc)
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, old_mask)
            for s, handler in old_handlers.items():
                signal.signal(s, handler)
            signal.set_wakeup_fd(previous_fd)
            os.close(wake_r)
            os.close(wake_w)
            if self._watcher is not None:
                self._watcher.close()
            self.notifier.close()
            flush_or_discard(self.log_stream)

    def _stop(self, pending: list[int]) -> int:
        """0 after SIGTERM (how systemd and kill stop a service: a clean stop), 130 after
        SIGINT (Ctrl-C in a terminal, 128+2 as shells report it and as README's table says)."""
        self._notify(STOPPING=1, STATUS="stopping")
        self.log(f"stopping ({own_usage()})", 6)
        if signal.SIGTERM in pending:
            return 0
        return 128 + signal.SIGINT if signal.SIGINT in pending else 0

    def _serve(self, wake_r: int) -> int:
        interval = self.options.interval
        if self.notifier.error:
            self.log(self.notifier.error, 4)
        self._status("starting: detecting hardware")
        self.cycle(["start"])
        self._ready()  # once: applied, or the error
        ping = self._watchdog_ping()
        now = time.monotonic()
        next_poll = now + interval
        next_ping = now if ping else float("inf")
        while True:
            if self._signals:
                pending, self._signals = self._signals, []
                if signal.SIGTERM in pending or signal.SIGINT in pending:
                    return self._stop(pending)
                checks = [signal.Signals(s).name for s in CHECK_SIGNALS if s in pending]
                if signal.SIGHUP in pending:
                    self.reload(checks)
                    next_poll = time.monotonic() + interval
                elif checks:
                    self.log(f"{' and '.join(checks)}: checking the inputs now")
                    next_poll = time.monotonic()  # the poll below, due now
            now = time.monotonic()
            if now >= next_ping and ping:
                self._notify(WATCHDOG=1)
                next_ping = now + ping
            if now >= next_poll:
                self.poll()
                self._write_nfd()
                next_poll = time.monotonic() + interval
            assert self._watcher is not None
            fds = [wake_r]
            inotify_fd = self._watcher.fileno()
            if inotify_fd is not None:
                fds.append(inotify_fd)
            timeout = max(0.0, min(next_poll, next_ping) - time.monotonic())
            try:
                ready, _, _ = select.select(fds, [], [], timeout)
            except InterruptedError:  # pragma: no cover - PEP 475 retries; kept for safety
                continue
            if wake_r in ready:
                _drain(wake_r)
            if inotify_fd is not None and inotify_fd in ready and self._watcher.pending():
                next_poll = min(next_poll, time.monotonic() + SETTLE_S)

    def _watchdog_ping(self) -> float | None:
        """Seconds between WATCHDOG=1 pings (half of $WATCHDOG_USEC), at least MIN_PING_S."""
        ping = watchdog_interval(self.environ)
        if ping is not None and ping < MIN_PING_S:
            self.log(
                f"WATCHDOG_USEC={self.environ.get('WATCHDOG_USEC')} asks for a ping every "
                f"{ping * 1e6:g} µs; pinging every {MIN_PING_S:g} s instead (raise WatchdogSec= "
                f"to {2 * MIN_PING_S:g} s or more)",
                4,
            )
            ping = MIN_PING_S
        return ping

    def _hold(self, then: str = "not starting a second one") -> tuple[int | None, str | None]:
        """`instance.hold_output`, with a lock the file system refuses (ENOLCK: an NFS mount
        without lockd) taken as any other reason the lock cannot be had: the daemon runs
        without it (its docstring) rather than end in a traceback, at start or later."""
        try:
            return hold_output(self.options.output, then)
        except OSError as err:  # AlreadyRunning is no OSError: it goes on to the caller
            return None, f"cannot lock {self.options.output / LOCK_NAME}: {err.strerror or err}"

    def _lock_unheld(self, why_not: str | None) -> None:
        """Log why OUTPUT/.daemon.lock could not be had, once per distinct reason."""
        if why_not != self._lock_problem:
            self.log(f"not guarding {self.options.output} against a second daemon: {why_not}", 4)
        self._lock_problem = why_not

    def _keep_lock(self) -> None:
        """Hold OUTPUT/.daemon.lock again when the file held is no longer at that name (deleted,
        alone or with the directory: `rm -rf OUTPUT`), or was never had (`hold_output` makes
        the directory again). AlreadyRunning when another daemon took it meanwhile: `_run`
        stops this one before it writes anything there, so one daemon is left, as at start
        (instance module doc)."""
        output = self.options.output
        if self._lock_fd is not None and is_current(self._lock_fd, output):
            return
        lost = self._lock_fd is not None
        then = (
            "stopping this one, whose lock file was deleted: one daemon per directory"
            if lost
            else "stopping this one, which could not take the lock at start"
        )
        fd, why_not = self._hold(then)
        if fd is None:
            self._lock_unheld(why_not)
            return
        if self._lock_fd is not None:
            os.close(self._lock_fd)
        self._lock_fd, self._lock_problem = fd, None
        if lost:
            self.log(f"{output / LOCK_NAME} was deleted or replaced: held again", 4)
        else:
            self.log(f"now guarding {output} against a second daemon", 5)

    def poll(self) -> None:
        """Fingerprint the inputs; re-plan when one moved, or retry while degraded."""
        assert self._watcher is not None
        self._keep_lock()  # first: nothing is put back into a directory another daemon keeps
        moved = self._watcher.changed()
        outputs_moved = OUTPUTS in moved
        moved = [name for name in moved if name != OUTPUTS]
        if any(name not in PLAN_ONLY_INPUTS for name in moved):
            self._labels_unconfirmed = True
        if moved or self.error is not None:
            # A good cycle writes every output again; a failed one (degraded) writes nothing,
            # and the last good profile it keeps must still be on disk.
            if not self.cycle(moved or ["retry"]) and outputs_moved:
                self._restore_outputs()
        elif outputs_moved:
            self._restore_outputs()
        elif self.nfd_error is not None:  # the profile is fine: retry only the NFD file
            self._write_nfd(force=True)
            if self.good is not None:
                self._status(self._ok_status(""))

    def _restore_outputs(self) -> None:
        """Put back what someone deleted: the profile files (apply_all writes only those that
        differ from the last good profile, so nothing else is touched) and the NFD file."""
        from hwtune.apply.nfd import FILE_NAME
        from hwtune.apply.outputs import apply_all, edit_notes

        if self.good is None:
            return
        try:
            report = apply_all(
                self.options.output,
                self.good.profile,
                self.good.hardware,
                while_waiting=self._stop_if_asked,
            )
        except HwtuneError as err:
            self._labels_unconfirmed = True  # the profile on disk is no longer whole
            self._fail([OUTPUTS], err.message)  # retried every interval, as any failure
            return
        restored = [f"{path.name} ({report.verb(path)})" for path in report.changed]
        nfd_dir = self.options.nfd_dir
        if nfd_dir is not None and not (nfd_dir / FILE_NAME).exists():
            # While its writes fail (no features.d yet) the file was never there: writing it
            # now is the recovery `_write_nfd` logs, not something put back.
            was_written = self.nfd_error is None
            self._write_nfd(force=True)
            if was_written and (nfd_dir / FILE_NAME).exists():
                restored.append(f"{nfd_dir / FILE_NAME} (created)")
        if restored:
            self.log(f"outputs: put back {', '.join(restored)}", 4)
        for note in edit_notes(report, daemon=True):
            self.log(note, 4)

    def reload(self, checks: list[str] | None = None) -> None:
        """SIGHUP: tell systemd, re-read config and hardware, accept them as the baseline.
        `checks`: the SIGUSR1/SIGUSR2 of the same batch, whose check this reload is."""
        self._notify(RELOADING=1, MONOTONIC_USEC=monotonic_usec(), STATUS="reloading")
        also = f", with {' and '.join(checks)}" if checks else ""
        self.log(f"reloading (SIGHUP{also})")
        self.config_files = config_paths(self.environ)
        from hwtune.planner.knowledge import reload_knowledge

        self._keep_lock()
        reload_knowledge()  # user knowledge directories are re-read too, every table
        self.cycle(["reload"], accept_issues=True)
        self._ready()

    def _ready(self) -> None:
        """READY=1 alone, then the status: a datagram PID 1 finds too long is ignored whole
        (sdnotify module doc), and READY=1 must not go with it."""
        self._notify(READY=1)
        self._notify(STATUS=self.status)


def _drain(fd: int) -> None:
    try:
        while os.read(fd, 512):
            pass
    except BlockingIOError:
        pass
