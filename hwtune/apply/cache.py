"""The profile cache that keeps `configure()` and `hwtune env` off the probes.

One JSON file per request under `$XDG_CACHE_HOME/hwtune/` holds what a process needs at start
(the environment with reasons, thread counts, JIT level, precision policy, this instance's
CPUs) together with the fingerprint it was planned under (`hwtune.apply.fingerprint`) and the
request itself. A lookup recomputes the fingerprint and uses the file only when it and the
request are equal; otherwise it detects and plans again and rewrites the file atomically (ranks
starting together may race; each writes a complete file and the last rename wins). A plan
that failed for what the fingerprint and request cover is kept the same way (`failed` in
place of `payload`) and raised again (`store_failure`).

The file name is a readable slug of the request plus the CRC-32 of its exact form: the slug
alone folded `workload="a:b"`, `"a/b"`, `"a b"` and `"a-b"` into one file, so one workload's
measured settings reached another. The request stored in the file settles what the CRC cannot
(a collision is a miss, never another request's profile).

The file is input, not trust (issue 15): it is read with `hwtune.fs.trusted_read` (a regular
file, never a link, FIFO or device, at most MAX_CACHE_BYTES), and one owned by another user or
writable by others is ignored with a warning and rebuilt: hwtune runs as root, and the cache
says which variables a job starts with. Writing is checked too: as root the cache is not
written through a link or into a directory another user could change (`store`); that, or a
directory it cannot write (read-only, full), is noted once per process.

The warm path imports only the standard library's json, os, sys and zlib plus hwtune.paths (where
the file lives: XDG resolution is done there, once), hwtune.apply.fingerprint,
hwtune.fs.trusted_read and hwtune.pipeline.ranks: no pydantic, psutil, dataclasses, probes or
planner.
"""

from __future__ import annotations

import json
import os
import zlib
from collections.abc import Mapping
from typing import Any, TypeGuard

from hwtune import paths
from hwtune.apply.fingerprint import fingerprint
from hwtune.errors import stderr_line
from hwtune.fs.trusted_read import RefusedFile, read_bounded

# 2: the payload carries tf_data, data_format and distribution; 3: the file holds the request
# (a file of 2 was keyed by a lossy slug and may hold another request's profile); 4: the
# payload carries detection_issues, so `hwtune env` warns from the cache as when it plans.
CACHE_SCHEMA = 4
# A cache file is a few KB (a dozen variables with their reasons, notes, CPU lists); one of a
# MiB is not one of ours, and the bound keeps a huge planted file (or /dev/zero, refused anyway
# as a device) from costing memory at every job start.
MAX_CACHE_BYTES = 1 << 20
INTENT_KEYS = ("mode", "instances", "instance", "precision", "model")


def cache_dir(environ: Mapping[str, str]) -> str:
    return paths.cache_dir(environ)


# The slug is for people listing the directory; the CRC makes the name. Bounded so that a long
# workload name keeps the file name under NAME_MAX (255 bytes on Linux file systems).
_MAX_SLUG = 80


def request_identity(explicit: Mapping[str, Any], rank: tuple[int, int] | None) -> str:
    """The request as asked, exactly, in one canonical JSON text (resolution happens when
    planning): two requests share it only when they are the same request."""
    asked = sorted((k, v) for k, v in explicit.items() if v is not None)
    return json.dumps({"asked": asked, "rank": rank}, sort_keys=True, ensure_ascii=False)


def cache_key(explicit: Mapping[str, Any], rank: tuple[int, int] | None) -> str:
    """A file-name-safe key of the request: "default" for none, else a readable slug and the
    CRC-32 of `request_identity`, so that requests the slug folds together still differ."""
    parts = [f"{k}={v}" for k, v in explicit.items() if v is not None]
    if rank is not None:
        parts.append(f"rank={rank[0]}of{rank[1]}")
    if not parts:
        return "default"
    slug = "".join(
        c if c.isascii() and (c.isalnum() or c in "=_-.") else "-" for c in "_".join(parts)
    )
    identity = request_identity(explicit, rank).encode("utf-8", "surrogateescape")
    return f"{slug[:_MAX_SLUG]}-{zlib.crc32(identity):08x}"


def cache_path(environ: Mapping[str, str], key: str) -> str:
    return os.path.join(cache_dir(environ), f"configure-{key}.json")


def load(
    path: str, current: dict[str, object], request: str | None = None
) -> dict[str, Any] | None:
    """The cached payload when it was planned for `request` (`request_identity`) under the
    `current` fingerprint, else None."""
    return check(path, current, request)[0]


def check(
    path: str, current: dict[str, object], request: str | None = None
) -> tuple[dict[str, Any] | None, str | None]:
    """(the cached payload or None, why the file was refused or None). A missing, stale or
    damaged file, or one planned for another request, is only a miss; one refused by
    `read_bounded` (a link, a FIFO, a device, too large, another user's or writable by others)
    is a miss with a reason to warn about."""
    data, refused = _entry(path, current, request)
    payload = None if data is None else data.get("payload")
    return (payload if _well_formed(payload) else None), refused


def _entry(
    path: str, current: dict[str, object], request: str | None
) -> tuple[dict[str, Any] | None, str | None]:
    """The cache file's data when it is for `request` under `current`, and why it was
    refused (`check`)."""
    try:
        raw = read_bounded(path, MAX_CACHE_BYTES, check_owner=True)
    except RefusedFile as err:
        return None, None if err.missing else err.message
    try:
        data = json.loads(raw)
    except (ValueError, RecursionError):  # not JSON, or nested beyond the interpreter's stack
        return None, None
    if not isinstance(data, dict) or data.get("schema") != CACHE_SCHEMA:
        return None, None
    if data.get("request") != request:
        return None, None
    # Compare in JSON form: the file holds lists where fresh data may hold other sequences.
    if data.get("fingerprint") != json.loads(json.dumps(current)):
        return None, None
    return data, None


# The errors a plan fails with that follow from what the fingerprint and the request cover
# (the hardware, config files, HWTUNE_*, the rank): the same inputs fail the same way, so
# the failure is cached like a profile. A rank whose plan fails (LOCAL_WORLD_SIZE=8 on two
# cores) otherwise ran detection again at every start, probes and nvidia-smi included.
_CACHED_FAILURES = ("PlanError", "ConfigError", "ModelError", "KnowledgeError")


def _failure(data: Mapping[str, Any], keywords: bool) -> Exception | None:
    """The error a cache entry recorded (`store_failure`), to raise again; else None. Only
    for the same caller: configure()'s errors name its keywords, `hwtune env`'s its flags."""
    from hwtune import errors

    failed = data.get("failed")
    if not isinstance(failed, dict) or failed.get("kind") not in _CACHED_FAILURES:
        return None
    if failed.get("keywords") is not keywords:
        return None
    message, hint = failed.get("message"), failed.get("hint")
    if not isinstance(message, str) or not (hint is None or isinstance(hint, str)):
        return None
    kind: type[errors.HwtuneError] = getattr(errors, failed["kind"])
    return kind(message, hint=hint)


# The containers every reader of a payload unpacks (configure(), `hwtune env`).
_SHAPES: dict[str, type] = {
    "intent": dict,
    "env": list,
    "threads": dict,
    "cpus": list,
    "gpus": list,
    "notes": list,
    "tf_data": dict,
}


def _well_formed(payload: object) -> TypeGuard[dict[str, Any]]:
    """A payload as `payload_from_planned` writes it: a hand-edited file whose fingerprint
    still matches is a miss (planned afresh), never a traceback at every job start."""
    if not isinstance(payload, dict):
        return False
    if not all(isinstance(payload.get(key), shape) for key, shape in _SHAPES.items()):
        return False
    return all(
        isinstance(entry, list) and len(entry) == 4 and all(isinstance(x, str) for x in entry)
        for entry in payload["env"]
    )


def store(
    path: str, current: dict[str, object], payload: dict[str, Any], request: str | None = None
) -> str | None:
    """Write the cache file for `request` (`request_identity`); None when written, else why
    not, in a line. A failure (a read-only home, a full disk, a refusal) only costs speed: the
    profile is planned at every start.

    As root the directory must be one no other user can change, as `hwtune apply` requires of
    its output (`hwtune.fs.guard.check_directory`): with $XDG_CACHE_HOME in a shared /tmp,
    another user's `hwtune` link there made root write its files in any directory they
    chose. Checked before the missing levels are made (none is made under another user's
    directory) and again after (one someone else made meanwhile is theirs)."""
    data = {"schema": CACHE_SCHEMA, "request": request, "fingerprint": current, "payload": payload}
    return _write(path, data)


def store_failure(
    path: str,
    current: dict[str, object],
    err: Exception,
    request: str | None = None,
    *,
    keywords: bool = False,
) -> str | None:
    """Write, for `request`, that planning failed with `err` (one of _CACHED_FAILURES), as
    `store` writes a profile; a later start raises it again without detecting."""
    from hwtune.errors import HwtuneError

    if not isinstance(err, HwtuneError) or type(err).__name__ not in _CACHED_FAILURES:
        return None
    failed = {
        "kind": type(err).__name__,
        "message": err.message,
        "hint": err.hint,
        "keywords": keywords,
    }
    data = {"schema": CACHE_SCHEMA, "request": request, "fingerprint": current, "failed": failed}
    return _write(path, data)


def _write(path: str, data: dict[str, Any]) -> str | None:
    from pathlib import Path

    from hwtune.errors import ApplyError
    from hwtune.fs.atomic import write_atomic
    from hwtune.fs.guard import check_directory
    from hwtune.fs.trust import make_dirs

    directory = Path(path).parent
    try:
        check_directory(directory)
        # 0700 whatever the umask (XDG Base Directory spec: "create it with permission 0700")
        make_dirs(directory, 0o700)
        check_directory(directory)
    except ApplyError as err:
        return err.message
    except OSError as err:
        return _unwritable(directory, err)
    try:
        write_atomic(Path(path), (json.dumps(data, indent=1) + "\n").encode(), durable=False)
    except OSError as err:  # an ApplyError, from the OSError that caused it
        return _unwritable(directory, err.__cause__ if isinstance(err.__cause__, OSError) else err)
    return None


def _unwritable(directory: object, err: OSError) -> str:
    """A read-only home, a full disk: said, since each start then plans afresh (slower),
    which nothing else would show."""
    return (
        f"cannot write in {directory}: {err.strerror or err}; every start plans the profile "
        "afresh until it can"
    )


# The directories whose cache this process could not write, already noted: a program calling
# configure() more than once is told once.
_NOTED: set[str] = set()


def _note(payload: dict[str, Any], note: str, command: str | None) -> dict[str, Any]:
    """`note` on stderr (as `command`'s warning) and among the payload's notes (where
    configure() and `hwtune env` show them)."""
    from hwtune.fs.streams import warn

    warn(stderr_line(command, "warning", note))
    return {**payload, "notes": [*payload.get("notes", []), note]}


def payload_from_planned(planned: Any) -> dict[str, Any]:
    """What a process start needs, from a `hwtune.pipeline.request.Planned` (cold path)."""
    from hwtune.apply.render import env_entries, thread_counts
    from hwtune.pipeline.request import detection_issues

    profile = planned.profile
    found = detection_issues(planned.hardware)
    intra, inter = thread_counts(profile)
    return {
        "intent": {k: getattr(profile.intent, k) for k in INTENT_KEYS},
        "env": [[e.name, e.value, e.reason, e.source] for e in env_entries(profile)],
        "threads": {"intra_op": intra, "inter_op": inter},
        "jit": str(profile.jit.level.value),
        "precision": profile.precision.enabled,
        "precision_reason": profile.precision.reason,
        "cpus": list(profile.instance.cpus),
        "gpus": list(profile.instance.gpus),
        # MiB per visible GPU for tf.config.set_logical_device_configuration, or None.
        "gpu_memory_limit_mb": profile.gpu_memory.value if profile.gpu_memory else None,
        "notes": list(planned.notes),
        # For hwtune.data_options() and the report: tf.data option name -> planned value.
        "tf_data": {
            name: getattr(profile.tf_data, name).value
            for name in profile.tf_data.__dataclass_fields__
        },
        "data_format": profile.data_format.value,
        "distribution": profile.distribution.strategy.value if profile.distribution else None,
        # [count, the first] when detection saw issues and the plan used fallbacks, else None.
        "detection_issues": list(found) if found is not None else None,
    }


def lookup(
    explicit: Mapping[str, Any],
    environ: Mapping[str, str],
    *,
    use_cache: bool = True,
    keywords: bool = False,
    command: str | None = None,
) -> tuple[dict[str, Any], bool, str]:
    """(payload, came from the cache, cache file) on the live machine for a request:
    `explicit` holds the `PlanRequest` fields asked for (mode, instances… workload, measured);
    `keywords`: they are configure()'s keyword arguments, so named in errors; `command`: the
    subcommand asking (`env`), for the prefix of its warning (None: a library caller)."""
    from hwtune.pipeline.ranks import local_rank, slurm_batch, uncounted_rank

    found = local_rank(environ)
    rank = (found.rank, found.size) if found else None
    keyed = dict(explicit)
    if found is not None:
        # The plan's notes and errors name the variables the rank came from: keyed by them
        # too, or Open MPI's rank 5 of 8 got the error cached for torchrun's, naming
        # LOCAL_WORLD_SIZE. Already in hand (local_rank read them): no file read, no cost.
        keyed["rank_from"] = ",".join(found.variables)
    # A rank variable without its count changes the plan's notes (request.resolve_share):
    # its own cache entry, or LOCAL_RANK=3's note stayed with the process that has none.
    uncounted = found.uncounted if found else uncounted_rank(environ)
    if uncounted is not None:
        keyed["uncounted"] = f"{uncounted}={environ[uncounted].strip()}"
    elif found is None and slurm_batch(environ):
        keyed["slurm_batch"] = True  # its note too
    # No home to keep the cache under (paths.home): planned every time, nothing stored.
    directory = paths.or_none(paths.cache_dir, environ)
    path = "" if directory is None else cache_path(environ, cache_key(keyed, rank))
    identity = request_identity(keyed, rank)
    current = fingerprint(environ)
    refused = None
    if use_cache and path:
        data, refused = _entry(path, current, identity)
        cached = None if data is None else data.get("payload")
        if _well_formed(cached):
            return cached, True, path
        failure = None if data is None else _failure(data, keywords)
        if failure is not None:
            raise failure
    from hwtune.pipeline.request import PlanRequest, profile_for

    given = {k: v for k, v in explicit.items() if v is not None}
    request = PlanRequest(environ, keywords=keywords, **given)
    try:
        planned = profile_for(request)
    except Exception as err:
        if path:
            store_failure(path, current, err, identity, keywords=keywords)
        raise
    payload = payload_from_planned(planned)
    unwritten = store(path, current, payload, identity) if path else None
    if refused:
        payload = _note(
            payload, f"the configure cache was ignored and rebuilt: {refused}", command
        )
    if unwritten and os.path.dirname(path) not in _NOTED:
        _NOTED.add(os.path.dirname(path))
        payload = _note(payload, f"the configure cache was not written: {unwritten}", command)
    return payload, False, path
