"""The facts the planner reads: TensorFlow versions, CUDA versions, compiler targets, templates.

Loading (files, user knowledge dirs) happens here, once, outside the pure planner: `plan()` takes
a `Knowledge` and reads nothing. Tests build one with `load_knowledge(extra_dirs=())` so that a
user's own knowledge directory cannot change their outcome.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from hwtune.errors import KnowledgeError
from hwtune.models.digits import is_ascii_digits

TEMPLATE_NAMES = ("tensorflow.bazelrc.tmpl", "configure_env.sh.tmpl")


@dataclass(frozen=True, slots=True)
class RepoEnvDefault:
    """A `build --repo_env NAME=VALUE` line a TensorFlow version's own .bazelrc applies to every
    build: hwtune neither repeats it nor answers ./configure as if it were unset."""

    name: str  # "USE_PYWRAP_RULES"
    value: str  # "True", as the .bazelrc spells it
    source: str  # the public file and tag that sets it


@dataclass(frozen=True, slots=True)
class TfVersionEntry:
    """One TensorFlow minor version's build facts (tensorflow_versions.json)."""

    key: str  # "2.19"
    source: str
    bazel: str
    clang: str  # the clang of the official build: -march names are checked against it
    cuda_scheme: Literal["legacy", "hermetic"]
    cuda_version: str
    cudnn_version: str
    official_cuda_compute_capabilities: str
    min_cuda_cc: str
    max_cuda_cc: str  # the newest CC the version's CUDA compiles SASS for
    configs: tuple[str, ...]  # build:<name> configs the planner may emit
    cc_env: tuple[str, ...]  # variables ./configure reads
    pip_target: str
    configs_uncertain: tuple[str, ...] = ()
    gcc_min: str | None = None
    python: str | None = None
    wheel_name_env: bool = False  # the :wheel target takes --repo_env=WHEEL_NAME
    # The wheel build takes --repo_env=USE_PYWRAP_RULES=1 (TF's install docs from 2.20 on)
    pywrap_rules: bool = False
    # `build --repo_env` defaults of the version's .bazelrc (USE_PYWRAP_RULES from 2.21, ...)
    bazelrc_repo_env: tuple[RepoEnvDefault, ...] = ()
    notes: str = ""

    def bazelrc_sets(self, name: str) -> RepoEnvDefault | None:
        """The version's .bazelrc default for repo_env `name`, if it sets one."""
        return next((d for d in self.bazelrc_repo_env if d.name == name), None)


@dataclass(frozen=True, slots=True)
class CompilerTarget:
    """A -march/-mcpu target, the oldest compilers that accept it (compilers.json)."""

    key: str  # GCC's name: "znver4", "neoverse-v1", "x86-64-v3"
    arch: str
    flag: str  # "-march=znver4", "-mcpu=neoverse-v1"
    gcc_min: str
    clang_min: str
    source: str
    requires: tuple[str, ...] = ()  # kernel CPU flags the target lets the compiler emit
    fallback: str | None = None  # the next safer target
    aliases: tuple[str, ...] = ()  # archspec-style names: "zen4", "skylake_avx512"


@dataclass(frozen=True, slots=True)
class CudaEntry:
    """A CUDA toolkit version against the driver (cuda_versions.json)."""

    key: str  # "12.5"
    min_driver: str  # the oldest driver that runs it under minor-version compatibility
    source: str
    new_sass: tuple[str, ...] = ()  # compute capabilities this toolkit first compiles SASS for


@dataclass(frozen=True, slots=True)
class Int8Feature:
    """A hardware int8 feature and the routes that use it (int8.json)."""

    key: str  # "avx512_vnni", "dp4a"
    name: str  # what users call it: "AVX512-VNNI"
    device: Literal["cpu", "gpu"]
    routes: tuple[str, ...]  # keys of int8_routes.json
    source: str
    arch: str | None = None  # a CPU feature's architecture
    flags_any: tuple[str, ...] = ()  # kernel CPU flags, any one of which shows the feature
    min_cc: str | None = None  # a GPU feature's lowest compute capability


@dataclass(frozen=True, slots=True)
class Int8Route:
    """How a TensorFlow user runs int8 on such a feature (int8_routes.json)."""

    key: str  # "onednn", "xnnpack", "tensorrt"
    name: str
    how: str
    source: str
    needs_onednn: bool = False
    tf_max: str | None = None  # the newest TF minor version whose wheels carry it


@dataclass(frozen=True)
class Knowledge:
    """Everything `plan()` needs besides the hardware, loaded once and passed in."""

    tf_versions: tuple[TfVersionEntry, ...]
    compilers: tuple[CompilerTarget, ...]
    templates: Mapping[str, str] = field(default_factory=dict)
    cuda: tuple[CudaEntry, ...] = ()
    int8_features: tuple[Int8Feature, ...] = ()
    int8_routes: tuple[Int8Route, ...] = ()

    @functools.cached_property
    def tf_by_version(self) -> dict[str, TfVersionEntry]:
        return {e.key: e for e in self.tf_versions}

    @functools.cached_property
    def compiler_by_name(self) -> dict[str, CompilerTarget]:
        table: dict[str, CompilerTarget] = {}
        for entry in self.compilers:
            for alias in entry.aliases:
                table.setdefault(alias, entry)
        for entry in self.compilers:  # a real key wins over an alias of the same spelling
            table[entry.key] = entry
        return table

    @functools.cached_property
    def newest_tf(self) -> TfVersionEntry:
        return max(self.tf_versions, key=lambda e: version_tuple(e.key))

    def cuda_entry(self, version: str) -> CudaEntry | None:
        """The entry of a toolkit version ("12.5.1" -> "12.5"), else the newest of its major."""
        wanted = version_tuple(version)[:2]
        same_major = [e for e in self.cuda if version_tuple(e.key)[:1] == wanted[:1]]
        exact = [e for e in same_major if version_tuple(e.key)[:2] == wanted]
        if exact:
            return exact[0]
        return max(same_major, key=lambda e: version_tuple(e.key), default=None)

    def first_cuda_for(self, capability: str) -> CudaEntry | None:
        """The oldest toolkit that compiles SASS for `capability` ("12.0"), when listed."""
        listed = [e for e in self.cuda if capability in e.new_sass]
        return min(listed, key=lambda e: version_tuple(e.key), default=None)


# No version part (TF, CUDA, compiler, compute capability) has more digits than this; a longer
# run is damage, and int() of thousands of digits raises (sys.get_int_max_str_digits).
_VERSION_PART_DIGITS = 9


def version_tuple(text: str) -> tuple[int, ...]:
    """ "2.19.0rc1" -> (2, 19, 0); "16.0.6" -> (16, 0, 6). Stops at the first non-number part."""
    parts: list[int] = []
    for piece in text.strip().split("."):
        digits = ""
        for char in piece:
            # ASCII only: '²' would make int() raise, '٣' is no version anyone writes.
            if not is_ascii_digits(char):
                break
            digits += char
        if not digits or len(digits) > _VERSION_PART_DIGITS:
            break
        parts.append(int(digits))
        if len(digits) != len(piece):
            break
    return tuple(parts)


def _template_dir() -> Path:
    # Installed: the package hwtune.bazel_templates (pyproject maps bazel_templates/ to it).
    # From a source checkout (editable installs map only `hwtune`): the folder at the top.
    try:
        import importlib.resources

        packaged = Path(str(importlib.resources.files("hwtune.bazel_templates")))
        if (packaged / TEMPLATE_NAMES[0]).is_file():
            return packaged
    except (ModuleNotFoundError, TypeError):
        pass
    return Path(__file__).resolve().parents[2] / "bazel_templates"


def load_templates(directory: Path | None = None) -> dict[str, str]:
    base = directory or _template_dir()
    templates: dict[str, str] = {}
    for name in TEMPLATE_NAMES:
        path = base / name
        try:
            templates[name] = path.read_text(encoding="utf-8")
        except OSError as err:
            raise KnowledgeError(f"{path}: cannot read bazel template: {err}") from err
    return templates


def load_knowledge(extra_dirs: tuple[Path, ...] | None = None) -> Knowledge:
    """Read the shipped tables (plus user ones, see `hwtune.knowledge`) and the templates."""
    from hwtune.knowledge import load_table

    return Knowledge(
        tf_versions=load_table("tensorflow_versions", TfVersionEntry, extra_dirs),
        compilers=load_table("compilers", CompilerTarget, extra_dirs),
        templates=load_templates(),
        cuda=load_table("cuda_versions", CudaEntry, extra_dirs),
        int8_features=load_table("int8", Int8Feature, extra_dirs),
        int8_routes=load_table("int8_routes", Int8Route, extra_dirs),
    )


@functools.cache
def default_knowledge() -> Knowledge:
    """The shipped tables plus the user's knowledge dirs, loaded on first use."""
    return load_knowledge()


def reload_knowledge() -> None:
    """Forget every loaded knowledge table, so the next use re-reads the shipped files and the
    user's knowledge directories (the daemon's SIGHUP). Both caches: `default_knowledge`'s and
    the per-table one under it (`hwtune.knowledge._load_table`), which would otherwise hand the
    old tables back."""
    from hwtune.knowledge import clear_cache

    default_knowledge.cache_clear()
    clear_cache()
