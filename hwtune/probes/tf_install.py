"""Reading a TensorFlow install from disk, without importing it: the facts `TfInstall`.

`read_install(search_path, names)` finds the `tensorflow` package directory the import system
would load first on the search path, the pip metadata beside it (`*.dist-info` directories
matched by name: `importlib.metadata` would parse every distribution's metadata, tens of ms on
a full site-packages), `tensorflow/python/platform/build_info.py` (parsed with `ast`, never
executed) and the DT_NEEDED entries of TF's shared objects (`elf.py`). Whatever cannot be read
becomes a `ProbeIssue` inside the facts, so a snapshot replays the same issues. The parse_*
functions are pure; `hwtune.probes.tensorflow` turns the facts into the model.
"""

from __future__ import annotations

import ast
import os
import re
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

from hwtune.models.hardware import ProbeIssue

PROBE = "tensorflow"
BUILD_INFO = "python/platform/build_info.py"
# The objects that carry TF's runtime: the framework and the C++ API (TF 2.x wheels), and the
# Python extension (with its helper library on 2.20+). Globs relative to the package dir.
LIBRARY_GLOBS = (
    "libtensorflow_framework.so*",
    "libtensorflow_cc.so*",
    "python/_pywrap_tensorflow_internal.so",
    "python/lib_pywrap_tensorflow_common.so",
)
ITEX_CPU_PLUGIN = "tensorflow-plugins/libitex_cpu.so"  # ITEX docs/install: the CPU build
# The plugin itself links no OpenMP: ITEX's oneDNN builds do (libiomp5.so in both, the OpenMP
# one and the Eigen one, in intel-extension-for-tensorflow-lib 2.15.0.0.0: readelf -d,
# tests/data/tf_wheels). Relative to the site directory, like the plugin.
ITEX_ONEDNN_LIBRARIES = (
    "intel_extension_for_tensorflow/libonednn_cpu_so.so",
    "intel_extension_for_tensorflow/libonednn_cpu_eigen_so.so",
)
# libiomp5 (Intel), libgomp (GNU), libomp (LLVM); auditwheel renames vendored copies
# libgomp-<8 hex>.so.1, as in PyTorch's wheels.
OPENMP_LIBRARY = re.compile(r"^lib(?:iomp5|gomp|omp)(?:-[0-9a-f]{8})?\.so(?:\.\d+)*$")
# A real TensorFlow install lists ~10k files in RECORD (1.8 MB for tensorflow-cpu 2.21); a shim
# that only depends on another distribution (tensorflow -> tensorflow-cpu-aws) lists a few.
REAL_RECORD_BYTES = 64 * 1024
DIST_DIR = re.compile(
    r"^(?P<name>[A-Za-z0-9._]+?)(?:-(?P<version>[^-]+?))?(?:-py[\d.]+)?"
    r"\.(?P<kind>dist-info|egg-info)$"
)


@dataclass(frozen=True, slots=True)
class LinkedLibrary:
    path: str  # relative to the package (or, for a plugin, the site) directory
    needed: tuple[str, ...] = ()


class BuildInfo(NamedTuple):
    """The CUDA facts of build_info.py (a NamedTuple: ~4x cheaper to define than a dataclass)."""

    is_cuda_build: bool
    cuda_version: str | None = None
    cudnn_version: str | None = None


@dataclass(frozen=True, slots=True)
class TfInstall:
    """What is on disk: the facts `describe` needs, and the content of a snapshot."""

    distribution: str  # PEP 503-normalised name; "unknown" for a package without metadata
    version: str | None = None
    metadata_dir: str | None = None
    package_dir: str | None = None
    wheel_tags: tuple[str, ...] = ()  # from WHEEL: cp311-cp311-manylinux_2_27_x86_64
    installer: str | None = None  # from INSTALLER: pip, uv, conda
    is_cuda_build: bool | None = None  # None: build_info.py missing or unreadable
    cuda_version: str | None = None
    cudnn_version: str | None = None
    libraries: tuple[LinkedLibrary, ...] = ()
    # shared objects found but unreadable: "no OpenMP among the DT_NEEDED" is then unproven
    libraries_unread: int = 0
    itex_cpu_plugin: LinkedLibrary | None = None
    itex_libraries: tuple[LinkedLibrary, ...] = ()  # ITEX's oneDNN builds (ITEX_ONEDNN_LIBRARIES)
    also_installed: tuple[str, ...] = ()  # other TF distributions in the same directory
    problems: tuple[ProbeIssue, ...] = ()


class BuildInfoError(ValueError):
    def __init__(self, message: str, line: int | None = None) -> None:
        super().__init__(message)
        self.line = line


def normalize(name: str) -> str:
    """PEP 503 name normalisation: tensorflow_cpu, TensorFlow-CPU -> tensorflow-cpu."""
    return re.sub(r"[-_.]+", "-", name).lower()


# --- parsing (pure) -----------------------------------------------------------------------


def parse_metadata(text: str) -> tuple[str | None, str | None]:
    """(Name, Version) from the RFC 822 header block of METADATA / PKG-INFO."""
    name = version = None
    for line in text.splitlines():
        if not line.strip():
            break  # the description body follows the first blank line
        key, _, value = line.partition(":")
        if key.lower() == "name" and name is None:
            name = value.strip() or None
        elif key.lower() == "version" and version is None:
            version = value.strip() or None
    return name, version


def parse_requires(text: str) -> tuple[str, ...]:
    """The project names of METADATA's Requires-Dist headers ("tensorflow-cpu-aws (==2.12.0) ;
    platform_machine == ..." -> "tensorflow-cpu-aws"), normalised, in order."""
    names = []
    for line in text.splitlines():
        if not line.strip():
            break
        key, _, value = line.partition(":")
        match = re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)", value)
        if key.lower() == "requires-dist" and match:
            names.append(normalize(match[1]))
    return tuple(names)


def parse_wheel_tags(text: str) -> tuple[str, ...]:
    return tuple(
        v.strip()
        for k, _, v in (ln.partition(":") for ln in text.splitlines())
        if k.strip().lower() == "tag" and v.strip()
    )


def _literal_mapping(node: ast.expr) -> dict[str, object]:
    """`{...}`, `dict([...])` or `collections.OrderedDict([...])` as a dict, never executed."""
    if isinstance(node, ast.Dict):
        value = ast.literal_eval(node)
    elif isinstance(node, ast.Call) and (
        (isinstance(node.func, ast.Name) and node.func.id in ("dict", "OrderedDict"))
        or (isinstance(node.func, ast.Attribute) and node.func.attr == "OrderedDict")
    ):
        pairs = ast.literal_eval(node.args[0]) if node.args else []
        value = dict(pairs)
        value.update({k.arg: ast.literal_eval(k.value) for k in node.keywords if k.arg})
    else:
        raise BuildInfoError(
            "build_info is neither a dict literal nor dict/OrderedDict(...)", node.lineno
        )
    if not isinstance(value, dict) or not all(isinstance(k, str) for k in value):
        raise BuildInfoError("build_info keys are not strings", node.lineno)
    return value


def parse_build_info(text: str) -> BuildInfo:
    """The CUDA facts of `build_info.py`, by reading its literals. Raises BuildInfoError.

    TF 2.4+ writes `build_info = collections.OrderedDict([...])` ('is_cuda_build',
    'cuda_version', 'cudnn_version'); older 2.x wrote a dict literal or module-level names
    (`is_cuda_build = True`, `cuda_version_number = '10.1'`).
    """
    try:
        tree = ast.parse(text)
    except SyntaxError as err:
        raise BuildInfoError(f"not valid Python: {err.msg}", err.lineno) from err
    values: dict[str, object] = {}
    for node in tree.body:
        if not (
            isinstance(node, ast.Assign)
            and len(node.targets) == 1
            and isinstance(node.targets[0], ast.Name)
        ):
            continue
        try:
            if node.targets[0].id == "build_info":
                values.update(_literal_mapping(node.value))
            else:
                values[node.targets[0].id] = ast.literal_eval(node.value)
        except (ValueError, TypeError, SyntaxError, IndexError) as err:
            if node.targets[0].id == "build_info":
                raise BuildInfoError(f"build_info is not a literal: {err}", node.lineno) from err
    cuda = values.get("is_cuda_build")
    if not isinstance(cuda, bool):
        raise BuildInfoError(
            "no boolean is_cuda_build"
            if cuda is None
            else f"is_cuda_build is {cuda!r}, not a bool"
        )

    def text_of(*keys: str) -> str | None:
        found = next((values[k] for k in keys if values.get(k) not in (None, "")), None)
        return None if found is None else str(found)

    return BuildInfo(
        is_cuda_build=cuda,
        cuda_version=text_of("cuda_version", "cuda_version_number"),
        cudnn_version=text_of("cudnn_version", "cudnn_version_number"),
    )


# --- reading ------------------------------------------------------------------------------


def live_search_path() -> tuple[str, ...]:
    # "" is the current directory: it is where *this* process was started, not where the
    # user's programs import from (and a TF source checkout there would be a false hit).
    return tuple(p for p in sys.path if p)


def _listing(directory: str) -> list[str]:
    try:
        return os.listdir(directory)
    except OSError:  # not a directory (a zip, a path hook), unreadable, gone
        return []


class _Problems(list[ProbeIssue]):
    """The issues met while reading, kept inside the facts so that a snapshot replays them."""

    def note(self, reason: str, path: str | Path | None = None, line: int | None = None) -> None:
        self.append(ProbeIssue(PROBE, reason, None if path is None else str(path), line))


def _read_text(path: Path, problems: _Problems) -> str | None:
    try:
        return path.read_text(encoding="utf-8", errors="replace")
    except FileNotFoundError:
        return None
    except OSError as err:
        problems.note(f"cannot read {path.name}: {err.strerror}", path)
        return None


def _record_size(meta: Path) -> int:
    try:
        return (meta / "RECORD").stat().st_size
    except OSError:
        return 0


def _needed(path: Path, problems: _Problems, what: str) -> tuple[str, ...] | None:
    from hwtune.probes.elf import ElfError, read_needed

    try:
        return read_needed(path)
    except (OSError, ElfError) as err:
        reason = err.strerror if isinstance(err, OSError) else str(err)
        problems.note(f"{what} unreadable: {reason}", path)
        return None


def _read_libraries(package: Path, problems: _Problems) -> tuple[tuple[LinkedLibrary, ...], int]:
    """The shared objects' DT_NEEDED lists, and how many objects could not be read."""
    seen: set[Path] = set()
    libraries = []
    for pattern in LIBRARY_GLOBS:
        for path in sorted(package.glob(pattern)):
            if path.resolve() in seen or not path.is_file():
                continue  # libfoo.so.2 -> libfoo.so.2.21.0 is one object
            seen.add(path.resolve())
            needed = _needed(path, problems, "shared object")
            if needed is not None:
                libraries.append(LinkedLibrary(str(path.relative_to(package)), needed))
    if not seen:
        problems.note("no TensorFlow shared object (libtensorflow_framework.so.*) found", package)
    return tuple(libraries), len(seen) - len(libraries)


def _read_build_info(package: Path, problems: _Problems) -> BuildInfo | None:
    path = package / BUILD_INFO
    text = _read_text(path, problems)
    if text is None:
        problems.note("build_info.py missing; whether this is a CUDA build is unknown", path)
        return None
    try:
        return parse_build_info(text)
    except BuildInfoError as err:
        problems.note(f"build_info.py: {err}", path, err.line)
        return None


class _Metadata(NamedTuple):
    distribution: str = "unknown"
    version: str | None = None
    directory: str | None = None
    wheel_tags: tuple[str, ...] = ()
    installer: str | None = None
    others: tuple[str, ...] = ()
    requires: tuple[str, ...] = ()  # Requires-Dist project names
    shim: bool = False  # a RECORD too small for TensorFlow's files: metadata only


def _read_metadata(
    site: str, metas: list[tuple[str, re.Match[str]]], problems: _Problems
) -> _Metadata:
    """The metadata of the distribution that owns the files: the biggest RECORD wins a tie."""
    if not metas:
        problems.note(
            "the tensorflow package has no pip metadata (*.dist-info) beside it; "
            "distribution and version unknown",
            site,
        )
        return _Metadata()
    metas = sorted(metas, key=lambda nm: -_record_size(Path(site, nm[0])))
    real = [n for n, _ in metas if _record_size(Path(site, n)) >= REAL_RECORD_BYTES]
    if len(real) > 1:
        problems.note(
            f"{len(real)} TensorFlow distributions are installed over one another "
            f"({', '.join(real)}): the files are from whichever came last; "
            f"reporting {real[0]}",
            site,
        )
    name, match = metas[0]
    directory = Path(site, name)
    distribution, version = normalize(match["name"]), match["version"]
    meta_file = "PKG-INFO" if match["kind"] == "egg-info" else "METADATA"
    text = _read_text(directory / meta_file, problems)
    if text is not None:
        meta_name, meta_version = parse_metadata(text)
        distribution = normalize(meta_name) if meta_name else distribution
        version = meta_version or version
    record = _record_size(directory)
    return _Metadata(
        distribution=distribution,
        version=version,
        directory=str(directory),
        wheel_tags=parse_wheel_tags(_read_text(directory / "WHEEL", problems) or ""),
        installer=(_read_text(directory / "INSTALLER", problems) or "").strip() or None,
        others=tuple(normalize(m["name"]) for _, m in metas[1:]),
        requires=parse_requires(text or ""),
        shim=0 < record < REAL_RECORD_BYTES,
    )


def read_install(search_path: Sequence[str], names: frozenset[str]) -> TfInstall | None:
    """Read the TensorFlow the import system would load from `search_path`; None if absent.

    The first directory holding a `tensorflow/__init__.py` is the one `import` would use; its
    metadata is beside it. Metadata with no package anywhere is a broken install.
    """
    listings = {d: _listing(d) for d in dict.fromkeys(search_path)}

    def metas_in(directory: str) -> list[tuple[str, re.Match[str]]]:
        found = [(n, DIST_DIR.match(n)) for n in listings[directory]]
        return [(n, m) for n, m in found if m and normalize(m["name"]) in names]

    package_site = next(
        (
            d
            for d, entries in listings.items()
            if "tensorflow" in entries and Path(d, "tensorflow", "__init__.py").is_file()
        ),
        None,
    )
    site = package_site or next((d for d in listings if metas_in(d)), None)
    if site is None:
        return None
    problems = _Problems()
    meta = _read_metadata(site, metas_in(site), problems)
    package = Path(site, "tensorflow") if package_site else None
    build = None
    what = f"{meta.distribution} {meta.version or '(version unknown)'}"
    deps = [n for n in meta.requires if n in names]
    if package is None and meta.shim and deps:
        # tensorflow 2.12.0 on aarch64: 4 files, Requires-Dist tensorflow-cpu-aws (==2.12.0)
        problems.note(
            f"{what} is a metadata-only wheel that installs no tensorflow/ package; the "
            f"TensorFlow it requires ({' or '.join(deps)}"
            f"{', as its platform markers pick' if len(deps) > 1 else ''}) is not installed",
            meta.directory,
        )
    elif package is None:
        problems.note(
            f"{what} is installed but its package directory tensorflow/ is missing: "
            "a broken or half-removed install",
            meta.directory,
        )
    else:
        build = _read_build_info(package, problems)
    plugin_site = next(
        (
            d
            for d, entries in listings.items()
            if "tensorflow-plugins" in entries and Path(d, ITEX_CPU_PLUGIN).exists()
        ),
        None,
    )
    libraries, unread = ((), 0) if package is None else _read_libraries(package, problems)
    plugin, itex = None, []
    if plugin_site is not None:
        needed = _needed(Path(plugin_site, ITEX_CPU_PLUGIN), problems, "ITEX CPU plugin")
        plugin = LinkedLibrary(ITEX_CPU_PLUGIN, needed or ())
        for name in ITEX_ONEDNN_LIBRARIES:
            path = Path(plugin_site, name)
            found = _needed(path, problems, "ITEX oneDNN library") if path.is_file() else None
            if found is not None:
                itex.append(LinkedLibrary(name, found))
    return TfInstall(
        distribution=meta.distribution,
        version=meta.version,
        metadata_dir=meta.directory,
        package_dir=None if package is None else str(package),
        wheel_tags=meta.wheel_tags,
        installer=meta.installer,
        is_cuda_build=None if build is None else build.is_cuda_build,
        cuda_version=None if build is None else build.cuda_version,
        cudnn_version=None if build is None else build.cudnn_version,
        libraries=libraries,
        libraries_unread=unread,
        itex_cpu_plugin=plugin,
        itex_libraries=tuple(itex),
        also_installed=meta.others,
        problems=tuple(problems),
    )
