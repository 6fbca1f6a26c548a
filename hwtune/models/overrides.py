"""What the user asked for, as `plan()` takes it: the merged result of config files,
HWTUNE_* variables, flags and `--set` (read by `hwtune.pipeline.config`). A model, not I/O, so
the pure planner can take it without importing the layer that reads files.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Literal

from hwtune.models.profile import Mode, ModelKind, PrecisionIntent

JitLevel = Literal["off", "autoclustering", "on"]
# How an origin ends where the launcher's rank variables gave an instance count or index
# (pipeline/request.py `resolve_share`): "LOCAL_WORLD_SIZE=8 (from the launcher's environment)".
# The user passed no --instances, so errors name the variable instead of the flag.
FROM_LAUNCHER = "(from the launcher's environment)"
DataFormat = Literal["channels_last", "channels_first"]


# Where an instance count came from when `--mode batch` chose it (planner/copies.py).
BATCH_ORIGIN = "batch mode's copies"


def describe_origin(origin: str | None, key: str) -> str:
    """An override's origin (`Overrides.origin`) in words: a flag, variable or measurement as
    is, a config file with its key, the intent given to plan() where no override set it."""
    if origin is None:
        return "the intent"
    if (
        origin.startswith(("--", "HWTUNE_", "configure("))
        or origin.endswith(FROM_LAUNCHER)
        or origin in ("a measurement", "the default", BATCH_ORIGIN)
    ):
        return origin
    return f"'{key}' in {origin}"


@dataclass(frozen=True, slots=True)
class Overrides:
    """What the user asked for; every field None (or empty) means "let hwtune decide"."""

    env: dict[str, str] = field(default_factory=dict)  # reason "set by the user", source "user"
    mode: Mode | None = None
    instances: int | None = None
    instance: int | None = None
    precision: PrecisionIntent | None = None
    tf_version: str | None = None
    model: ModelKind | None = None
    intra_op: int | None = None
    inter_op: int | None = None
    jit: JitLevel | None = None
    data_format: DataFormat | None = None
    # The measured workload whose tuned result applies ("builtin:cnn", a `tune --name`); None:
    # no measured result applies (a measurement holds for the workload it was made on).
    workload: str | None = None
    # "mode", "intra_op", "env.NAME" -> where the value came from, for reasons and explain
    origins: dict[str, str] = field(default_factory=dict)

    def origin(self, key: str) -> str | None:
        return self.origins.get(key)

    def merged(self, later: Overrides) -> Overrides:
        """These overrides with `later`'s set fields on top (a later source wins).

        An instance index belongs to the instance count it was given with: where `later`
        sets the count without an index, an index from an earlier source is dropped (index 0),
        as a launcher's rank is when a flag gives the count. So `hwtune env --instances 1` in a
        child of `hwtune exec --instances 2` plans instance 0 of 1, not the HWTUNE_INSTANCE=1
        its parent exported (which does not exist in a count of 1)."""
        changes: dict[str, Any] = {}
        for f in dataclasses.fields(self):
            if f.name in ("env", "origins"):
                continue
            value = getattr(later, f.name)
            if value is not None:
                changes[f.name] = value
        origins = {**self.origins, **later.origins}
        if later.instances is not None and later.instance is None:
            changes["instance"] = None
            origins.pop("instance", None)
        return dataclasses.replace(
            self,
            env={**self.env, **later.env},
            origins=origins,
            **changes,
        )


# Names a profile variable cannot have, because the shell that sources hwtune.sh owns them.
# bash: read-only (UID, EUID, PPID, SHELLOPTS, BASHOPTS, BASH_VERSINFO: `export UID=…` fails
# with "readonly variable"), or set by the shell itself so that an exported value is lost or
# changes the shell (GNU Bash manual, "Bash Variables"). zsh: UID, EUID, GID, EGID and USERNAME
# change the process's user or group when assigned (zsh manual, "Parameters Set By The Shell"),
# which as root is not an environment setting at all.
SHELL_RESERVED_NAMES = frozenset(
    {
        "UID",
        "EUID",
        "PPID",
        "SHELLOPTS",
        "BASHOPTS",
        "BASH_VERSINFO",
        "BASHPID",
        "BASH_ARGC",
        "BASH_ARGV",
        "BASH_ARGV0",
        "BASH_COMMAND",
        "BASH_LINENO",
        "BASH_SOURCE",
        "BASH_SUBSHELL",
        "EPOCHREALTIME",
        "EPOCHSECONDS",
        "FUNCNAME",
        "GROUPS",
        "HISTCMD",
        "LINENO",
        "RANDOM",
        "SECONDS",
        "SRANDOM",
        "GID",
        "EGID",
        "USERNAME",
    }
)


def env_name_problem(name: str) -> str | None:
    """Why the profile cannot set the variable `name` ([env] in a config file, `--set`), or
    None. A HWTUNE_* variable steers hwtune itself: exported by `. hwtune.sh`, a bad one
    (HWTUNE_MODE=bogus) would break every later hwtune command in that shell."""
    if name.startswith("HWTUNE_"):
        return (
            f"{name} steers hwtune itself, not the job; a profile does not set HWTUNE_* variables"
        )
    if name in SHELL_RESERVED_NAMES:
        return f"{name} belongs to the shell (read-only or set by bash or zsh itself)"
    return None
