"""The installed TensorFlow, told from its files alone: `import tensorflow` never happens here.

Importing TensorFlow takes seconds, maps ~1 GB of shared objects and logs to stderr, while
`hwtune detect` must finish in 150 ms. So `tf_install.read_install` reads what the install
leaves on disk into plain facts (`TfInstall`), and `describe` (pure) joins them with the CPU and
with `knowledge/data/tf_distributions.json` into the model's `TensorFlowInfo`:

- threading_runtime: "openmp" when a TF object has an OpenMP runtime among its DT_NEEDED
  entries or the ITEX CPU plugin is installed; otherwise "eigen" (tensorflow/tensorflow#56697).
- compiled_isa: from the distribution's build configuration, trusted only for wheels from PyPI
  (a manylinux tag, not installed by conda). The binary itself cannot tell this cheaply:
  cpu_feature_guard's feature names are immediates inside its code, not strings to scan, and
  disassembling 65 MB to find VEX/EVEX encodings is far beyond the probe's ~15 ms budget.
  Binaries whose threading runtime is not the entry's are another build: ISA and oneDNN
  policy unknown (`_built_otherwise`).
- missing_isa: what TF's cpu_feature_guard would list (tf_knowledge.missing_isa).
- onednn_default: TF's DefaultOneDnnPolicy for this CPU and version.

Under the live root the search path is this interpreter's `sys.path`; under any other root the
facts come from `<root>/tensorflow.json`, which `save_tf_snapshot` writes.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Literal

from hwtune.models.hardware import CpuInfo, TensorFlowInfo
from hwtune.probes.issues import IssueLog
from hwtune.probes.tf_install import (
    ITEX_CPU_PLUGIN,
    OPENMP_LIBRARY,
    PROBE,
    LinkedLibrary,
    TfInstall,
    live_search_path,
    normalize,
    read_install,
)
from hwtune.probes.tf_knowledge import (
    TfDistribution,
    load_distributions,
    missing_isa,
    onednn_default,
    parse_version,
)

SNAPSHOT_FILE = "tensorflow.json"
SNAPSHOT_FORMAT = 1
# Why, with the primary sources:
EIGEN_BASIS = (
    "oneDNN runs on TF's own Eigen threadpool, so OMP_*/KMP_* do not apply (stock wheels build "
    "oneDNN with its threadpool runtime; only --config=mkl sets build_with_openmp: TF .bazelrc, "
    "tensorflow/tensorflow#56697)"
)
ITEX_BASIS = (
    "the Intel Extension for TensorFlow CPU plugin ({path}) runs oneDNN on an OpenMP pool by "
    "default (ITEX_OMP_THREADPOOL=1; 0 switches it to Eigen: ITEX docs/guide/threadpool.md)"
)
# Wheel platform tags of builds from PyPI's release pipelines (PEP 600 / PEP 656).
PYPI_PLATFORMS = ("manylinux", "musllinux")
# What `save_tf_snapshot` writes nests about five levels (payload, install, its libraries, one
# library, its DT_NEEDED list); json's scanner would fail near 1000 (probes/json_text.py).
MAX_SNAPSHOT_NESTING = 32
WHEEL_ARCH = {"x86_64": "x86_64", "amd64": "x86_64", "aarch64": "aarch64", "arm64": "aarch64"}


def distribution_names(table: Sequence[TfDistribution]) -> frozenset[str]:
    return frozenset({"tensorflow", *(normalize(e.distribution) for e in table)})


def _wheel_arch(tags: Sequence[str]) -> str | None:
    for tag in tags:
        platform = tag.rsplit("-", 1)[-1].lower()
        for suffix, arch in WHEEL_ARCH.items():
            if platform.endswith(suffix):
                return arch
    return None


def _compiled_isa(
    install: TfInstall, entry: TfDistribution | None, arch: str
) -> tuple[tuple[str, ...] | None, str]:
    """(compiled ISA or None when unknown, how it was told)."""
    if entry is None:
        return None, f"{install.distribution} on {arch} is not in tf_distributions.json"
    if entry.compiled_isa is None:
        return None, f"{entry.key}: {entry.build}"
    platforms = [t.rsplit("-", 1)[-1] for t in install.wheel_tags]
    if install.installer == "conda" or not any(p.startswith(PYPI_PLATFORMS) for p in platforms):
        how = (
            "installed by conda"
            if install.installer == "conda"
            else f"wheel tag {', '.join(platforms)}"
            if platforms
            else "no WHEEL file"
        )
        return None, f"not a PyPI wheel ({how}): built with flags hwtune cannot see"
    return entry.compiled_isa, f"{entry.key} wheel ({platforms[0]}): {entry.build}"


def _linked_openmp(libraries: Iterable[LinkedLibrary]) -> tuple[str, str] | None:
    """(object, OpenMP library) for the first of `libraries` whose DT_NEEDED names one."""
    for library in libraries:
        for name in library.needed:
            if OPENMP_LIBRARY.match(name):
                return library.path, name
    return None


def _built_otherwise(install: TfInstall, entry: TfDistribution | None) -> str | None:
    """Why the table's entry does not describe these binaries, or None when nothing says so.

    The `tensorflow` aarch64 wheels 2.16.1-2.20.0 link LLVM OpenMP (libomp-<hash>.so.5, the
    same build as tensorflow-aarch64 2.16.1), where 2.21.0 is the release_arm64_linux Eigen
    build the table describes (readelf -d, tests/data/tf_wheels): a threading runtime other
    than the entry's is a build the entry's flags and oneDNN policy do not cover."""
    if entry is None or entry.threading_runtime is None:
        return None
    linked = _linked_openmp(install.libraries)
    if linked is not None and entry.threading_runtime == "eigen":
        path, name = linked
        return (
            f"{path} links {name}, but {entry.key} is described as an Eigen-threadpool build "
            f"({entry.build}): this wheel was built another way"
        )
    all_read = install.libraries and not install.libraries_unread
    if linked is None and all_read and entry.threading_runtime == "openmp":
        return (
            f"no TF object links an OpenMP runtime, but {entry.key} is described as an OpenMP "
            f"build ({entry.build}): this wheel was built another way"
        )
    return None


def _threading(
    install: TfInstall, entry: TfDistribution | None, issues: IssueLog
) -> tuple[Literal["eigen", "openmp"], str, str | None]:
    """(runtime, basis, OpenMP library) from the DT_NEEDED facts, else from knowledge."""
    linked = _linked_openmp(install.libraries)
    if linked is not None:
        return "openmp", f"{linked[0]} links {linked[1]} (DT_NEEDED)", linked[1]
    plugin = install.itex_cpu_plugin
    if plugin is not None:
        basis = ITEX_BASIS.format(path=ITEX_CPU_PLUGIN)
        in_itex = _linked_openmp((plugin, *install.itex_libraries))
        if in_itex is not None:
            return "openmp", f"{basis}; {in_itex[0]} links {in_itex[1]} (DT_NEEDED)", in_itex[1]
        return "openmp", basis, None
    if install.libraries and not install.libraries_unread:
        names = ", ".join(lib.path for lib in install.libraries)
        return "eigen", f"no OpenMP runtime among the DT_NEEDED of {names}; {EIGEN_BASIS}", None
    # An unread object may be the one that links OpenMP: the distribution's table decides.
    if entry is not None and entry.threading_runtime is not None:
        return entry.threading_runtime, f"binaries unreadable; expected of {entry.key}", None
    issues.add(
        PROBE,
        "threading runtime unknown (no binary read, distribution unknown); "
        "assuming Eigen, TF's default",
    )
    return "eigen", "unknown; assuming Eigen, TF's default", None


def describe(
    install: TfInstall, cpu: CpuInfo, table: Sequence[TfDistribution], issues: IssueLog
) -> TensorFlowInfo:
    """The model's TensorFlowInfo from the facts on disk, the CPU and the distribution table."""
    for problem in install.problems:
        issues.add(problem.probe, problem.reason, problem.path, problem.line)
    version = parse_version(install.version or "")
    arch = _wheel_arch(install.wheel_tags) or cpu.arch
    entry = next(
        (e for e in table if normalize(e.distribution) == install.distribution and e.arch == arch),
        None,
    )
    otherwise = _built_otherwise(install, entry)
    compiled, isa_basis = (None, otherwise) if otherwise else _compiled_isa(install, entry, arch)
    if compiled is None and cpu.arch == "x86_64":
        issues.add(PROBE, f"compiled ISA unknown ({isa_basis}); missing_isa cannot be told")
    elif cpu.arch == "x86_64" and not cpu.flags:
        issues.add(PROBE, "CPU flags unknown; missing_isa cannot be told")
    runtime, runtime_basis, omp = _threading(install, entry, issues)
    policy = entry.onednn if entry and not otherwise else None
    onednn, _why = onednn_default(policy, version, cpu)
    return TensorFlowInfo(
        version=install.version or "unknown",
        distribution=install.distribution,
        location=install.package_dir,
        cuda_build=bool(install.is_cuda_build),
        cuda_version=install.cuda_version,
        cudnn_version=install.cudnn_version,
        threading_runtime=runtime,
        threading_runtime_basis=runtime_basis,
        openmp_library=omp,
        compiled_isa=compiled or (),
        missing_isa=missing_isa(compiled, cpu, version) if compiled is not None else (),
        onednn_default=onednn,
        compiled_isa_basis=isa_basis,
    )


def _distributions(issues: IssueLog) -> tuple[TfDistribution, ...]:
    from hwtune.errors import KnowledgeError

    try:
        return load_distributions()
    except KnowledgeError as err:
        issues.add(PROBE, f"TensorFlow distribution table unusable: {err.message}")
        return ()


def read_snapshot(path: Path, issues: IssueLog) -> TfInstall | None:
    """The facts `save_tf_snapshot` wrote; None (no issue) when the file is absent."""
    from hwtune.errors import ModelError
    from hwtune.models.convert import load
    from hwtune.probes.json_text import JsonRefused, loads_bounded
    from hwtune.probes.root import MAX_SMALL, read_bytes

    try:
        # inside the snapshot root, a regular file, capped (probes.root)
        text = read_bytes(path.parent, path.name, MAX_SMALL).decode("utf-8")
        data = loads_bounded(text, MAX_SNAPSHOT_NESTING)
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError) as err:
        issues.add(PROBE, f"cannot read the TensorFlow snapshot: {err}", path.name)
        return None
    except JsonRefused as err:
        issues.add(PROBE, err.reason, path.name, err.line)
        return None
    if (
        not isinstance(data, dict)
        or data.get("format") != SNAPSHOT_FORMAT
        or "install" not in data
    ):
        issues.add(PROBE, f"not a format-{SNAPSHOT_FORMAT} TensorFlow snapshot", path.name)
        return None
    if data["install"] is None:
        return None  # the snapshot was taken where no TensorFlow was installed
    try:
        return load(TfInstall, data["install"], where=path.name)
    except ModelError as err:
        issues.add(PROBE, err.message + (f" ({err.hint})" if err.hint else ""), path.name)
        return None


def probe_tensorflow(
    root: Path,
    issues: IssueLog,
    cpu: CpuInfo,
    *,
    live: bool,
    search_path: Sequence[str] | None = None,
) -> TensorFlowInfo | None:
    """The TensorFlow under `root`, or None when there is none.

    `search_path` (directories, like sys.path) overrides where to look; by default it is this
    interpreter's sys.path when `live`, and `<root>/tensorflow.json` otherwise.
    """
    if search_path is None and not live:
        install = read_snapshot(root / SNAPSHOT_FILE, issues)
        table = _distributions(issues) if install else ()
    else:
        table = _distributions(issues)
        paths = live_search_path() if search_path is None else tuple(search_path)
        install = read_install(paths, distribution_names(table))
    return None if install is None else describe(install, cpu, table, issues)


def save_tf_snapshot(
    dest: Path,
    issues: IssueLog,
    *,
    search_path: Sequence[str] | None = None,
    write: Callable[[str, bytes], None] | None = None,
) -> None:
    """Write `dest/tensorflow.json`: the facts that rebuild TensorFlowInfo under `--root dest`
    (through `write(name, data)` when given: `hwtune snapshot`'s open directory)."""
    from hwtune.models.convert import dump

    paths = live_search_path() if search_path is None else tuple(search_path)
    install = read_install(paths, distribution_names(_distributions(issues)))
    for problem in install.problems if install else ():
        issues.add(problem.probe, problem.reason, problem.path, problem.line)
    payload = {
        "_doc": "hwtune: the installed TensorFlow as read from disk (never imported); "
        "`hwtune detect --root` rebuilds the model from it with this snapshot's CPU",
        "format": SNAPSHOT_FORMAT,
        "install": None if install is None else dump(install),
    }
    data = (json.dumps(payload, indent=2) + "\n").encode()
    if write is not None:
        write(SNAPSHOT_FILE, data)
    else:
        _write_atomic(dest / SNAPSHOT_FILE, data)


def _write_atomic(path: Path, data: bytes) -> None:
    import tempfile  # ~2 ms of imports that detect itself never needs

    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        os.fchmod(fd, 0o644)  # a snapshot file, whatever the umask (mkstemp makes 0600)
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise
