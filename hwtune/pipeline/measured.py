"""Tuned results on disk, one JSON file per hardware fingerprint and workload.

    $HWTUNE_TUNED_DIR                         when set (tests, a daemon's shared directory)
    $XDG_STATE_HOME/hwtune/tuned/             else (default ~/.local/state/hwtune/tuned/)
        <fingerprint>/<workload>.json

State rather than cache: a result costs minutes of measuring to make again (XDG Base Directory
spec: "state data that should persist between application restarts"). Files are written
atomically (temporary file, fsync, rename, fsync of the directory), so a reader sees the old
result or the new one. `load_measured` turns a result into the `measured` mapping `plan()`
takes, each Setting with source "measured" and the reason "measured: 1.31× over the rule's
choice".

A result file is input like any other: it may be truncated, hand-edited, written by another
version, or planted. Before anything reaches plan(), the whole file is checked: a regular
file (never a link, FIFO or device) of at most MAX_RESULT_BYTES, owned by root or the user
running hwtune and writable by no one else (`hwtune.fs.trusted_read`), UTF-8 JSON, schema 1, a
positive finite ratio, and every setting one of the knobs the tuner searches, with a value of
that knob's grammar (`_setting_problem`): no other variable, however harmless its name looks
(a planted result must not set CUDA_INJECTION64_PATH, NCCL_NET_PLUGIN, GLIBC_TUNABLES,
XLA_FLAGS or HOME for every job `hwtune apply` writes a profile for). Anything else
is a TuneError naming the file and what is wrong, and the whole result is ignored, never a
part of it (a measurement holds for its combination of settings). `hwtune plan`, `apply`,
`exec` and `configure()` turn that error into a warning or note and plan with the rules.
"""

from __future__ import annotations

import json
import math
import os
import re
import stat
from collections.abc import Callable, Mapping
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from hwtune.errors import ApplyError, HwtuneError, TuneError
from hwtune.fs.atomic import write_atomic
from hwtune.fs.trusted_read import RefusedFile, read_bounded
from hwtune.models.cpulist import MAX_CPU
from hwtune.models.profile import Profile, Setting

RESULT_SCHEMA = 1
_SAFE = re.compile(r"[^A-Za-z0-9._-]")
_REDO = "delete the file or run `hwtune tune` again"
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
_CHOICES: dict[str, tuple[str | None, ...]] = {
    "jit.level": _JIT_LEVELS,
    "jit": _JIT_LEVELS,
    "precision.enabled": _PRECISIONS,
    "precision": _PRECISIONS,
    "env.TF_ENABLE_ONEDNN_OPTS": ("0", "1"),
}


def tuned_dir(environ: Mapping[str, str] | None = None) -> Path:
    env = os.environ if environ is None else environ
    if env.get("HWTUNE_TUNED_DIR"):
        return Path(env["HWTUNE_TUNED_DIR"])
    state = env.get("XDG_STATE_HOME") or os.path.join(
        env.get("HOME") or os.path.expanduser("~"), ".local", "state"
    )
    return Path(state) / "hwtune" / "tuned"


def file_name(workload: str) -> str:
    """`builtin:cnn` -> `builtin_cnn.json`; any other odd character becomes `_`."""
    return _SAFE.sub("_", workload) + ".json"


def result_path(fingerprint: str, workload: str, environ: Mapping[str, str] | None = None) -> Path:
    return tuned_dir(environ) / _SAFE.sub("_", fingerprint) / file_name(workload)


def measured_settings(record: Mapping[str, Any]) -> dict[str, Setting]:
    """The `measured` mapping for plan() from a stored record (checked by read_result)."""
    ratio = float(record["ratio"])
    reason = f"measured: {ratio:.2f}× over the rule's choice"
    return {key: Setting(value, reason, "measured") for key, value in record["settings"].items()}


def settings_from_knobs(knobs: Mapping[str, Any], *, precision_searched: bool) -> dict[str, Any]:
    """TrialConfig.knobs() -> plan() keys. Knobs left to TensorFlow (None) are not stored,
    nor the precision policy when precision was not part of the search."""
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
    return settings


def save_result(record: Mapping[str, Any], environ: Mapping[str, str] | None = None) -> Path:
    """Write `record` (made by hwtune.tune.tuner) atomically; returns the file."""
    path = result_path(str(record["fingerprint"]), str(record["workload"]), environ)
    data = dict(record)
    data.setdefault("schema", RESULT_SCHEMA)
    data.setdefault("created", datetime.now(timezone.utc).isoformat(timespec="seconds"))
    text = json.dumps(data, indent=2, sort_keys=True) + "\n"
    hint = "set HWTUNE_TUNED_DIR to a writable directory"
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise TuneError(
            f"cannot store the tuned result in {path}: {err.strerror or err}", hint=hint
        ) from err
    try:
        write_atomic(path, text.encode("utf-8"))
    except ApplyError as err:
        raise TuneError(f"cannot store the tuned result: {err.message}", hint=hint) from err
    return path


def read_result(path: Path) -> dict[str, Any]:
    """The stored result in `path`, checked (see the module docstring); TuneError naming the
    file and what is wrong when it is not one plan() can use."""
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
    if problem:
        raise TuneError(f"{path}: {problem}; the whole result is ignored", hint=_REDO)
    return data


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
            shown = ", ".join("null" if c is None else c for c in _CHOICES[key])
            return f"{_show(value)} is not one of {shown}"
        return None
    return "not a knob the tuner searches; only those are taken from a tuned result"


def find_result(
    fingerprint: str,
    workload: str | None = None,
    *,
    environ: Mapping[str, str] | None = None,
) -> Path | None:
    """The result file for this fingerprint and workload; with no workload, the newest.

    None when nothing was tuned. Something else where a result belongs (a directory, a dangling
    symlink, an unreadable directory) is a TuneError naming it, unless another, regular file is
    there to use.
    """
    found = candidates(fingerprint, workload, environ=environ)
    return found[0] if found else None


def candidates(
    fingerprint: str,
    workload: str | None = None,
    *,
    environ: Mapping[str, str] | None = None,
) -> list[Path]:
    """The result files for this fingerprint (and workload), newest first; find_result's
    errors."""
    if workload is not None:
        path = result_path(fingerprint, workload, environ)
        if path.is_file():
            return [path]
        if os.path.lexists(path):
            raise TuneError(f"{path}: {_what(path)}, not a tuned result", hint=_REDO)
        return []
    directory = tuned_dir(environ) / _SAFE.sub("_", fingerprint)
    try:
        entries = [p for p in directory.iterdir() if p.suffix == ".json"]
    except FileNotFoundError:
        if directory.is_symlink():
            raise TuneError(f"{directory}: a dangling symlink, not a directory") from None
        return []  # nothing tuned on this hardware
    except OSError as err:
        raise TuneError(
            f"{directory}: cannot list the tuned results: {err.strerror or err}"
        ) from err
    regular: list[tuple[int, str, Path]] = []
    for path in entries:
        try:
            info = path.stat()
        except OSError:
            continue  # dangling, or gone since the listing
        if stat.S_ISREG(info.st_mode):
            regular.append((info.st_mtime_ns, path.name, path))
    if regular:
        return [path for _, _, path in sorted(regular, reverse=True)]
    if entries:
        first = min(entries)
        raise TuneError(f"{first}: {_what(first)}, not a tuned result", hint=_REDO)
    return []


def _what(path: Path) -> str:
    try:
        mode = path.stat().st_mode
    except OSError as err:
        if path.is_symlink() and isinstance(err, FileNotFoundError):
            return "a dangling symlink"
        return f"cannot be read ({err.strerror or err})"
    return "a directory" if stat.S_ISDIR(mode) else "not a regular file"


def load_measured(
    fingerprint: str,
    workload: str | None = None,
    *,
    mode: str | None = None,
    model: str | None = None,
    environ: Mapping[str, str] | None = None,
) -> dict[str, Setting]:
    """What `hwtune tune` measured best on this hardware, as plan()'s `measured` argument.

    `workload` is a key ("builtin:cnn", a `--name`, or the "cmd:…" key tune printed); None
    takes the most recently stored result for this fingerprint that fits `mode` and `model`.
    A result fits a model kind when either side is "unknown" or they are the same: XLA, the
    setting the kind decides, measured on a dense model says nothing about a convolutional
    one. Empty when nothing fitting was tuned. A corrupt, truncated, wrong-typed, oversized or
    unreadable file raises TuneError naming it and what is wrong (never another exception):
    callers ignore the result with a warning.
    """
    found = find_measured(fingerprint, workload, mode=mode, model=model, environ=environ)
    return found[1] if found else {}


def find_measured(
    fingerprint: str,
    workload: str | None = None,
    *,
    mode: str | None = None,
    model: str | None = None,
    environ: Mapping[str, str] | None = None,
) -> tuple[Path, dict[str, Setting]] | None:
    """`load_measured`, with the file the settings came from; None when nothing fits."""
    for path in candidates(fingerprint, workload, environ=environ):
        record = read_result(path)
        if _fits(record, fingerprint, mode, model):
            return path, measured_settings(record)
    return None


def apply_measured(
    profile: Profile,
    replan: Callable[[dict[str, Setting]], Profile],
    environ: Mapping[str, str] | None = None,
) -> tuple[Profile, str | None]:
    """`profile` planned again with what `hwtune tune` stored for its hardware, mode and
    model, and None; or, when the stored result cannot be used, `profile` as it is and why
    ("tuned results ignored: FILE: …"), for the caller to warn with. A damaged result, or one
    this machine cannot hold (an instance count beyond its cores), never stops a plan."""
    intent = profile.intent
    try:
        found = find_measured(
            profile.fingerprint, mode=intent.mode, model=intent.model, environ=environ
        )
    except HwtuneError as err:
        return profile, f"tuned results ignored: {err}"
    if found is None:
        return profile, None
    path, measured = found
    try:
        return replan(measured), None
    except HwtuneError as err:  # PlanError: e.g. more instances than this machine has cores
        return profile, f"tuned results ignored: {path}: {err}"


def _fits(
    record: Mapping[str, Any], fingerprint: str, mode: str | None, model: str | None
) -> bool:
    if record.get("fingerprint") != fingerprint:
        return False
    if mode is not None and record.get("mode") not in (None, mode):
        return False
    tuned_for = record.get("model") or "unknown"  # results from before --model: unknown
    return model in (None, "unknown") or tuned_for in ("unknown", model)
