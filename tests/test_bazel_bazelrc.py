"""hwtune's bazel options against the real .bazelrc of each TensorFlow version it could read.

tests/data/bazel/<version>.bazelrc-configs are verbatim excerpts (SOURCES.md names the commits):
every `--config=NAME` hwtune emits must be a `build:NAME` there, the capability variable must be
the one that version's cuda_clang sets (the last --repo_env wins only over the same name), and
the knowledge entry's CUDA, cuDNN and official capability list must be the file's own.
"""

from __future__ import annotations

import re

import pytest

from hwtune.models.hardware import Gpu
from hwtune.planner import Knowledge, load_knowledge, plan
from hwtune.planner.bazel import render_configure_env
from tests.conftest import DATA
from tests.plan_builders import CASCADELAKE_FLAGS, ZEN4_FLAGS, make_gpus, make_hardware

EXCERPTS = DATA / "bazel"
VERSIONS = sorted(p.name.split(".bazelrc")[0] for p in EXCERPTS.glob("*.bazelrc-configs"))
ALL_VERSIONS = sorted(e.key for e in load_knowledge(extra_dirs=()).tf_versions)
LINE = re.compile(r"^(?:build|common):([\w-]+)\s+(.*)$")
DEFAULT = re.compile(r"^(?:build|common)\s+(.*)$")  # applied to every build, before --config
REPO_ENV = re.compile(r'--repo_env[= ]([A-Z_]+)="?([^"\s]*)"?')

ZEN3 = tuple(f for f in ZEN4_FLAGS if not f.startswith("avx512") and f != "gfni")
SPR = (
    *CASCADELAKE_FLAGS,
    "avx512_bf16",
    "avx512_fp16",
    "amx_tile",
    "amx_bf16",
    "amx_int8",
    "avx512ifma",
    "avx512vbmi",
    "avx512_vbmi2",
    "avx512_bitalg",
    "avx512_vpopcntdq",
    "gfni",
    "vaes",
    "vpclmulqdq",
    "avx_vnni",
)
NEOVERSE_V1 = ("fp", "asimd", "atomics", "asimddp", "sve", "i8mm", "bf16", "fphp", "asimdhp")
MACHINES: dict[str, dict[str, object]] = {
    "zen3": {"microarch": "znver3", "flags": ZEN3},
    "zen4": {"microarch": "znver4", "flags": ZEN4_FLAGS},
    "sapphirerapids": {"microarch": "sapphirerapids", "flags": SPR},
    "neoverse-v1": {"microarch": "neoverse-v1", "flags": NEOVERSE_V1, "arch": "aarch64"},
    "zen3+a100": {"microarch": "znver3", "flags": ZEN3, "gpus": make_gpus(2, cc="8.0")},
    "spr+h100": {"microarch": "sapphirerapids", "flags": SPR, "gpus": make_gpus(1, cc="9.0")},
}


def _configs(version: str) -> dict[str, list[str]]:
    """build:NAME -> its lines' arguments, from the excerpt of `version`'s .bazelrc."""
    found: dict[str, list[str]] = {}
    for line in (EXCERPTS / f"{version}.bazelrc-configs").read_text().splitlines():
        match = LINE.match(line)
        if match:
            found.setdefault(match.group(1), []).append(match.group(2))
    return found


def _repo_env(configs: dict[str, list[str]], name: str) -> dict[str, str]:
    """The --repo_env values config `name` sets, following its --config= includes."""
    values: dict[str, str] = {}
    for args in configs.get(name, []):
        for included in re.findall(r"--config=([\w-]+)", args):
            values.update(_repo_env(configs, included))
        values.update(REPO_ENV.findall(args))
    return values


def _defaults(version: str) -> dict[str, str]:
    """The --repo_env values the excerpt of `version`'s .bazelrc sets for every build."""
    values: dict[str, str] = {}
    for line in (EXCERPTS / f"{version}.bazelrc-configs").read_text().splitlines():
        match = DEFAULT.match(line)
        if match:
            values.update(REPO_ENV.findall(match.group(1)))
    return values


@pytest.fixture(scope="module")
def knowledge() -> Knowledge:
    return load_knowledge(extra_dirs=())


def test_excerpts_exist() -> None:
    assert VERSIONS, "no tests/data/bazel/*.bazelrc-configs"


@pytest.mark.parametrize("machine", sorted(MACHINES))
@pytest.mark.parametrize("version", VERSIONS)
def test_every_emitted_config_is_in_the_versions_bazelrc(
    knowledge: Knowledge, version: str, machine: str
) -> None:
    hw = make_hardware(**MACHINES[machine])  # type: ignore[arg-type]
    bazel = plan(hw, knowledge=knowledge, tf_version=version).bazel
    assert bazel is not None
    configs = _configs(version)
    emitted = [o.partition("=")[2] for o in bazel.options if o.startswith("--config=")]
    assert [name for name in emitted if name not in configs] == []
    gpus: tuple[Gpu, ...] = hw.gpus
    if gpus:
        # The variable hwtune sets last must be the one cuda_clang sets, or it overrides nothing.
        ours = {k for o in bazel.options for k, _ in REPO_ENV.findall(o)}
        theirs = {k for k in _repo_env(configs, "cuda_clang") if k.endswith("CAPABILITIES")}
        assert theirs and theirs <= ours


@pytest.mark.parametrize("version", VERSIONS)
def test_knowledge_names_only_configs_the_bazelrc_defines(
    knowledge: Knowledge, version: str
) -> None:
    configs = _configs(version)
    listed = knowledge.tf_by_version[version].configs
    assert sorted(set(listed) - set(configs)) == []


@pytest.mark.parametrize("version", VERSIONS)
def test_knowledge_cuda_facts_match_the_bazelrc(knowledge: Knowledge, version: str) -> None:
    tf = knowledge.tf_by_version[version]
    cuda = _repo_env(_configs(version), "cuda_clang")
    assert tf.cuda_scheme == "hermetic" and "HERMETIC_CUDA_VERSION" in cuda
    assert cuda["HERMETIC_CUDA_VERSION"] == tf.cuda_version
    assert cuda["HERMETIC_CUDNN_VERSION"] == tf.cudnn_version
    assert cuda["HERMETIC_CUDA_COMPUTE_CAPABILITIES"] == tf.official_cuda_compute_capabilities


def test_reader_follows_config_includes() -> None:
    # 2.21 moved the CUDA versions into build:cuda_version, reached via cuda_clang -> cuda.
    assert _repo_env(_configs("2.21"), "cuda_clang")["HERMETIC_CUDA_VERSION"] == "12.5.1"


@pytest.mark.parametrize("version", VERSIONS)
def test_knowledge_repo_env_defaults_match_the_bazelrc(knowledge: Knowledge, version: str) -> None:
    # Every default the knowledge states is a line of the version's .bazelrc, value included.
    listed = {d.name: d.value for d in knowledge.tf_by_version[version].bazelrc_repo_env}
    assert listed.items() <= _defaults(version).items()
    # and the defaults hwtune acts on are all stated, where the file sets them
    acted_on = {"USE_PYWRAP_RULES", "USE_HERMETIC_CC_TOOLCHAIN"}
    assert acted_on & set(_defaults(version)) <= set(listed)


@pytest.mark.parametrize("machine", sorted(MACHINES))
@pytest.mark.parametrize("version", ALL_VERSIONS)
def test_bazelrc_repeats_no_default_of_the_versions_bazelrc(
    knowledge: Knowledge, version: str, machine: str
) -> None:
    # "Only the settings that take effect": a `build --repo_env` line setting what the
    # version's own .bazelrc already sets for every build changes nothing (2.21 sets
    # USE_PYWRAP_RULES=True itself).
    hw = make_hardware(**MACHINES[machine])  # type: ignore[arg-type]
    bazel = plan(hw, knowledge=knowledge, tf_version=version).bazel
    assert bazel is not None
    tf = knowledge.tf_by_version[version]
    defaults = {d.name for d in tf.bazelrc_repo_env}
    if version in VERSIONS:  # and, where the .bazelrc could be read, every default it has
        defaults |= set(_defaults(version))
    written = [
        line
        for line in bazel.bazelrc.splitlines()
        if line.startswith("build ")
        for name, _ in REPO_ENV.findall(line)
        if name in defaults
    ]
    assert written == []
    for default in tf.bazelrc_repo_env:
        if default.name == "USE_PYWRAP_RULES" and tf.pywrap_rules:
            assert f"--repo_env={default.name}: left out" in bazel.bazelrc


@pytest.mark.parametrize("machine", sorted(MACHINES))
@pytest.mark.parametrize("version", ALL_VERSIONS)
def test_configure_answers_take_effect_under_the_versions_cc_toolchain(
    knowledge: Knowledge, version: str, machine: str
) -> None:
    # ./configure reads TF_NEED_CLANG only without CUDA; and from 2.21 the .bazelrc compiles
    # with the hermetic clang (USE_HERMETIC_CC_TOOLCHAIN=1):
    # ./configure's TF_NEED_CLANG=1 would only look for a local clang (failing without one) and
    # write CLANG_COMPILER_PATH / --repo_env=CC lines that toolchain ignores.
    hw = make_hardware(**MACHINES[machine])  # type: ignore[arg-type]
    bazel = plan(hw, knowledge=knowledge, tf_version=version).bazel
    assert bazel is not None
    tf = knowledge.tf_by_version[version]
    hermetic = tf.bazelrc_sets("USE_HERMETIC_CC_TOOLCHAIN")
    if version in VERSIONS:
        assert (hermetic is not None) == (
            _defaults(version).get("USE_HERMETIC_CC_TOOLCHAIN") == "1"
        )
    script = render_configure_env(bazel, knowledge)
    if bazel.configure_env["TF_NEED_CUDA"] == "1":
        # configure.py's main() asks TF_NEED_CLANG only in the else branch of TF_NEED_CUDA:
        # exported for a CUDA build it would be a line that takes no effect.
        assert "TF_NEED_CLANG" not in bazel.configure_env and "TF_NEED_CLANG=" not in script
        assert "TF_NEED_CLANG (./configure): left out" in bazel.bazelrc
    elif hermetic is not None and hermetic.value == "1":
        assert bazel.configure_env.get("TF_NEED_CLANG") == "0"
        assert "export TF_NEED_CLANG=0" in script and "CLANG_COMPILER_PATH" not in script
        assert "TF_NEED_CLANG=0 (./configure)" in bazel.bazelrc
    else:
        assert bazel.configure_env.get("TF_NEED_CLANG") == "1"
