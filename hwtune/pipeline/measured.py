"""Tuned results on disk, one JSON file per hardware fingerprint and workload.

    $HWTUNE_TUNED_DIR                         when set (tests, a daemon's shared directory)
    $XDG_STATE_HOME/hwtune/tuned/             else (default ~/.local/state/hwtune/tuned/)
        <fingerprint>/<workload>.json

State rather than cache: a result costs minutes of measuring to make again (XDG Base Directory
spec: "state data that should persist between application restarts"). Files are written
atomically (temporary file, fsync, rename, fsync of the directory), so a reader sees the old
result or the new one. `measured_settings` turns a result into the `measured` mapping `plan()`
takes, each Setting with source "measured" and the reason "measured: 1.31× over the rule's
choice"; `hwtune.pipeline.request` decides when a result applies (the workload named, its mode
and model kind).

A result file is input like any other: it may be truncated, hand-edited, written by another
version, or planted. Before anything reaches plan(), the whole file is checked: a regular
file (never a link, FIFO or device) of at most MAX_RESULT_BYTES, owned by root or the user
running hwtune and writable by no one else (`hwtune.fs.trusted_read`), UTF-8 JSON, schema 1, a
positive finite ratio, and every setting one of the knobs the tuner searches, with a value of
that knob's grammar (`_setting_problem`): no other variable, however harmless its name looks
(a planted result must not set CUDA_INJECTION64_PATH, NCCL_NET_PLUGIN, GLIBC_TUNABLES,
XLA_FLAGS or HOME for every job `hwtune apply` writes a profile for). Anything else
is a TuneError naming the file and what is wrong, and the whole result is ignored, never a
part of it (a measurement holds for its combination of settings). Every planning command and
`configure()` turn that error into a note and plan with the rules.
"""

from __future__ import annotations

import json
import math
import os
import re
import stat
import time
from collections.abc import Mapping
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from hwtune.errors import ApplyError, ConfigError, TuneError
from hwtune.fs.atomic import TMP_MARK, write_atomic
from hwtune.fs.guard import check_directory
from hwtune.fs.trust import make_dirs
from hwtune.fs.trusted_read import RefusedFile, read_bounded
from hwtune.models.cpulist import MAX_CPU
from hwtune.models.profile import Setting

RESULT_SCHEMA = 1
_SAFE = re.compile(r"[^A-Za-z0-9._-]")
_REDO = "delete the file or run `hwtune tune` again"
_WRITABLE = "set HWTUNE_TUNED_DIR to a writable directory"
# A file name has at most 255 bytes (NAME_MAX on Linux's file systems); write_atomic's
# temporary file adds "." and ".hwtune-tmp-<pid>-<ns>" (up to 41 bytes) to the result's name,
# which adds ".json": a longer workload name could never be stored (ENAMETOOLONG).
MAX_WORKLOAD_NAME = 200
# A result is about 2 KB (hwtune/tune/tuner.py's record); a file of a megabyte is not one, and
# reading it whole would only cost memory.
MAX_RESULT_BYTES = 1 << 20
# What plan() may take from a result, by key: exactly the knobs the tuner searches
# (settings_from_knobs below, hwtune/tune/config.py), under the keys it writes and their
# aliases in plan() (planner/core.py _ALIASES), each with its grammar. Counts first:
_COUNT_KEYS = frozenset(
    {
        "instances",
        "threads.intra_op",
        "threads.inter_op",
        "env.TF_NUM_INTRAOP_THREADS",
        "env.TF_NUM_INTEROP_THREADS",
    }
)
_MAX_COUNT = MAX_CPU  # no thread pool or instance count beyond the CPU numbers Linux has
_JIT_LEVELS = ("off", "autoclustering", "on")
_PRECISIONS = (None, "float32", "mixed_float16", "mixed_bfloat16")
_CHOICES: dict[str, tuple[str | bool | None, ...]] = {
    "jit.level": _JIT_LEVELS,
    "jit": _JIT_LEVELS,
    "precision.enabled": _PRECISIONS,
    "precision": _PRECISIONS,
    "env.TF_ENABLE_ONEDNN_OPTS": ("0", "1"),
    "instances.pinned": (True, False),  # several copies: pinned to their slices, or not
}


def tuned_dir(environ: Mapping[str, str] | None = None) -> Path:
    from hwtune.paths import tuned_dir as tuned_path

    return Path(tuned_path(environ))


def file_name(workload: str) -> str:
    """`builtin:cnn` -> `builtin_cnn.json`; any other odd character becomes `_`."""
    return _SAFE.sub("_", workload) + ".json"


def result_path(fingerprint: str, workload: str, environ: Mapping[str, str] | None = None) -> Path:
    """Where `workload`'s result is stored; ConfigError for a name no file can have."""
    if len(workload) > MAX_WORKLOAD_NAME:
        raise ConfigError(
            f"workload name of {len(workload)} characters ({workload[:40]!r}…): a result is "
            f"stored under a name of at most {MAX_WORKLOAD_NAME}",
            hint="choose a shorter --name or --workload",
        )
    return tuned_dir(environ) / _SAFE.sub("_", fingerprint) / file_name(workload)


def check_storable(
    fingerprint: str, workload: str, environ: Mapping[str, str] | None = None
) -> Path:
    """Before a tuning run spends its budget: the name can be stored, no other workload's
    result is where it would go, and the file can be written there (a read-only or missing
    HOME, a path through a regular file, a file system with shorter names). A file named as
    save_result's temporary one is made and removed in the nearest existing directory of the
    path; no directory is made (a run that stores nothing leaves nothing). The result's
    path; TuneError naming the problem."""
    path = result_path(fingerprint, workload, environ)
    _refuse_another_workloads(path, workload)
    _refuse_untrusted(path.parent, "cannot store the tuned result")
    directory = path.parent
    while not os.path.lexists(directory) and directory.parent != directory:
        directory = directory.parent
    probe = directory / f".{path.name}{TMP_MARK}{os.getpid()}-{time.monotonic_ns()}"
    try:
        fd = os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    except OSError as err:
        raise TuneError(
            f"cannot store the tuned result in {path}: {directory}: {err.strerror or err}",
            hint=f"{_WRITABLE}; nothing was measured",
        ) from err
    os.close(fd)
    os.unlink(probe)
    return path


def measured_settings(record: Mapping[str, Any]) -> dict[str, Setting]:
    """The `measured` mapping for plan() from a stored record (checked by read_result). The
    reason says how sure the ratio is: re-measured side by side with the plan (its 95%
    interval), or the races' estimate alone, which runs high (the race's winner is the arm
    whose samples came out high: hwtune/tune/search.py `_confirm`), stored when the budget
    ended before the re-measure or the plan failed in it."""
    ratio = float(record["ratio"])
    interval = _interval(record.get("ratio_interval"))
    if interval is not None:
        how = f"95% interval {interval[0]:.2f}-{interval[1]:.2f}×, re-measured side by side"
    elif ratio == 1.0:
        how = "the rule's choice was the best found"
    else:
        how = "the races' estimate, which runs high: not re-measured side by side"
    reason = f"measured: {ratio:.2f}× over the rule's choice ({how})"
    return {key: Setting(value, reason, "measured") for key, value in record["settings"].items()}


def _interval(found: object) -> tuple[float, float] | None:
    """A record's `ratio_interval`, when it is two positive finite numbers in order (a file
    is input: anything else is no interval, never an error)."""
    if not isinstance(found, list) or len(found) != 2:
        return None
    if not all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in found):
        return None
    low, high = float(found[0]), float(found[1])
    if not (math.isfinite(low) and math.isfinite(high) and 0 < low <= high):
        return None
    return low, high


def settings_from_knobs(
    knobs: Mapping[str, Any], *, precision_searched: bool, pinned: bool | None = None
) -> dict[str, Any]:
    """TrialConfig.knobs() -> plan() keys. Knobs left to TensorFlow (None) are not stored,
    nor the precision policy when precision was not part of the search; `pinned` (several
    copies: pinned to their slices or not) when the tuner measured it."""
    settings: dict[str, Any] = {}
    if knobs.get("intra_op") is not None:
        settings["threads.intra_op"] = int(knobs["intra_op"])
    if knobs.get("inter_op") is not None:
        settings["threads.inter_op"] = int(knobs["inter_op"])
    if knobs.get("onednn") is not None:
        settings["env.TF_ENABLE_ONEDNN_OPTS"] = "1" if knobs["onednn"] else "0"
    if knobs.get("jit") is not None:
        settings["jit.level"] = "autoclustering" if knobs["jit"] else "off"
    if precision_searched:
        settings["precision.enabled"] = knobs.get("precision")
    settings["instances"] = int(knobs.get("instances") or 1)
    if pinned is not None and settings["instances"] > 1:
        settings["instances.pinned"] = bool(pinned)
    return settings


def save_result(record: Mapping[str, Any], environ: Mapping[str, str] | None = None) -> Path:
    """Write `record` (made by hwtune.tune.tuner) atomically; returns the file."""
    path = result_path(str(record["fingerprint"]), str(record["workload"]), environ)
    _refuse_another_workloads(path, str(record["workload"]))
    data = dict(record)
    data.setdefault("schema", RESULT_SCHEMA)
    data.setdefault("created", datetime.now(timezone.utc).isoformat(timespec="seconds"))
    text = json.dumps(data, indent=2, sort_keys=True) + "\n"
    hint = _WRITABLE
    # Before the missing levels are made (none under another user's directory) and after
    # (one someone else made meanwhile is theirs).
    _refuse_untrusted(path.parent, "cannot store the tuned result")
    try:
        # 0700 whatever the umask (XDG Base Directory spec: "create it with permission 0700")
        make_dirs(path.parent, 0o700)
    except OSError as err:
        raise TuneError(
            f"cannot store the tuned result in {path}: {err.strerror or err}", hint=hint
        ) from err
    _refuse_untrusted(path.parent, "cannot store the tuned result")
    try:
        write_atomic(path, text.encode("utf-8"))
    except ApplyError as err:
        raise TuneError(f"cannot store the tuned result: {err.message}", hint=hint) from err
    return path


def _refuse_untrusted(directory: Path, doing: str) -> None:
    """As root, TuneError unless no other user can change `directory` or the way to it, as
    `hwtune apply` requires of its output (`hwtune.fs.guard.check_directory`): with
    $XDG_STATE_HOME in a shared /tmp, another user's `hwtune` link there made root's tune
    write (and --forget remove) results in any directory they chose."""
    try:
        check_directory(directory, option="HWTUNE_TUNED_DIR")
    except ApplyError as err:
        raise TuneError(f"{doing}: {err.message}", hint=err.hint) from err


def _refuse_another_workloads(path: Path, workload: str) -> None:
    """File names fold odd characters to "_" (`builtin:cnn` and `--name builtin_cnn` share
    one): never replace the result of another workload."""
    held = _held_workload(path)
    if held is not None and held != workload:
        raise TuneError(
            f"{path} holds the result of workload {held!r}; storing {workload!r} there "
            "would replace it",
            hint="choose another --name",
        )


def _held_workload(path: Path) -> str | None:
    """The workload whose result `path` holds; None when there is no usable result there (no
    file, a damaged one, or one from before results named their workload): replacing or
    removing such a file loses nothing another workload could use."""
    try:
        if not path.is_file():
            return None
        held = read_result(path).get("workload")
    except OSError:  # a name this file system cannot hold: no file there
        return None
    except TuneError:
        return None
    return held if isinstance(held, str) else None


def read_result(path: Path, fingerprint: str | None = None) -> dict[str, Any]:
    """The stored result in `path`, checked (see the module docstring); TuneError naming the
    file and what is wrong when it is not one plan() can use.

    `fingerprint`: the hardware it is looked up for. The directory a file lies in is only its
    name; the result's own "fingerprint" (the tuner has written it since the first version,
    and save_result names the directory after it) says where it was measured, and a file
    copied or moved into another machine's directory, or one that does not say, is refused.
    """
    text = _read_text(path)
    try:
        data = json.loads(text, parse_constant=_refuse_constant)
    except json.JSONDecodeError as err:
        raise TuneError(
            f"{path}: line {err.lineno}: not valid JSON: {err.msg}", hint=_REDO
        ) from err
    except (ValueError, RecursionError) as err:
        # NaN/Infinity (not JSON), an integer of over 4300 digits (int() refuses it), or
        # arrays nested deeper than the interpreter's stack.
        raise TuneError(f"{path}: not valid JSON: {str(err)[:100]}", hint=_REDO) from None
    if (
        not isinstance(data, dict)
        or type(data.get("schema")) is not int
        or data.get("schema") != RESULT_SCHEMA
        or not isinstance(data.get("settings"), dict)
        or not isinstance(data.get("ratio"), (int, float))
        or isinstance(data.get("ratio"), bool)
    ):
        raise TuneError(
            f"{path}: not a tuned result of schema {RESULT_SCHEMA} (needs 'settings', 'ratio')",
            hint=_REDO,
        )
    problem = _ratio_problem(data["ratio"]) or next(
        (
            f"setting {key!r}: {why}"
            for key, value in data["settings"].items()
            if (why := _setting_problem(key, value))
        ),
        None,
    )
    if problem is None and fingerprint is not None:
        problem = _fingerprint_problem(data.get("fingerprint"), fingerprint)
    if problem:
        raise TuneError(f"{path}: {problem}; the whole result is ignored", hint=_REDO)
    return data


def _fingerprint_problem(recorded: object, fingerprint: str) -> str | None:
    """Why a result recording `recorded` is not one measured on `fingerprint`'s hardware."""
    if recorded == fingerprint:
        return None
    if not isinstance(recorded, str):
        return "it records no hardware fingerprint, so where it was measured is unknown"
    return f"measured on hardware {_show(recorded)}, not this one ({fingerprint})"


def _read_text(path: Path) -> str:
    """The file's text: a trusted regular file of at most MAX_RESULT_BYTES, UTF-8."""
    try:
        data = read_bounded(path, MAX_RESULT_BYTES, check_owner=True)
    except RefusedFile as err:
        raise TuneError(f"{err.message}: not used as a tuned result", hint=_REDO) from None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as err:
        raise TuneError(
            f"{path}: not UTF-8 text (byte {err.start}: {data[err.start : err.start + 1]!r})",
            hint=_REDO,
        ) from None


def _refuse_constant(name: str) -> object:
    raise ValueError(f"{name} is not a JSON number")


def _ratio_problem(ratio: float) -> str | None:
    try:
        value = float(ratio)
    except OverflowError:  # an integer beyond any float
        value = math.inf
    if not math.isfinite(value) or value <= 0:
        return f"ratio {str(ratio)[:20]} is not a positive finite number"
    return None


def _show(value: object) -> str:
    if isinstance(value, (dict, list)):  # repr of a deeply nested one could recurse too far
        return "a JSON object" if isinstance(value, dict) else "a JSON array"
    text = repr(value if not isinstance(value, str) else value[:60])
    return text if len(text) <= 40 else text[:40] + "…"


def _setting_problem(key: object, value: object) -> str | None:
    """Why plan() cannot take `value` for `key`; None when it can."""
    if key in _COUNT_KEYS:
        if type(value) is not int or not 1 <= value <= _MAX_COUNT:
            return f"{_show(value)} is not a count from 1 to {_MAX_COUNT}"
        return None
    if isinstance(key, str) and key in _CHOICES:
        if not any(value == c and type(value) is type(c) for c in _CHOICES[key]):
            choices = _CHOICES[key]
            shown = ", ".join(c if isinstance(c, str) else json.dumps(c) for c in choices)
            return f"{_show(value)} is not one of {shown}"
        return None
    return "not a knob the tuner searches; only those are taken from a tuned result"


def find_result(
    fingerprint: str, workload: str, *, environ: Mapping[str, str] | None = None
) -> Path | None:
    """The result file of `workload` on this hardware; None when it was not tuned here.

    Something else where a result belongs (a directory, a dangling symlink) is a TuneError
    naming it.
    """
    path = result_path(fingerprint, workload, environ)
    try:
        if path.is_file():
            return path
        if os.path.lexists(path):
            raise TuneError(f"{path}: {_what(path)}, not a tuned result", hint=_REDO)
        if os.path.lexists(path.parent) and not path.parent.is_dir():
            raise TuneError(f"{path.parent}: not a directory", hint=_REDO)
    except OSError as err:  # a name longer than this file system's, a directory not searchable
        raise TuneError(f"{path}: cannot be looked up: {err.strerror or err}") from err
    return None


def forget(
    fingerprint: str, workload: str | None = None, *, environ: Mapping[str, str] | None = None
) -> list[Path]:
    """Remove the stored result of `workload` on this hardware (every workload's when None);
    the files removed. The file named for `workload` is kept when it holds another workload's
    result (names fold odd characters to `_`: `a:b` and `a_b` share `a_b.json`)."""
    directory = tuned_dir(environ) / _SAFE.sub("_", fingerprint)
    _refuse_untrusted(directory, "cannot remove the tuned result")
    if workload is not None:
        path = result_path(fingerprint, workload, environ)
        paths = [path] if _held_workload(path) in (None, workload) else []
    else:
        try:
            paths = sorted(p for p in directory.iterdir() if p.suffix == ".json")
        except FileNotFoundError:
            return []
        except OSError as err:
            raise TuneError(f"{directory}: cannot list: {err.strerror or err}") from err
    removed: list[Path] = []
    for path in paths:
        try:
            path.unlink()
        except FileNotFoundError:
            continue
        except OSError as err:
            raise TuneError(f"cannot remove {path}: {err.strerror or err}") from err
        removed.append(path)
    return removed


def _what(path: Path) -> str:
    try:
        mode = path.stat().st_mode
    except OSError as err:
        if path.is_symlink() and isinstance(err, FileNotFoundError):
            return "a dangling symlink"
        return f"cannot be read ({err.strerror or err})"
    return "a directory" if stat.S_ISDIR(mode) else "not a regular file"
