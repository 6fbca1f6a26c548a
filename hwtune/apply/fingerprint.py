"""A cheap fingerprint of everything a plan depends on, for the configure() profile cache.

`configure()` must cost at most ~30 ms over bare interpreter start, so this reads only a few
small kernel files, stats a few more and lists a few directories: no probes, no NVML, no
importlib.metadata, no dataclasses. Any change in what the planner looks at should change the
fingerprint; a spurious change only costs one re-plan. What it covers:

- CPUs: online CPUs, this process's affinity, the cgroup cpuset, CPU quota and memory limit of
  the cgroup and its ancestors (a container's limits often sit on a parent), NUMA nodes;
  host name and boot id (a cache directory shared over NFS must not leak between machines;
  anything changed across a reboot is picked up).
- GPUs: `/proc/driver/nvidia/gpus/*` (one entry per PCI device), the driver version, the
  `/dev/nvidia*` nodes, MIG capability nodes, and CUDA_VISIBLE_DEVICES/NVIDIA_VISIBLE_DEVICES,
  with CUDA_DEVICE_ORDER, which decides which GPUs the indices of CUDA_VISIBLE_DEVICES name
  (hwtune.probes.cuda_visible).
- TensorFlow: name, version and mtime of each TF-like `*.dist-info` on sys.path (a reinstall
  of the same version touches the mtime); the interpreter's prefix.
- Config: stat of config.toml (system and user), of knowledge files and of the tuner's stored
  results (mtime, ctime, size, inode), plus HWTUNE_*.
- hwtune's own version.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping

from hwtune import __version__, paths

# Distribution names whose presence or version changes a plan (tensorflow-cpu installs as
# "tensorflow_cpu-2.21.0.dist-info", PEP 427 name normalisation). No `re`: it is not
# imported at interpreter start and costs milliseconds.
_TF_DISTS = frozenset(
    {
        "tensorflow",
        "tensorflow_cpu",
        "tensorflow_gpu",
        "tensorflow_intel",
        "intel_tensorflow",
        "tf_nightly",
        "tf_nightly_cpu",
        "intel_extension_for_tensorflow",
        "keras",
        "tf_keras",
    }
)
_CGROUP_V1_DIRS = {
    "cpu": ("cpu,cpuacct", "cpu", "cpuacct,cpu"),
    "cpuset": ("cpuset",),
    "memory": ("memory",),
}
_CGROUP_FILES_V1 = {
    "cpu": ("cpu.cfs_quota_us", "cpu.cfs_period_us"),
    "cpuset": ("cpuset.effective_cpus", "cpuset.cpus"),
    "memory": ("memory.limit_in_bytes",),
}
_CGROUP_FILES_V2 = ("cpu.max", "cpuset.cpus.effective", "memory.max")


def _read(path: str, limit: int = 4096) -> str | None:
    try:
        with open(path, "rb") as handle:
            return handle.read(limit).decode("utf-8", "replace").strip()
    except OSError:
        return None


def _listdir(path: str) -> list[str]:
    try:
        return sorted(os.listdir(path))
    except OSError:
        return []


def _stat(path: str) -> list[int] | None:
    """What tells a changed file from the same one, from the one stat(2) call. The ctime is
    in it because mtime, size and inode can all come back: a same-size rewrite whose mtime is
    set back (`cp -p`, `rsync -a`, `tar x`, `touch -d`) kept the old cached profile, while the
    kernel sets the ctime to now on every write and utime, and no system call sets it back.

    Only regular files and directories of hwtune's inputs are stat'ed here (config files,
    knowledge files, tuned results, `*.dist-info` directories), never /proc or /sys files,
    whose ctime means nothing: those are read for their content instead. Reading a file does
    not change its ctime, so a cache stays warm."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return [st.st_mtime_ns, st.st_ctime_ns, st.st_size, st.st_ino]


def _cgroup_dir_chain(mount: str, cgroup_path: str) -> list[str]:
    """The cgroup's directory under `mount` and each ancestor up to the mount.

    Inside a container the path in /proc/self/cgroup may name the host's hierarchy while only
    a subtree is mounted; leading components are dropped until a directory exists.
    """
    parts = [p for p in cgroup_path.split("/") if p]
    while parts and not os.path.isdir(os.path.join(mount, *parts)):
        parts = parts[1:]
    chain = [os.path.join(mount, *parts[:n]) for n in range(len(parts), 0, -1)]
    return [*chain, mount]


def cgroup_state(root: str = "/") -> dict[str, str | None]:
    """The raw text of every limit file that applies to this process (file -> content)."""
    state: dict[str, str | None] = {}
    text = _read(os.path.join(root, "proc/self/cgroup"), 65536) or ""
    base = os.path.join(root, "sys/fs/cgroup")
    for line in text.splitlines():
        hierarchy, _, rest = line.partition(":")
        controllers, _, path = rest.partition(":")
        if hierarchy == "0" and not controllers:
            for directory in _cgroup_dir_chain(base, path):
                for name in _CGROUP_FILES_V2:
                    state[os.path.join(directory, name)] = _read(os.path.join(directory, name))
            continue
        for controller in controllers.split(","):
            for candidate in _CGROUP_V1_DIRS.get(controller, ()):
                mount = os.path.join(base, candidate)
                if not os.path.isdir(mount):
                    continue
                for directory in _cgroup_dir_chain(mount, path):
                    for name in _CGROUP_FILES_V1[controller]:
                        state[os.path.join(directory, name)] = _read(os.path.join(directory, name))
                break
    return state


def _tensorflow_dists() -> list[list[object]]:
    found: list[list[object]] = []
    seen: set[str] = set()
    for entry in sys.path:
        if not entry or entry in seen or not os.path.isdir(entry):
            continue
        seen.add(entry)
        for name in _listdir(entry):
            if not name.endswith(".dist-info"):
                continue
            dist, _, version = name[: -len(".dist-info")].partition("-")
            if dist.lower() in _TF_DISTS:
                found.append([entry, dist, version, _stat(os.path.join(entry, name))])
    return found


def config_paths(environ: Mapping[str, str]) -> list[str]:
    """The files the overrides are read from (kept equal to hwtune.pipeline.config's; a test
    checks)."""
    return list(paths.config_files(environ))


def _knowledge_files(environ: Mapping[str, str]) -> dict[str, list[int] | None]:
    shipped = os.path.join(os.path.dirname(os.path.dirname(__file__)), "knowledge", "data")
    dirs = [shipped, *paths.knowledge_dirs(environ)]
    files: dict[str, list[int] | None] = {}
    for directory in dirs:
        for name in _listdir(directory):
            if name.endswith(".json"):
                files[os.path.join(directory, name)] = _stat(os.path.join(directory, name))
    return files


def _tuned_results(environ: Mapping[str, str]) -> dict[str, list[int] | None]:
    """Stat of `hwtune tune`'s stored results, which plan() takes as measurements: as
    hwtune.pipeline.measured.tuned_dir, $HWTUNE_TUNED_DIR else $XDG_STATE_HOME/hwtune/tuned,
    holding <plan fingerprint>/<workload>.json."""
    base = paths.or_none(paths.tuned_dir, environ)
    if base is None:  # no home: no stored results to read
        return {}
    return {
        os.path.join(key, name): _stat(os.path.join(base, key, name))
        for key in _listdir(base)
        for name in _listdir(os.path.join(base, key))
    }


def _gpus() -> dict[str, object]:
    proc = "/proc/driver/nvidia"
    devices = _listdir(os.path.join(proc, "gpus"))
    mig = {
        gpu: _listdir(os.path.join(proc, "capabilities", gpu, "mig"))
        for gpu in _listdir(os.path.join(proc, "capabilities"))
        if gpu.startswith("gpu")
    }
    return {
        "devices": devices,
        "driver": _read(os.path.join(proc, "version")),
        "nodes": [n for n in _listdir("/dev") if n.startswith("nvidia")],
        "caps": _listdir("/dev/nvidia-caps"),
        "mig": mig,
    }


def fingerprint(environ: Mapping[str, str] | None = None) -> dict[str, object]:
    """The live machine's fingerprint as JSON-ready data (compare with ==)."""
    env = os.environ if environ is None else environ
    try:
        affinity = sorted(os.sched_getaffinity(0))
    except OSError:
        affinity = []
    return {
        "hwtune": __version__,
        "host": os.uname().nodename,
        "boot": _read("/proc/sys/kernel/random/boot_id"),
        "online": _read("/sys/devices/system/cpu/online"),
        "affinity": affinity,
        "cgroup": cgroup_state(),
        "numa": _read("/sys/devices/system/node/online"),
        "gpus": _gpus(),
        "gpu_env": [
            env.get("CUDA_VISIBLE_DEVICES"),
            env.get("NVIDIA_VISIBLE_DEVICES"),
            env.get("CUDA_DEVICE_ORDER"),
        ],
        "python": [sys.prefix, list(sys.version_info[:2])],
        "tensorflow": _tensorflow_dists(),
        "config": {p: _stat(p) for p in config_paths(env)},
        "knowledge": _knowledge_files(env),
        "tuned": _tuned_results(env),
        # HWTUNE_PROFILE (hwtune.apply.marker) marks hwtune's own output, not an input.
        "hwtune_env": sorted(
            [k, v] for k, v in env.items() if k.startswith("HWTUNE_") and k != "HWTUNE_PROFILE"
        ),
    }
