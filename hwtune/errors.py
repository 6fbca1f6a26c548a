"""One base error with a stable code and an optional hint; the CLI maps them to exit codes.

Environmental oddities found while detecting are not errors: they become `ProbeIssue`s.
Errors are for what the user must fix (a bad config file, an impossible request, a failed write).
"""

from __future__ import annotations

from typing import Literal


def stderr_line(command: str | None, kind: Literal["note", "warning", "error"], text: str) -> str:
    """One line hwtune says on stderr, in the one form every subcommand uses:
    "hwtune COMMAND: KIND: TEXT" (`command` None: a library caller's, "hwtune: KIND: TEXT")."""
    who = "hwtune" if command is None else f"hwtune {command}"
    return f"{who}: {kind}: {text}"


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
