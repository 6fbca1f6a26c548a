"""One base error with a stable code and an optional hint; the CLI maps them to exit codes.

Environmental oddities found while detecting are not errors: they become `ProbeIssue`s.
Errors are for what the user must fix (a bad config file, an impossible request, a failed write).
"""

from __future__ import annotations

from typing import Literal

Kind = Literal["note", "warning", "error"]

# sd-daemon(3): a line on a journal stream may start with "<N>", a syslog(3) priority
# (3 LOG_ERR, 4 LOG_WARNING, 5 LOG_NOTICE); without one it is logged at the stream's default,
# info, which `journalctl -p err` hides.
PRIORITY: dict[str, int] = {"error": 3, "warning": 4, "note": 5}


def stderr_line(command: str | None, kind: Kind, text: str, *, journal: bool = False) -> str:
    """One line hwtune says on stderr, in the one form every subcommand uses:
    "hwtune COMMAND: KIND: TEXT" (`command` None: a library caller's, "hwtune: KIND: TEXT");
    `journal`: stderr is the journal stream, so the line carries its priority."""
    who = "hwtune" if command is None else f"hwtune {command}"
    return f"{journal_prefix(kind, journal)}{who}: {kind}: {text}"


def hint_line(hint: str, kind: Kind = "error", *, journal: bool = False) -> str:
    """The "hint: ..." line after a `kind` line, logged at that line's priority."""
    return f"{journal_prefix(kind, journal)}hint: {hint}"


def journal_prefix(kind: Kind, journal: bool) -> str:
    return f"<{PRIORITY[kind]}>" if journal else ""


class HwtuneError(Exception):
    """Base class: `message` for the user, `hint` on how to fix it, `code` for scripts."""

    code = "hwtune-error"

    def __init__(self, message: str, *, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint

    def __str__(self) -> str:
        return f"{self.message} (hint: {self.hint})" if self.hint else self.message


class ModelError(HwtuneError, ValueError):
    """Data that does not fit a model: names the file, the key path and what was wrong."""

    code = "invalid-data"


class ConfigError(HwtuneError, ValueError):
    """A config file, HWTUNE_* variable or flag that is malformed or unknown."""

    code = "invalid-config"


class NoHomeError(ConfigError):
    """No home directory to find a per-user file under (HOME unset, empty or relative, and no
    password database entry with one): readers take it as no such file, writers fail with it."""

    code = "no-home"


class KnowledgeError(HwtuneError, ValueError):
    """A knowledge data file (shipped or user-added) that does not validate."""

    code = "invalid-knowledge"


class PlanError(HwtuneError, ValueError):
    """An intent that cannot be planned (e.g. more instances than cores)."""

    code = "cannot-plan"


class ApplyError(HwtuneError, OSError):
    """A write that failed or was refused; the previous files are intact."""

    code = "apply-failed"


class LockTimeout(ApplyError):
    code = "lock-timeout"


class TuneError(HwtuneError, RuntimeError):
    code = "tune-failed"


class CommandNotStarted(HwtuneError, OSError):
    """`hwtune exec` could not start its command: not found (exit 127), or found but not
    executable (126), as POSIX has `env`, `nice` and `nohup` report it ("Exit Status for
    Commands"), so a wrapper can tell a job that never ran from one that failed."""

    code = "cannot-execute"

    def __init__(self, message: str, *, not_found: bool, hint: str | None = None) -> None:
        super().__init__(message, hint=hint)
        self.not_found = not_found
