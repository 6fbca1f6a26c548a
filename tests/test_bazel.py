"""Bazel options for TensorFlow source builds: -march per compiler, CUDA scheme, bazelrc."""

from __future__ import annotations

import dataclasses
import json
import shlex
import subprocess

import pytest

from hwtune.errors import PlanError
from hwtune.knowledge import DATA_DIR
from hwtune.models.hardware import CpuInfo, Gpu
from hwtune.planner import Knowledge, load_knowledge, plan
from hwtune.planner.bazel import cuda_capabilities, render_configure_env
from hwtune.planner.knowledge import version_tuple
from tests.conftest import REPO
from tests.plan_builders import ZEN4_FLAGS, make_gpus, make_hardware, tf_info

NEVER_EMIT = {
    "avx2_linux",
    "native_arch_linux",
    "avx2_win",
    "numa",
    "noignite",
    "nokafka",
    "gdr",
    "verbs",
    "ngraph",
    "mkl_open_source_only",
    "opt",
}


@pytest.fixture(scope="module")
def knowledge() -> Knowledge:
    return load_knowledge(extra_dirs=())


def options(knowledge: Knowledge, tf_version: str | None = None, **hw: object) -> tuple[str, ...]:
    profile = plan(make_hardware(**hw), knowledge=knowledge, tf_version=tf_version)  # type: ignore[arg-type]
    assert profile.bazel is not None
    return profile.bazel.options


def test_caps_sass_for_all_but_the_highest(knowledge: Knowledge) -> None:
    tf = knowledge.tf_by_version["2.19"]
    gpus = make_gpus(1, cc="7.0") + make_gpus(1, cc="8.0") + make_gpus(1, cc="8.0")
    assert cuda_capabilities(gpus, tf)[0] == "sm_70,compute_80"
    assert cuda_capabilities(make_gpus(2, cc="8.6"), tf)[0] == "compute_86"


def test_caps_beyond_the_versions_cuda_become_ptx(knowledge: Knowledge) -> None:
    tf = knowledge.tf_by_version["2.19"]
    caps, notes = cuda_capabilities(make_gpus(1, cc="10.0") + make_gpus(1, cc="8.0"), tf)
    assert caps == "sm_80,compute_90"
    assert any("cannot compile SASS for sm_100" in note for note in notes)
    caps, notes = cuda_capabilities(make_gpus(1, cc="5.2"), knowledge.tf_by_version["2.18"])
    assert caps is None and "below" in notes[0]


def test_cuda_scheme_follows_the_version(knowledge: Knowledge) -> None:
    gpus = make_gpus(2, cc="8.0")
    legacy = options(knowledge, "2.17", gpus=gpus)
    assert "--repo_env=TF_CUDA_COMPUTE_CAPABILITIES=compute_80" in legacy
    assert "--config=cuda_wheel" not in legacy
    hermetic = options(knowledge, "2.18", gpus=gpus)
    assert "--repo_env=HERMETIC_CUDA_COMPUTE_CAPABILITIES=compute_80" in hermetic
    assert hermetic.index("--config=cuda_clang") < hermetic.index(
        "--repo_env=HERMETIC_CUDA_COMPUTE_CAPABILITIES=compute_80"
    ), "the caps must come after cuda_clang, whose official list they replace"
    assert "--config=cuda_wheel" in hermetic


def test_march_checked_against_the_versions_clang(knowledge: Knowledge) -> None:
    zen5 = (*ZEN4_FLAGS, "avx_vnni", "avx512_vp2intersect", "movdiri", "movdir64b")
    profile = plan(
        make_hardware(flags=zen5, microarch="znver5"), knowledge=knowledge, tf_version="2.21"
    )
    assert profile.bazel is not None
    assert "--copt=-march=znver4" in profile.bazel.options
    assert any("needs clang ≥ 19" in line for line in profile.bazel.reasons)
    assert "--copt=-march=znver4" in options(knowledge, "2.15")  # clang 16 knows znver4


def test_march_reason_shows_an_arrow_only_for_another_target(knowledge: Knowledge) -> None:
    def why(microarch: str, flags: tuple[str, ...] = ZEN4_FLAGS) -> str:
        profile = plan(make_hardware(flags=flags, microarch=microarch), knowledge=knowledge)
        assert profile.bazel is not None
        (line,) = [r for r in profile.bazel.reasons if r.startswith("--copt=-march=")]
        return line

    # The CPU's own target is no translation: not "znver4 → znver4".
    assert why("znver4").startswith("--copt=-march=znver4: znver4, this CPU's microarch")
    assert "→" not in why("znver4")
    zen5 = (*ZEN4_FLAGS, "avx_vnni", "avx512_vp2intersect", "movdiri", "movdir64b")
    assert why("znver5", zen5).startswith("--copt=-march=znver4: znver5 → znver4, accepted")


def test_masked_flags_fall_back(knowledge: Knowledge) -> None:
    # A Sapphire Rapids guest whose hypervisor hides AMX (the GCP C3 capture):
    # not -march=sapphirerapids.
    icx = (*(f for f in ZEN4_FLAGS if f != "clzero"), "avx512_fp16")
    profile = plan(make_hardware(flags=icx, microarch="sapphirerapids"), knowledge=knowledge)
    assert profile.bazel is not None
    assert "--copt=-march=icelake-server" in profile.bazel.options
    assert any("amx_tile" in line for line in profile.bazel.reasons)


def test_unknown_or_missing_microarch_uses_the_x86_level(knowledge: Knowledge) -> None:
    assert "--copt=-march=x86-64-v4" in options(knowledge, microarch="znver9")
    assert "--copt=-march=x86-64-v4" in options(knowledge, microarch=None)
    assert "--copt=-march=x86-64" in options(knowledge, microarch=None, flags=())


def test_aarch64_uses_mcpu_and_the_acl_config(knowledge: Knowledge) -> None:
    flags = (
        "asimd",
        "asimddp",
        "atomics",
        "bf16",
        "fphp",
        "asimdhp",
        "i8mm",
        "sve",
        "asimdrdm",
        "dcpop",
    )
    opts = options(knowledge, "2.18", arch="aarch64", microarch="neoverse-v1", flags=flags)
    assert "--copt=-mcpu=neoverse-v1" in opts
    assert "--config=mkl_aarch64_threadpool" in opts


def test_configs_exist_in_the_version(knowledge: Knowledge) -> None:
    for version in knowledge.tf_by_version:
        tf = knowledge.tf_by_version[version]
        assert not NEVER_EMIT & set(tf.configs), version
        opts = options(knowledge, version, gpus=make_gpus(2), arch="x86_64")
        for option in opts:
            if option.startswith("--config="):
                assert option.removeprefix("--config=") in tf.configs, (version, option)


def test_tf_version_resolution(knowledge: Knowledge) -> None:
    def version(**hw: object) -> str | None:
        bazel = plan(make_hardware(**hw), knowledge=knowledge).bazel  # type: ignore[arg-type]
        return bazel.tf_version if bazel else None

    assert version() == knowledge.newest_tf.key
    assert version(tensorflow=tf_info("2.17.1")) == "2.17"
    with pytest.raises(PlanError) as err:
        plan(make_hardware(), knowledge=knowledge, tf_version="2.91")
    assert "2.15–2.21" in err.value.message and (err.value.hint or "").startswith(
        "did you mean 2."
    )
    newer = plan(make_hardware(tensorflow=tf_info("2.99.0")), knowledge=knowledge)
    assert newer.bazel is None
    assert any(item.name == "bazel" and "--tf-version" in item.reason for item in newer.left_out)


def test_bazelrc_renders_every_option(knowledge: Knowledge) -> None:
    profile = plan(
        make_hardware(gpus=make_gpus(2), quota=1.0, memory_limit=6 * 2**30), knowledge=knowledge
    )
    bazel = profile.bazel
    assert bazel is not None
    assert "--local_cpu_resources=1" in bazel.options
    assert "--local_ram_resources=4096" in bazel.options
    lines = [line for line in bazel.bazelrc.splitlines() if line.startswith("build ")]
    assert lines == [f"build {option}" for option in bazel.options]
    assert "$" not in bazel.bazelrc
    assert profile.fingerprint in bazel.bazelrc
    script = render_configure_env(bazel, knowledge)
    assert "export CC_OPT_FLAGS='-march=znver4 -Wno-sign-compare'" in script
    assert "export HERMETIC_CUDA_COMPUTE_CAPABILITIES=compute_80" in script
    tf = knowledge.tf_by_version[bazel.tf_version]
    assert set(bazel.configure_env) <= set(tf.cc_env)
    # The script is valid shell that exports what it says.
    out = subprocess.run(
        ["sh", "-c", script + '\nprintf %s "$CC_OPT_FLAGS"'],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert shlex.split(out) == ["-march=znver4", "-Wno-sign-compare"]


def test_every_target_has_a_known_fallback_and_detected_names_are_covered(
    knowledge: Knowledge,
) -> None:
    names = {entry.key for entry in knowledge.compilers}
    for entry in knowledge.compilers:
        assert entry.fallback is None or entry.fallback in names, entry.key
        assert version_tuple(entry.clang_min) and version_tuple(entry.gcc_min), entry.key
    microarchs = DATA_DIR / "microarchitectures.json"
    if microarchs.is_file():  # every name the CPU probe can report has a compiler target
        detected = {e["key"] for e in json.loads(microarchs.read_text())["entries"]}
        assert detected <= set(knowledge.compiler_by_name), detected - set(
            knowledge.compiler_by_name
        )


def test_templates_ship_with_the_package() -> None:
    pyproject = (REPO / "pyproject.toml").read_text()
    assert '"hwtune.bazel_templates" = "bazel_templates"' in pyproject
    assert (REPO / "bazel_templates" / "tensorflow.bazelrc.tmpl").is_file()


def test_no_march_off_known_arches(knowledge: Knowledge) -> None:
    hw = make_hardware(arch="s390x", microarch=None, flags=())
    hw = dataclasses.replace(hw, cpu=dataclasses.replace(hw.cpu, arch="s390x"))
    assert isinstance(hw.cpu, CpuInfo)
    profile = plan(hw, knowledge=knowledge)
    assert profile.bazel is not None
    assert not any("march" in option or "mcpu" in option for option in profile.bazel.options)
    assert profile.env["TF_ENABLE_ONEDNN_OPTS"].value == "0"


def test_tables_validate_with_pydantic() -> None:
    """The same dataclasses, checked by pydantic in strict mode (as the schema tests do)."""
    from pydantic import TypeAdapter

    from hwtune.planner.knowledge import CompilerTarget, TfVersionEntry

    for table, cls in (("tensorflow_versions", TfVersionEntry), ("compilers", CompilerTarget)):
        entries = json.loads((DATA_DIR / f"{table}.json").read_text())["entries"]
        TypeAdapter(list[cls]).validate_python(entries, strict=False)  # type: ignore[valid-type]
        keys = [e["key"] for e in entries]
        assert len(keys) == len(set(keys)), table


def test_caps_reason_says_which_list_it_is(knowledge: Knowledge) -> None:
    def reason(gpus: tuple[Gpu, ...]) -> str:
        profile = plan(make_hardware(gpus=gpus), knowledge=knowledge, tf_version="2.19")
        assert profile.bazel is not None
        return next(line for line in profile.bazel.reasons if "COMPUTE_CAPABILITIES" in line)

    assert "the detected GPUs' compute capabilities" in reason(make_gpus(2, cc="8.0"))
    unknown = dataclasses.replace(make_gpus(1)[0], compute_capability=None)
    assert "official list (a GPU's compute capability is unknown)" in reason((unknown,))


@pytest.mark.parametrize("version", ["2.15", "2.16", "2.17", "2.18", "2.19", "2.21"])
def test_a_gpu_newer_than_the_cuda_is_explained_in_that_versions_terms(
    knowledge: Knowledge, version: str
) -> None:
    """Each version's own CUDA setting, clang and configs: no HERMETIC_CUDA_VERSION for the
    legacy flow, no --config=cuda_nvcc where its .bazelrc lacks it."""
    tf = knowledge.tf_by_version[version]
    _, notes = cuda_capabilities(make_gpus(1, cc="12.0", name="NVIDIA GeForce RTX 5090"), tf)
    text = " ".join(notes)
    assert f"clang {tf.clang}" in text
    assert ("cuda_nvcc" in text) == ("cuda_nvcc" in tf.configs)
    assert ("HERMETIC_CUDA_VERSION" in text) == (tf.cuda_scheme == "hermetic")
