"""The TensorFlow probe: fake site-packages trees (real files, real ELF objects) for the cases a
machine can be in, snapshots, TF's own policies, and a real TensorFlow in a subprocess to check
that missing_isa, cuda_build and the oneDNN default are what TensorFlow itself says."""

from __future__ import annotations

import json
import os
import platform
import re
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from hwtune.models.hardware import Arch, CpuInfo, TensorFlowInfo
from hwtune.probes.issues import IssueLog
from hwtune.probes.tensorflow import SNAPSHOT_FILE, probe_tensorflow, save_tf_snapshot
from hwtune.probes.tf_install import BuildInfoError, parse_build_info, parse_metadata
from hwtune.probes.tf_knowledge import GUARD_FLAG, onednn_default, parse_version
from tests.conftest import REPO
from tests.test_elf import build_elf

STOCK_NEEDED = ["libpthread.so.0", "libm.so.6", "libstdc++.so.6", "libc.so.6"]
MANYLINUX = "cp311-cp311-manylinux_2_27_x86_64"
# A Sapphire Rapids-like CPU: everything the 2.16+ guard checks except the int8/convert pair.
SPR_FLAGS = (
    "amx_bf16",
    "amx_int8",
    "amx_tile",
    "avx",
    "avx2",
    "avx512_bf16",
    "avx512_fp16",
    "avx512_vnni",
    "avx512f",
    "avx_vnni",
    "fma",
    "pni",
    "sse",
    "sse2",
    "sse4_1",
    "sse4_2",
    "ssse3",
)
SPR = CpuInfo(arch="x86_64", flags=SPR_FLAGS)
HASWELL = CpuInfo(arch="x86_64", flags=("avx", "avx2", "fma", "pni", "sse", "sse2", "sse4_2"))
CPU_BUILD_INFO = (
    '"""Auto-generated module providing information about the build."""\nimport collections\n\n'
    "build_info = collections.OrderedDict([('is_cuda_build', False), ('is_rocm_build', False), "
    "('is_tensorrt_build', False)])\n"
)
CUDA_BUILD_INFO = (
    "import collections\nbuild_info = collections.OrderedDict([('cpu_compiler', "
    "'/usr/lib/llvm-18/bin/clang'), ('cuda_compute_capabilities', ['sm_60', 'compute_90']), "
    "('cuda_version', '12.5.1'), ('cudnn_version', '9'), ('is_cuda_build', True), "
    "('is_rocm_build', False), ('is_tensorrt_build', False)])\n"
)


def make_site(
    site: Path,
    *,
    dist: str = "tensorflow_cpu",
    version: str = "2.21.0",
    tag: str | None = MANYLINUX,
    installer: str = "pip",
    record_bytes: int = 200_000,
    package: bool = True,
    build_info: str | None = CPU_BUILD_INFO,
    objects: dict[str, bytes] | None = None,
) -> Path:
    """A site-packages directory holding one TensorFlow distribution, laid out as pip does."""
    meta = site / f"{dist}-{version}.dist-info"
    meta.mkdir(parents=True)
    (meta / "METADATA").write_text(
        f"Metadata-Version: 2.4\nName: {dist}\nVersion: {version}\n\nbody\n"
    )
    if tag:
        (meta / "WHEEL").write_text(f"Wheel-Version: 1.0\nRoot-Is-Purelib: false\nTag: {tag}\n")
    (meta / "INSTALLER").write_text(installer + "\n")
    (meta / "RECORD").write_bytes(b"x" * record_bytes)
    if package:
        pkg = site / "tensorflow"
        (pkg / "python" / "platform").mkdir(parents=True)
        (pkg / "__init__.py").write_text("raise ImportError('a fake: never to be imported')\n")
        if build_info is not None:
            (pkg / "python" / "platform" / "build_info.py").write_text(build_info)
        objects = (
            {"libtensorflow_framework.so.2": build_elf(STOCK_NEEDED)}
            if objects is None
            else objects
        )
        for name, data in objects.items():
            (pkg / name).write_bytes(data)
    return site


def probe(site: Path | list[Path], cpu: CpuInfo = SPR) -> tuple[TensorFlowInfo | None, IssueLog]:
    issues = IssueLog()
    paths = [str(p) for p in (site if isinstance(site, list) else [site])]
    return probe_tensorflow(Path("/"), issues, cpu, live=True, search_path=paths), issues


def reasons(issues: IssueLog) -> str:
    return "\n".join(f"{i.path}: {i.reason}" for i in issues)


# --- installs on disk ----------------------------------------------------------------------


def test_stock_wheel_uses_eigen_and_misses_what_the_guard_would_list(tmp_path: Path) -> None:
    info, issues = probe(make_site(tmp_path))
    assert info is not None and not len(issues), reasons(issues)
    assert (info.distribution, info.version, info.cuda_build) == (
        "tensorflow-cpu",
        "2.21.0",
        False,
    )
    assert info.location == str(tmp_path / "tensorflow")
    assert info.threading_runtime == "eigen" and info.openmp_library is None
    assert "libtensorflow_framework.so.2" in info.threading_runtime_basis
    assert "Eigen threadpool" in info.threading_runtime_basis
    assert info.compiled_isa == ("avx", "pni", "sse", "sse2", "sse4_1", "sse4_2", "ssse3")
    # TF >= 2.16 also checks AVX512_FP16; the CPU's SSE/AVX are compiled in, so not listed
    assert info.missing_isa == (
        "amx_bf16",
        "amx_int8",
        "amx_tile",
        "avx2",
        "avx512_bf16",
        "avx512_fp16",
        "avx512_vnni",
        "avx512f",
        "avx_vnni",
        "fma",
    )
    assert info.onednn_default is True


def test_the_guard_list_follows_the_tensorflow_version(tmp_path: Path) -> None:
    info, _ = probe(make_site(tmp_path, version="2.15.1"))
    assert info is not None and "avx512_fp16" not in info.missing_isa
    assert "amx_tile" in info.missing_isa
    info, _ = probe(make_site(tmp_path / "old", dist="tensorflow", version="2.8.0"), HASWELL)
    assert info is not None and info.missing_isa == ("avx2", "fma")
    assert info.onednn_default is False  # opt-in before 2.9


def test_openmp_build_is_told_from_dt_needed(tmp_path: Path) -> None:
    objects = {
        "libtensorflow_framework.so.2": build_elf(["libiomp5.so", *STOCK_NEEDED]),
        "libtensorflow_cc.so.2": build_elf(["libtensorflow_framework.so.2"]),
    }
    info, issues = probe(
        make_site(tmp_path, dist="intel_tensorflow", version="2.14.0", objects=objects)
    )
    assert info is not None
    assert info.threading_runtime == "openmp" and info.openmp_library == "libiomp5.so"
    assert (
        info.threading_runtime_basis
        == "libtensorflow_framework.so.2 links libiomp5.so (DT_NEEDED)"
    )
    assert info.onednn_default is True  # --config=mkl: always on
    assert info.compiled_isa == () and info.missing_isa == ()  # intel-tensorflow's flags unknown
    assert "compiled ISA unknown" in reasons(issues)


@pytest.mark.parametrize("name", ["libgomp.so.1", "libomp.so.5", "libgomp-a34b3233.so.1"])
def test_every_openmp_runtime_name_counts(tmp_path: Path, name: str) -> None:
    objects = {"python/_pywrap_tensorflow_internal.so": build_elf([name, "libc.so.6"])}
    info, issues = probe(make_site(tmp_path, objects=objects))
    assert info is not None and (info.threading_runtime, info.openmp_library) == ("openmp", name)
    # tensorflow-cpu is described as an Eigen build with -mavx: this one is not that build
    assert info.compiled_isa == () and info.missing_isa == () and info.onednn_default is None
    assert "built another way" in info.compiled_isa_basis
    assert "compiled ISA unknown" in reasons(issues)


def test_an_intel_tensorflow_without_openmp_is_not_the_mkl_build(tmp_path: Path) -> None:
    info, _ = probe(make_site(tmp_path, dist="intel_tensorflow", version="2.14.0"))
    assert info is not None and info.threading_runtime == "eigen"
    assert info.onednn_default is None  # not "always": the --config=mkl build is not this one
    assert "described as an OpenMP build" in info.compiled_isa_basis


def test_itex_cpu_plugin_means_openmp(tmp_path: Path) -> None:
    site = make_site(tmp_path)
    (site / "tensorflow-plugins").mkdir()
    (site / "tensorflow-plugins" / "libitex_cpu.so").write_bytes(build_elf(["libiomp5.so"]))
    info, _ = probe(site)
    assert info is not None and info.threading_runtime == "openmp"
    assert info.openmp_library == "libiomp5.so"
    assert "ITEX_OMP_THREADPOOL" in info.threading_runtime_basis


def test_metadata_without_a_package_is_a_broken_install(tmp_path: Path) -> None:
    info, issues = probe(make_site(tmp_path, package=False))
    assert info is not None
    assert (info.distribution, info.version, info.location) == ("tensorflow-cpu", "2.21.0", None)
    assert (
        info.threading_runtime == "eigen"
        and "expected of tensorflow-cpu@x86_64" in info.threading_runtime_basis
    )
    assert "package directory tensorflow/ is missing" in reasons(issues)


def test_unreadable_shared_object_and_garbage_build_info_are_issues(tmp_path: Path) -> None:
    site = make_site(
        tmp_path,
        build_info="build_info = {'is_cuda_build': \n",
        objects={"libtensorflow_framework.so.2": b"not an ELF file at all"},
    )
    info, issues = probe(site)
    assert info is not None and info.cuda_build is False
    by_path = {i.path: i for i in issues}
    bad_so = by_path[str(site / "tensorflow" / "libtensorflow_framework.so.2")]
    assert "bad magic" in bad_so.reason
    bad_info = by_path[str(site / "tensorflow" / "python" / "platform" / "build_info.py")]
    assert "not valid Python" in bad_info.reason and bad_info.line == 1
    # nothing readable: the table's expectation for the distribution stands in
    assert (
        info.threading_runtime == "eigen" and "binaries unreadable" in info.threading_runtime_basis
    )


def test_a_partly_unreadable_install_does_not_prove_eigen(tmp_path: Path) -> None:
    """The unreadable object may be the one that links OpenMP (intel-tensorflow's framework
    does): the readable ones alone cannot say "no OpenMP", so the table's "openmp" stands."""
    site = make_site(
        tmp_path,
        dist="intel_tensorflow",
        version="2.14.0",
        objects={
            "libtensorflow_framework.so.2": build_elf(["libiomp5.so", *STOCK_NEEDED])[:100],
            "python/_pywrap_tensorflow_internal.so": build_elf(["libtensorflow_framework.so.2"]),
        },
    )
    info, issues = probe(site)
    assert info is not None
    assert "libtensorflow_framework.so.2" in reasons(issues)
    assert info.threading_runtime == "openmp", info.threading_runtime_basis
    assert "expected of intel-tensorflow" in info.threading_runtime_basis


def test_cuda_build(tmp_path: Path) -> None:
    info, _ = probe(make_site(tmp_path, dist="tensorflow", build_info=CUDA_BUILD_INFO))
    assert info is not None
    assert (info.cuda_build, info.cuda_version, info.cudnn_version) == (True, "12.5.1", "9")


def test_package_without_metadata(tmp_path: Path) -> None:
    site = make_site(tmp_path)
    for meta in site.glob("*.dist-info"):
        for f in meta.iterdir():
            f.unlink()
        meta.rmdir()
    info, issues = probe(site)
    assert info is not None and (info.distribution, info.version) == ("unknown", "unknown")
    assert "no pip metadata" in reasons(issues)


def test_a_shim_distribution_defers_to_the_one_with_the_files(tmp_path: Path) -> None:
    site = make_site(
        tmp_path,
        dist="tensorflow_cpu_aws",
        version="2.12.0",
        tag="cp311-cp311-manylinux_2_17_aarch64",
    )
    shim = site / "tensorflow-2.12.0.dist-info"
    shim.mkdir()
    (shim / "METADATA").write_text("Name: tensorflow\nVersion: 2.12.0\n")
    (shim / "RECORD").write_text("tensorflow-2.12.0.dist-info/METADATA,,\n")
    info, issues = probe(site, CpuInfo(arch="aarch64", implementer="0x41", part="0xd0c"))
    assert info is not None and info.distribution == "tensorflow-cpu-aws"
    assert "installed over one another" not in reasons(issues)
    (shim / "RECORD").write_bytes(b"x" * 100_000)  # now both claim the files
    _, issues = probe(site, CpuInfo(arch="aarch64"))
    assert "installed over one another" in reasons(issues)


@pytest.mark.parametrize(
    ("tag", "installer", "why"),
    [
        ("cp311-cp311-linux_x86_64", "pip", "linux_x86_64"),
        (MANYLINUX, "conda", "conda"),
        (None, "pip", "no WHEEL file"),
    ],
)
def test_builds_not_from_pypi_have_an_unknown_isa(tmp_path: Path, tag, installer, why) -> None:  # type: ignore[no-untyped-def]
    info, issues = probe(make_site(tmp_path, tag=tag, installer=installer))
    assert info is not None and info.compiled_isa == () and info.missing_isa == ()
    assert why in info.compiled_isa_basis and "compiled ISA unknown" in reasons(issues)


def test_no_tensorflow_is_none_without_issues(tmp_path: Path) -> None:
    (tmp_path / "numpy").mkdir()
    (tmp_path / "numpy-2.0.0.dist-info").mkdir()
    (tmp_path / "a_file").write_text("")
    info, issues = probe([tmp_path, tmp_path / "missing", tmp_path / "a_file"])
    assert info is None and not len(issues)


def test_the_first_package_on_the_path_wins(tmp_path: Path) -> None:
    first = make_site(tmp_path / "user", version="2.20.0")
    make_site(tmp_path / "system", version="2.21.0")
    info, _ = probe([first, tmp_path / "system"])
    assert info is not None and info.version == "2.20.0"


# --- snapshots -------------------------------------------------------------------------------


def test_snapshot_rebuilds_the_same_info_with_the_same_issues(tmp_path: Path) -> None:
    site = make_site(tmp_path / "site", build_info="garbage(")
    dest = tmp_path / "snap"
    dest.mkdir()
    save_issues = IssueLog()
    save_tf_snapshot(dest, save_issues, search_path=[str(site)])
    assert "build_info.py" in reasons(save_issues)
    live, live_issues = probe(site)
    replayed = IssueLog()
    info = probe_tensorflow(dest, replayed, SPR, live=False)
    assert info == live and replayed.freeze() == live_issues.freeze()
    assert json.loads((dest / SNAPSHOT_FILE).read_text())["format"] == 1


def test_snapshot_of_a_machine_without_tensorflow(tmp_path: Path) -> None:
    save_tf_snapshot(tmp_path, IssueLog(), search_path=[str(tmp_path / "empty")])
    issues = IssueLog()
    assert probe_tensorflow(tmp_path, issues, SPR, live=False) is None and not len(issues)


def test_snapshot_absent_or_malformed(tmp_path: Path) -> None:
    issues = IssueLog()
    assert probe_tensorflow(tmp_path, issues, SPR, live=False) is None and not len(issues)
    (tmp_path / SNAPSHOT_FILE).write_text('{"format": 1,\n "install": {"distribution": 3}}')
    assert probe_tensorflow(tmp_path, issues, SPR, live=False) is None
    (tmp_path / SNAPSHOT_FILE).write_text('{"format": 1,\n oops}')
    assert probe_tensorflow(tmp_path, issues, SPR, live=False) is None
    got = [(i.path, i.line) for i in issues]
    assert got == [(SNAPSHOT_FILE, None), (SNAPSHOT_FILE, 2)]
    assert "'distribution': expected str" in issues.freeze()[0].reason


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("[" * 100_000, "nested more than"),  # RecursionError in json's scanner
        ("9" * 5000, "a number of 5000 digits"),  # int() refuses over 4300 digits
        ('{"format": 1, "install": null, "x": Infinity}', "Infinity is not a JSON number"),
        ('{"format": 1e400, "install": null}', "1e400 is beyond a double's range"),
    ],
    ids=["deep", "huge-number", "infinity", "overflow"],
)
def test_a_hostile_snapshot_is_an_issue_naming_it(tmp_path: Path, text: str, why: str) -> None:
    (tmp_path / SNAPSHOT_FILE).write_text(text)
    issues = IssueLog()
    assert probe_tensorflow(tmp_path, issues, SPR, live=False) is None
    assert [(i.path, why in i.reason) for i in issues] == [(SNAPSHOT_FILE, True)], list(issues)


# --- TensorFlow's policies and the pure parsers -----------------------------------------------


@pytest.mark.parametrize(
    ("policy", "version", "cpu", "want"),
    [
        ("cpu-policy", "2.21.0", SPR, True),
        ("cpu-policy", "2.21.0", HASWELL, False),
        ("cpu-policy", "2.8.0", SPR, False),
        ("cpu-policy", "2.21.0", replace(HASWELL, flags=("avx_vnni",)), True),  # Alder Lake
        ("cpu-policy", "2.21.0", CpuInfo(arch="x86_64"), None),  # flags unknown
        ("cpu-policy", "2.16.1", CpuInfo(arch="aarch64", implementer="0x41", part="0xd40"), True),
        ("cpu-policy", "2.14.0", CpuInfo(arch="aarch64", implementer="0x41", part="0xd40"), None),
        ("cpu-policy", "2.16.1", CpuInfo(arch="aarch64", implementer="0x41", part="0xd0c"), False),
        ("always", "2.10.0", HASWELL, True),
        (None, "2.21.0", SPR, None),
        ("cpu-policy", "nightly", SPR, None),
    ],
)
def test_onednn_default_follows_tensorflows_policy(policy, version, cpu, want) -> None:  # type: ignore[no-untyped-def]
    assert onednn_default(policy, parse_version(version), cpu)[0] is want


@pytest.mark.parametrize(
    ("text", "want"),
    [
        (CPU_BUILD_INFO, (False, None, None)),
        (CUDA_BUILD_INFO, (True, "12.5.1", "9")),
        ("build_info = {'is_cuda_build': True, 'cuda_version': '11.2'}\n", (True, "11.2", None)),
        (
            "is_cuda_build = True\ncuda_version_number = '10.1'\ncudnn_version_number = '7'\n",
            (True, "10.1", "7"),
        ),
        ("build_info = dict(is_cuda_build=False)\n", (False, None, None)),
    ],
)
def test_build_info_forms(text: str, want: tuple[object, ...]) -> None:
    assert tuple(parse_build_info(text)) == want


@pytest.mark.parametrize(
    ("text", "message", "line"),
    [
        ("x = 1\n\nbuild_info = make()\n", "neither a dict literal", 3),
        ("build_info = {'is_cuda_build': 'yes'}\n", "not a bool", None),
        ("build_info = {}\n", "no boolean is_cuda_build", None),
        ("build_info = OrderedDict([('is_cuda_build', os.getenv('X'))])\n", "not a literal", 1),
    ],
)
def test_bad_build_info_says_what_and_where(text: str, message: str, line: int | None) -> None:
    with pytest.raises(BuildInfoError, match=message) as err:
        parse_build_info(text)
    assert err.value.line == line


def test_metadata_headers_stop_at_the_body() -> None:
    text = "Metadata-Version: 2.1\nName: tf-nightly\nVersion: 2.22.0.dev20260101\n\nName: no\n"
    assert parse_metadata(text) == ("tf-nightly", "2.22.0.dev20260101")
    assert parse_version("2.22.0.dev20260101") == (2, 22) and parse_version("x") is None


# --- a real TensorFlow -------------------------------------------------------------------------


def live_cpu() -> CpuInfo:
    """This machine's CPU from /proc/cpuinfo, read here so that the test needs no other probe."""
    text = Path("/proc/cpuinfo").read_text()

    def field(name: str) -> str | None:
        match = re.search(rf"^{name}\s*:\s*(.*)$", text, re.MULTILINE)
        return match[1].strip() if match else None

    arches: dict[str, Arch] = {"x86_64": "x86_64", "aarch64": "aarch64"}
    flags = field("flags") or field("Features") or ""
    return CpuInfo(
        arch=arches.get(platform.machine(), "unknown"),
        flags=tuple(sorted(flags.split())),
        implementer=field("CPU implementer"),
        part=field("CPU part"),
    )


REAL_TF = r"""
import json, tensorflow as tf
info = tf.sysconfig.get_build_info()
print("HWTUNE-JSON", json.dumps({"version": tf.__version__,
                                 "is_cuda_build": bool(info.get("is_cuda_build"))}))
"""
# The guard's line across versions: 2.13+ "To enable the following instructions: A B, in other
# operations"; 2.9-2.12 "...in performance-critical operations:  A B\nTo enable them";
# non-oneDNN builds "binary was not compiled to use: A B".
GUARD_LINE = re.compile(
    r"To enable the following instructions: (?P<a>[A-Z0-9_. ]+), in other operations"
    r"|performance-critical operations:\s+(?P<b>[A-Z0-9_. ]+)\n"
    r"|was not compiled to use: (?P<c>[A-Z0-9_. ]+)"
)


@pytest.fixture(scope="module")
def real_tensorflow() -> dict[str, object]:
    """Start a real TensorFlow once; what it logs and reports about itself."""
    import importlib.util

    if importlib.util.find_spec("tensorflow") is None:  # finds without importing
        pytest.skip("TensorFlow is not installed in this interpreter (pip install hwtune[tf])")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TF_", "ITEX_"))}
    env["TF_CPP_MIN_LOG_LEVEL"] = "0"
    env["CUDA_VISIBLE_DEVICES"] = ""  # the CPU guard is what is checked; keep GPUs out of it
    done = subprocess.run(
        [sys.executable, "-c", REAL_TF], capture_output=True, text=True, env=env, timeout=300
    )
    if done.returncode != 0:
        pytest.skip(f"`import tensorflow` fails here: {done.stderr.strip().splitlines()[-1:]}")
    reported: dict[str, object] = json.loads(done.stdout.split("HWTUNE-JSON", 1)[1])
    match = GUARD_LINE.search(done.stderr)
    names = (match["a"] or match["b"] or match["c"]).split() if match else []
    reported["guard"] = sorted(GUARD_FLAG[n] for n in names)
    reported["onednn_on"] = "oneDNN custom operations are on" in done.stderr
    return reported


@pytest.mark.tf
def test_probe_agrees_with_a_real_tensorflow(real_tensorflow: dict[str, object]) -> None:
    issues = IssueLog()
    info = probe_tensorflow(Path("/"), issues, live_cpu(), live=True)
    assert info is not None, "TensorFlow imports in a subprocess but the probe did not find it"
    assert info.version == real_tensorflow["version"]
    assert list(info.missing_isa) == real_tensorflow["guard"], reasons(issues)
    assert info.cuda_build is real_tensorflow["is_cuda_build"]
    if info.onednn_default is not None:
        assert info.onednn_default is real_tensorflow["onednn_on"]


NO_IMPORT = r"""
import sys
from pathlib import Path
from hwtune.models.hardware import CpuInfo
from hwtune.probes.issues import IssueLog
from hwtune.probes.tensorflow import probe_tensorflow
info = probe_tensorflow(Path("/"), IssueLog(), CpuInfo(arch="x86_64"), live=True)
print(info.distribution if info else None, "tensorflow" in sys.modules)
"""


@pytest.mark.tf
def test_the_probe_never_imports_tensorflow(real_tensorflow: dict[str, object]) -> None:
    done = subprocess.run(
        [sys.executable, "-c", NO_IMPORT], capture_output=True, text=True, cwd=REPO, check=True
    )
    distribution, imported = done.stdout.split()
    assert distribution != "None" and imported == "False"


@pytest.mark.tf
def test_detect_never_imports_tensorflow(real_tensorflow: dict[str, object]) -> None:
    code = (
        "import hwtune, sys; hw = hwtune.detect('/'); "
        "print(hw.tensorflow is not None, 'tensorflow' in sys.modules)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO)
    missing = re.search(r"No module named '(hwtune\.probes\.\w+)'", done.stderr)
    if done.returncode != 0 and missing:
        pytest.skip(f"detect cannot run yet: {missing[1]} is not written")
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["True", "False"]


def test_the_distribution_table_is_consistent() -> None:
    from hwtune.probes.tf_knowledge import load_distributions

    table = load_distributions()
    assert {"tensorflow@x86_64", "tensorflow-cpu@x86_64", "intel-tensorflow@x86_64"} <= {
        e.key for e in table
    }
    guard = set(GUARD_FLAG.values())
    for entry in table:
        assert entry.key == f"{entry.distribution}@{entry.arch}"
        if entry.compiled_isa is not None:
            assert list(entry.compiled_isa) == sorted(set(entry.compiled_isa)), entry.key
            if entry.arch == "x86_64":  # -mavx and below: SSE..SSE4.2 + AVX, nothing newer
                assert set(entry.compiled_isa) & guard <= {
                    "sse",
                    "sse2",
                    "pni",
                    "sse4_1",
                    "sse4_2",
                    "avx",
                }, entry.key
