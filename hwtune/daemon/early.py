"""The daemon's signals, held from the first moment `hwtune daemon` runs until its loop
handles them (`hold_early_signals`, `Daemon._run`). Standard library only: the CLI imports it
before anything else of the daemon."""

from __future__ import annotations

import signal

# The signals whose default action ends a process and which the loop handles (SIGINT aside:
# Python's own handler, installed before any of hwtune runs, makes it KeyboardInterrupt).
# Until `Daemon._run` installs its handlers, the interpreter's start and the imports take
# 0.1-0.3 s, in which a SIGHUP from a unit's ExecReload= or logrotate's SIGUSR1 killed it.
EARLY_SIGNALS = frozenset({signal.SIGTERM, signal.SIGHUP, signal.SIGUSR1, signal.SIGUSR2})


def hold_early_signals() -> set[signal.Signals | int]:
    """Block EARLY_SIGNALS from the first moment `hwtune daemon` runs (the CLI, before the
    imports): one that arrives stays pending and is handled once the loop's handlers are in
    place, which unblock them (`Daemon._run`). Returns the previous mask, to put back."""
    return signal.pthread_sigmask(signal.SIG_BLOCK, EARLY_SIGNALS)
