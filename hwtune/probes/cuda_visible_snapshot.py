"""CUDA_VISIBLE_DEVICES in a snapshot: what `hwtune snapshot` saw, for `detect --root` later.

A snapshot's limits are its own files', never the caller's (hwtune.probes.root.live_environ):
its CPU affinity is its proc/self/status. The GPUs a scheduler left the snapshotting process
(Slurm's or Kubernetes' CUDA_VISIBLE_DEVICES, with CUDA_DEVICE_ORDER) are the same kind of
limit, so the snapshot records them in `SNAPSHOT_NAME`, and detect on the copy plans on the
GPUs the process could see, as the live detect did. A snapshot without the file was taken with
the variable unset (or by an hwtune before this file existed): all GPUs are visible.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path

from hwtune.probes.cuda_visible import ORDER_VARIABLE, VARIABLE
from hwtune.probes.issues import IssueLog
from hwtune.probes.root import is_file, read_bytes

SNAPSHOT_NAME = "cuda_visible_devices.json"
# Two short strings: a list of 64 MIG UUIDs (44 characters each) is under 3 KiB.
_MAX_BYTES = 64 * 1024


def snapshot_bytes(environ: Mapping[str, str]) -> bytes | None:
    """The file that records `environ`'s variables; None when CUDA_VISIBLE_DEVICES is unset
    (nothing to record: every GPU is visible)."""
    if VARIABLE not in environ:
        return None
    recorded = {name: environ[name] for name in (VARIABLE, ORDER_VARIABLE) if name in environ}
    return (json.dumps(recorded, indent=2) + "\n").encode()


def read_snapshot(root: Path, issues: IssueLog) -> dict[str, str]:
    """The variables a snapshot under `root` recorded ({} when it recorded none). A file that
    is not a JSON object of strings is an issue naming it, and is not used."""
    if not is_file(root, SNAPSHOT_NAME):
        return {}
    try:
        data = json.loads(read_bytes(root, SNAPSHOT_NAME, limit=_MAX_BYTES))
    except (OSError, UnicodeDecodeError, ValueError) as err:
        issues.add("gpu", f"not used: {err}", path=SNAPSHOT_NAME)
        return {}
    known = (VARIABLE, ORDER_VARIABLE)
    if (
        not isinstance(data, dict)
        or VARIABLE not in data
        or any(name not in known or not isinstance(value, str) for name, value in data.items())
    ):
        issues.add(
            "gpu",
            f"not used: not an object of {VARIABLE} (and {ORDER_VARIABLE}) strings",
            path=SNAPSHOT_NAME,
        )
        return {}
    return dict(data)
