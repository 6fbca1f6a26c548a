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
"""

from __future__ import annotations

import json
import os
import re
import tempfile
from collections.abc import Mapping
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from hwtune.errors import TuneError
from hwtune.models.profile import Setting

RESULT_SCHEMA = 1
_SAFE = re.compile(r"[^A-Za-z0-9._-]")


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
    """The `measured` mapping for plan() from a stored record."""
    ratio = float(record["ratio"])
    reason = f"measured: {ratio:.2f}× over the rule's choice"
    return {
        key: Setting(value, reason, "measured") for key, value in record["settings"].items()
    }


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
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=".hwtune-tmp-", dir=path.parent)
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as handle:
                handle.write(text)
                handle.flush()
                os.fsync(handle.fileno())
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        dir_fd = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)
    except OSError as err:
        raise TuneError(
            f"cannot store the tuned result in {path}: {err.strerror or err}",
            hint="set HWTUNE_TUNED_DIR to a writable directory",
        ) from err
    return path


def read_result(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as err:
        raise TuneError(
            f"{path}: line {err.lineno}: not valid JSON: {err.msg}",
            hint="delete the file or run `hwtune tune` again",
        ) from err
    except OSError as err:
        raise TuneError(f"{path}: cannot read: {err.strerror or err}") from err
    if (
        not isinstance(data, dict)
        or data.get("schema") != RESULT_SCHEMA
        or not isinstance(data.get("settings"), dict)
        or not isinstance(data.get("ratio"), (int, float))
    ):
        raise TuneError(
            f"{path}: not a tuned result of schema {RESULT_SCHEMA} (needs 'settings', 'ratio')",
            hint="delete the file or run `hwtune tune` again",
        )
    return data


def find_result(
    fingerprint: str,
    workload: str | None = None,
    *,
    environ: Mapping[str, str] | None = None,
) -> Path | None:
    """The result file for this fingerprint and workload; with no workload, the newest."""
    if workload is not None:
        path = result_path(fingerprint, workload, environ)
        return path if path.is_file() else None
    directory = tuned_dir(environ) / _SAFE.sub("_", fingerprint)
    try:
        candidates = [p for p in directory.iterdir() if p.suffix == ".json" and p.is_file()]
    except OSError:
        return None
    return max(candidates, key=lambda p: (p.stat().st_mtime_ns, p.name), default=None)


def load_measured(
    fingerprint: str,
    workload: str | None = None,
    *,
    mode: str | None = None,
    environ: Mapping[str, str] | None = None,
) -> dict[str, Setting]:
    """What `hwtune tune` measured best on this hardware, as plan()'s `measured` argument.

    `workload` is a key ("builtin:cnn", a `--name`, or the "cmd:…" key tune printed); None
    takes the most recently stored result for this fingerprint. Empty when nothing was tuned,
    or when the result was tuned for another `mode` than the one asked for. A corrupt file
    raises TuneError naming it.
    """
    path = find_result(fingerprint, workload, environ=environ)
    if path is None:
        return {}
    record = read_result(path)
    if record.get("fingerprint") != fingerprint:
        return {}
    if mode is not None and record.get("mode") not in (None, mode):
        return {}
    return measured_settings(record)
