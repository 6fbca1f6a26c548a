"""The inputs the plan depends on, as `watch.Input`s, under a root path.

Live ("/"): sysfs, procfs and cgroupfs are polled (no inotify there), /dev/nvidia* and the
config and site-packages directories are watched with inotify too. Under any other root (a
snapshot made by `hwtune snapshot`, or a test's tree) every file is a regular file and both
apply. `/proc/self/...` is this daemon's own view, which is the point: its cgroup limits are
those a job started beside it would get from the same slice.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

from hwtune.daemon.watch import Input, Part
from hwtune.models.digits import is_ascii_digits
from hwtune.probes.cgroup import cgroup_files
from hwtune.probes.cgroup_text import PROC_CGROUP
from hwtune.probes.issues import IssueLog
from hwtune.probes.memory import RHEL6_THP_ENABLED

CPU_DIR = "sys/devices/system/cpu"
NODE_DIR = "sys/devices/system/node"
GPU_SNAPSHOT_FILES = (  # hwtune.probes.nvidia_smi and nvidia_smi_list
    "nvidia-smi-q.xml",
    "nvidia-smi-topo.txt",
    "nvidia-smi-L.txt",
)
TF_SNAPSHOT_FILE = "tensorflow.json"  # what the tensorflow probe reads under a non-live root
# Distribution names TensorFlow ships under (tensorflow, tensorflow-cpu, tensorflow-intel,
# intel-tensorflow, tf-nightly…); dist-info directories use the normalized name with '_'.
TF_DIST_PATTERNS = ("*tensorflow*.dist-info", "tf_nightly*.dist-info")


def config_paths(environ: Mapping[str, str]) -> list[Path]:
    """The config files the planner reads, in precedence order (issue 3: /etc/hwtune/config.toml,
    then $XDG_CONFIG_HOME/hwtune/config.toml), as hwtune.pipeline.config lists them."""
    from hwtune.pipeline.config import default_config_paths

    return list(default_config_paths(environ))


def tuned_directory(environ: Mapping[str, str]) -> Path | None:
    """Where `hwtune tune` stores its measurements, which plan() takes as `measured`; None
    without a home to find them under (hwtune.paths.home)."""
    from hwtune.errors import NoHomeError
    from hwtune.pipeline.measured import tuned_dir

    try:
        return tuned_dir(environ)
    except NoHomeError:
        return None


def site_directories() -> list[Path]:
    """Where this interpreter finds installed distributions (TensorFlow's dist-info is there)."""
    seen: list[Path] = []
    for entry in sys.path:
        if entry and os.path.basename(entry) in ("site-packages", "dist-packages"):
            path = Path(entry)
            if path.is_dir() and path not in seen:
                seen.append(path)
    return seen


def _files(root: Path, names: Sequence[str], *, notify: bool) -> tuple[Part, ...]:
    return tuple(Part("content", root / n, notify=notify) for n in names)


def plan_inputs(
    root: Path,
    *,
    live: bool,
    config_files: Sequence[Path],
    site_dirs: Sequence[Path] = (),
    tuned_dir: Path | None = None,
) -> list[Input]:
    """Every input of the plan, each with the parts that fingerprint it."""
    regular = not live  # inotify sees files in a snapshot tree, not in sysfs/procfs
    cpus = [Part("content", root / CPU_DIR / n, notify=regular) for n in ("online", "present")]
    if not live:
        # A snapshot's cpuinfo is static; the live one has "cpu MHz" lines that change always.
        cpus.append(Part("content", root / "proc/cpuinfo"))
    nodes = root / NODE_DIR
    numa = [Part("listing", nodes, "node*", notify=regular)]
    with contextlib.suppress(OSError):
        numa.extend(
            Part("content", nodes / name / "cpulist", notify=regular)
            for name in sorted(os.listdir(nodes))
            if name.startswith("node") and is_ascii_digits(name[4:])
        )
    cgroup = [Part("content", root / PROC_CGROUP, notify=regular)]
    cgroup.extend(Part("content", f, notify=regular) for f in cgroup_files(root, IssueLog()))
    memory = [
        Part("lines", root / "proc/meminfo", "MemTotal:", notify=regular),
        Part("content", root / "sys/kernel/mm/transparent_hugepage/enabled", notify=regular),
        # RHEL 6 kernels name it redhat_transparent_hugepage (probes/memory.py reads both)
        Part("content", root / RHEL6_THP_ENABLED, notify=regular),
    ]
    if live:
        gpus = [
            Part("listing", root / "dev", "nvidia*"),
            Part("listing", root / "dev/nvidia-caps", "*"),
            Part("tree", root / "proc/driver/nvidia/gpus", notify=False, depth=1),
            # MIG instances appear here as gpuN/mig/giM/ciK directories.
            Part("tree", root / "proc/driver/nvidia/capabilities", notify=False, depth=5),
        ]
        tensorflow = [Part("listing", d, p) for d in site_dirs for p in TF_DIST_PATTERNS]
    else:
        gpus = list(_files(root, GPU_SNAPSHOT_FILES, notify=True))
        tensorflow = list(_files(root, (TF_SNAPSHOT_FILE,), notify=True))
    return [
        Input("cpus", tuple(cpus)),
        Input(
            "affinity",
            (Part("lines", root / "proc/self/status", "Cpus_allowed_list", notify=regular),),
        ),
        Input("cgroup", tuple(cgroup)),
        Input("numa", tuple(numa)),
        Input("memory", tuple(memory)),
        Input("gpus", tuple(gpus)),
        Input("tensorflow", tuple(tensorflow)),
        Input("config", tuple(Part("content", p) for p in config_files)),
        # <fingerprint>/<workload>.json files (hwtune.pipeline.measured), written by rename.
        Input("measured", (Part("tree", tuned_dir, depth=2),) if tuned_dir else ()),
    ]


# The name of the input that is the daemon's own outputs: not a plan input (a change to it
# re-plans nothing) but what it must put back when someone deletes it.
OUTPUTS = "outputs"


def output_input(output: Path, output_names: Sequence[str], nfd_dir: Path | None) -> Input:
    """The files the daemon writes, by name only: a deletion moves the signature (and wakes
    inotify at once), while the daemon's own rewrites, renames over a name that stays, do
    not. Dotfiles beside them (apply's lock, the journal, temporaries) are not looked at
    unless named (the daemon names its own `.daemon.lock`)."""
    parts = [Part("listing", output, name) for name in output_names]
    if nfd_dir is not None:
        from hwtune.apply.nfd import FILE_NAME

        parts.append(Part("listing", nfd_dir, FILE_NAME))
    return Input(OUTPUTS, tuple(parts))
