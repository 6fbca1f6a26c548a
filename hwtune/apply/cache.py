"""The profile cache that keeps `configure()` and `hwtune env` off the probes.

One JSON file per intent under `$XDG_CACHE_HOME/hwtune/` holds what a process needs at start
(the environment with reasons, thread counts, JIT level, precision policy, this instance's
CPUs) together with the fingerprint it was planned under (`hwtune.apply.fingerprint`). A lookup
recomputes the fingerprint and uses the file only when it is equal; otherwise it detects and
plans again and rewrites the file atomically (ranks starting together may race; each writes a
complete file and the last rename wins).

The warm path imports only the standard library's json, os and sys plus hwtune.apply.fingerprint
and hwtune.pipeline.ranks: no pydantic, psutil, dataclasses, probes or planner.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from typing import Any

from hwtune.apply.fingerprint import fingerprint

CACHE_SCHEMA = 2  # 2: the payload carries tf_data, data_format and distribution
INTENT_KEYS = ("mode", "instances", "instance", "precision", "model")


def cache_dir(environ: Mapping[str, str]) -> str:
    base = environ.get("XDG_CACHE_HOME", "")
    if not base or not os.path.isabs(base):  # XDG spec: ignore relative values
        base = os.path.join(environ.get("HOME") or os.path.expanduser("~"), ".cache")
    return os.path.join(base, "hwtune")


def cache_key(explicit: Mapping[str, Any], rank: tuple[int, int] | None) -> str:
    """A file-name-safe key of the intent as asked (resolution happens when planning)."""
    parts = [f"{k}={explicit[k]}" for k in INTENT_KEYS if explicit.get(k) is not None]
    if rank is not None:
        parts.append(f"rank={rank[0]}of{rank[1]}")
    text = "_".join(parts) or "default"
    return "".join(c if c.isalnum() or c in "=_-." else "-" for c in text)


def cache_path(environ: Mapping[str, str], key: str) -> str:
    return os.path.join(cache_dir(environ), f"configure-{key}.json")


def load(path: str, current: dict[str, object]) -> dict[str, Any] | None:
    """The cached payload when it was planned under the `current` fingerprint, else None."""
    try:
        with open(path, "rb") as handle:
            data = json.loads(handle.read())
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict) or data.get("schema") != CACHE_SCHEMA:
        return None
    # Compare in JSON form: the file holds lists where fresh data may hold other sequences.
    if data.get("fingerprint") != json.loads(json.dumps(current)):
        return None
    payload = data.get("payload")
    return payload if isinstance(payload, dict) else None


def store(path: str, current: dict[str, object], payload: dict[str, Any]) -> None:
    """Write the cache file; a failure (read-only home, full disk) only costs speed."""
    from pathlib import Path

    from hwtune.errors import ApplyError
    from hwtune.fs.atomic import write_atomic

    data = {"schema": CACHE_SCHEMA, "fingerprint": current, "payload": payload}
    try:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        write_atomic(Path(path), (json.dumps(data, indent=1) + "\n").encode(), durable=False)
    except (OSError, ApplyError):
        pass


def payload_from_planned(planned: Any) -> dict[str, Any]:
    """What a process start needs, from a `hwtune.pipeline.source.Planned` (cold path)."""
    from hwtune.apply.render import env_entries, thread_counts

    profile = planned.profile
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
    }


def lookup(
    explicit: Mapping[str, Any], environ: Mapping[str, str], *, use_cache: bool = True
) -> tuple[dict[str, Any], bool, str]:
    """(payload, came from the cache, cache file) for this intent on the live machine."""
    from hwtune.pipeline.ranks import local_rank

    rank = local_rank(environ)
    key = cache_key(explicit, (rank.rank, rank.size) if rank else None)
    path = cache_path(environ, key)
    current = fingerprint(environ)
    if use_cache:
        payload = load(path, current)
        if payload is not None:
            return payload, True, path
    from hwtune.pipeline.source import plan_for

    payload = payload_from_planned(plan_for(dict(explicit), environ))
    store(path, current, payload)
    return payload, False, path
