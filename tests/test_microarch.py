"""The microarchitecture table and matcher: ids first, flags to verify, then flags alone."""

from __future__ import annotations

import json
import platform
import shutil
import subprocess
from pathlib import Path

import pytest

from hwtune.errors import KnowledgeError
from hwtune.knowledge import DATA_DIR, clear_cache, load_table
from hwtune.probes.microarch import (
    CpuIdentity,
    MicroarchEntry,
    _compile,
    arm_implementer_code,
    identify,
    load_microarchitectures,
    x86_64_level,
)

TABLE = load_microarchitectures()
REQUIRED = _compile(TABLE).required
BY_KEY = {e.key: e for e in TABLE}

# The names issue 2 and the task ask for, as GCC spells them.
REQUIRED_NAMES = [
    "nehalem",
    "westmere",
    "sandybridge",
    "ivybridge",
    "haswell",
    "broadwell",
    "skylake",
    "skylake-avx512",
    "cascadelake",
    "cooperlake",
    "icelake-client",
    "icelake-server",
    "tigerlake",
    "sapphirerapids",
    "emeraldrapids",
    "graniterapids",
    "alderlake",
    "raptorlake",
    "meteorlake",
    "arrowlake",
    "arrowlake-s",
    "lunarlake",
    "sierraforest",
    "znver1",
    "znver2",
    "znver3",
    "znver4",
    "znver5",
    "neoverse-n1",
    "neoverse-n2",
    "neoverse-v1",
    "neoverse-v2",
    "neoverse-v3",
    "a64fx",
    "ampere1",
    "ampere1a",
    "cortex-a72",
    "power8",
    "power9",
    "power10",
    "x86-64",
    "x86-64-v2",
    "x86-64-v3",
    "x86-64-v4",
]


def cpu_for(entry: MicroarchEntry, flags: frozenset[str] | None = None) -> CpuIdentity:
    """A CPU showing `entry`'s first id and (by default) exactly the flags it requires."""
    flags = REQUIRED[entry.key] if flags is None else flags
    if entry.x86_ids:
        family, _, models = entry.x86_ids[0].partition(":")
        return CpuIdentity(
            arch="x86_64",
            vendor=entry.vendor,
            family=int(family),
            model=int(models.split("-")[0], 16),
            flags=flags,
        )
    if entry.arm_ids:
        implementer, _, part = entry.arm_ids[0].partition(":")
        return CpuIdentity(
            arch="aarch64",
            vendor=implementer,
            arm_parts=((int(implementer, 16), int(part, 16)),),
            flags=flags,
        )
    if entry.power_pvrs:
        pvr = int(entry.power_pvrs[0], 16)
        return CpuIdentity(arch=entry.arch, vendor="IBM", pvr=pvr, flags=flags)
    if entry.riscv_ids:
        return CpuIdentity(arch=entry.arch, riscv_id=entry.riscv_ids[0], flags=flags)
    return CpuIdentity(arch=entry.arch, vendor=entry.vendor, cpu_name=entry.names[0], flags=flags)


def test_table_covers_the_required_names_with_sources() -> None:
    raw = json.loads((DATA_DIR / "microarchitectures.json").read_text())["entries"]
    keys = [e["key"] for e in raw]
    assert len(keys) == len(set(keys)), "duplicate keys"
    assert set(REQUIRED_NAMES) <= set(keys)
    for entry in TABLE:
        assert entry.source and entry.name, entry.key
        assert entry.gcc, f"{entry.key}: no minimum GCC"
        assert list(entry.flags) == sorted(entry.flags), entry.key
        assert not set(entry.extra_flags) & REQUIRED[entry.key], entry.key


IDENTIFIED = [
    e.key for e in TABLE if e.x86_ids or e.arm_ids or e.power_pvrs or e.riscv_ids or e.names
]


@pytest.mark.parametrize("key", IDENTIFIED)
def test_every_entry_is_told_by_its_ids_and_required_flags(key: str) -> None:
    found = identify(cpu_for(BY_KEY[key]))
    assert found.microarch == key, found.basis
    assert found.problem is None


def test_model_0x55_is_told_apart_by_flags() -> None:
    base = cpu_for(BY_KEY["skylake-avx512"])
    assert identify(base).microarch == "skylake-avx512"
    vnni = base._replace(flags=base.flags | {"avx512_vnni"})
    assert identify(vnni).microarch == "cascadelake"
    assert identify(vnni._replace(flags=vnni.flags | {"avx512_bf16"})).microarch == "cooperlake"


def test_hidden_optional_flags_keep_the_model_and_are_named() -> None:
    found = identify(cpu_for(BY_KEY["sapphirerapids"]))
    assert found.microarch == "sapphirerapids"
    assert "not visible to this system" in found.basis and "amx_tile" in found.basis


def test_masked_required_flag_falls_back_by_flags() -> None:
    spr = cpu_for(BY_KEY["sapphirerapids"])
    found = identify(spr._replace(flags=spr.flags - {"avx512_bf16"}))
    assert found.microarch == "icelake-server"
    assert "avx512_bf16 are absent" in found.basis
    assert found.problem is None


def test_unknown_model_uses_the_most_specific_fitting_entry() -> None:
    spr = cpu_for(BY_KEY["sapphirerapids"])
    # Emerald Rapids adds no flags: flags alone can never claim it.
    assert identify(spr._replace(model=0xFE)).microarch == "sapphirerapids"
    zen4 = cpu_for(BY_KEY["znver4"])
    found = identify(zen4._replace(family=27, model=0x10))
    assert found.microarch == "znver4"
    assert "no table entry for AuthenticAMD family 27" in found.basis
    assert found.threads_per_core is None


def test_unknown_vendor_gets_a_psabi_level() -> None:
    v3 = REQUIRED["x86-64-v3"] | {"rdrand"}
    found = identify(
        CpuIdentity(arch="x86_64", vendor="CentaurHauls", family=7, model=0x3B, flags=v3)
    )
    assert (found.microarch, found.x86_64_level) == ("x86-64-v3", 3)


@pytest.mark.parametrize(("level", "extra"), [(1, set()), (2, set()), (3, set()), (4, set())])
def test_x86_64_levels(level: int, extra: set[str]) -> None:
    flags = REQUIRED[["x86-64", "x86-64-v2", "x86-64-v3", "x86-64-v4"][level - 1]] | extra
    assert x86_64_level(frozenset(flags)) == level
    if level > 1:  # one missing flag drops a level
        assert x86_64_level(frozenset(flags - {sorted(BY_KEY[f"x86-64-v{level}"].flags)[0]})) == (
            level - 1
        )
    assert x86_64_level(frozenset()) is None


def test_nothing_fits_is_a_problem() -> None:
    found = identify(
        CpuIdentity(
            arch="x86_64", vendor="GenuineIntel", family=6, model=0x8F, flags=frozenset({"fpu"})
        )
    )
    assert found.microarch is None and found.problem and "0x8f" in found.problem
    unknown = identify(CpuIdentity(arch="unknown"))
    assert unknown.microarch is None and unknown.problem


def test_power_by_pvr_name_and_compat_mode() -> None:
    assert identify(CpuIdentity(arch="ppc64le", vendor="IBM", pvr=0x004E)).microarch == "power9"
    # A POWER9 LPAR in POWER8 compatibility mode may only use POWER8 instructions.
    compat = CpuIdentity(
        arch="ppc64le",
        vendor="IBM",
        pvr=0x004E,
        cpu_name="POWER8 (architected), altivec supported",
    )
    assert identify(compat).microarch == "power8"
    assert (
        identify(
            CpuIdentity(
                arch="ppc64le", vendor="IBM", pvr=0x0999, cpu_name="POWER12, altivec supported"
            )
        ).microarch
        == "powerpc64le"
    )


def test_arm_design_facts_and_unknown_parts() -> None:
    assert identify(cpu_for(BY_KEY["neoverse-v1"])).threads_per_core == 1
    assert identify(cpu_for(BY_KEY["thunderx2t99"])).threads_per_core == 4
    generic = CpuIdentity(
        arch="aarch64",
        vendor="0x48",
        arm_parts=((0x48, 0xD02),),
        flags=frozenset({"fp", "asimd", "atomics", "asimdrdm", "crc32"}),
    )
    assert identify(generic).microarch == "armv8.1-a"
    assert arm_implementer_code("ampere") == 0xC0


# Features lines of arch/arm64/kernel/cpuinfo.c on a Raspberry Pi 3 (Cortex-A53, 0xd03) and a
# Cortex-A55 (0xd05) phone core. Both parts are in the table now; a Cortex-A35 (0xd04, Armv8.0)
# and a Cortex-A65 (0xd06, Armv8.2) show the same features and are not.
A53_FEATURES = frozenset(("fp", "asimd", "evtstrm", "crc32", "cpuid"))
A55_FEATURES = A53_FEATURES | {
    "aes", "pmull", "sha1", "sha2", "atomics", "fphp", "asimdhp", "asimdrdm", "lrcpc", "dcpop",
    "asimddp",
}  # fmt: skip


@pytest.mark.parametrize(
    ("part", "features", "generic", "other_core"),
    [
        (0xD04, A53_FEATURES, "armv8-a", "cortex-a53"),
        (0xD06, A55_FEATURES, "armv8.2-a", "cortex-a55"),
    ],
    ids=["cortex-a35", "cortex-a65"],
)
def test_an_arm_part_the_table_lacks_gets_a_generic_level_not_another_core(
    part: int, features: frozenset[str], generic: str, other_core: str
) -> None:
    """Their flags fit `other_core`, whose -mcpu would tune for another design (the old
    fallback gave a Cortex-A53 -mcpu=cortex-a72, an out-of-order core; docs/cpu-detection.md,
    matcher step 3)."""
    assert REQUIRED[other_core] <= features  # what made the old fallback pick it
    found = identify(
        CpuIdentity(arch="aarch64", vendor="0x41", arm_parts=((0x41, part),), flags=features)
    )
    assert (found.microarch, found.model) == (generic, None)
    assert f"no table entry for CPU implementer 0x41 part {part:#05x}" in found.basis
    assert BY_KEY[generic].vendor is None  # a generic level, no vendor's core


def test_user_knowledge_adds_an_entry(tmp_path: Path) -> None:
    (tmp_path / "microarchitectures.json").write_text(
        json.dumps(
            {
                "entries": [
                    {
                        "key": "znver6",
                        "arch": "x86_64",
                        "name": "Zen 6",
                        "vendor": "AuthenticAMD",
                        "parents": ["znver5"],
                        "x86_ids": ["26:0x50-0x5f"],
                        "gcc": "16",
                        "source": "me",
                    }
                ]
            }
        )
    )
    clear_cache()
    try:
        entries = load_table("microarchitectures", MicroarchEntry, extra_dirs=(tmp_path,))
        cpu = cpu_for(BY_KEY["znver5"])._replace(model=0x50)
        assert identify(cpu, entries).microarch == "znver6"
        assert identify(cpu).microarch == "znver5"  # the shipped table alone does not know it
    finally:
        clear_cache()


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"parents": ("nope",)}, "unknown parent 'nope'"),
        ({"x86_ids": ("6:zz",)}, "bad id"),
        ({"parents": ("loop",), "key": "loop"}, "cycle"),
    ],
)
def test_bad_entries_are_knowledge_errors(change: dict[str, object], message: str) -> None:
    entry = MicroarchEntry(
        **{"key": "bad", "arch": "x86_64", "name": "n", "source": "s", **change}
    )  # type: ignore[arg-type]
    with pytest.raises(KnowledgeError, match=message):
        identify(CpuIdentity(arch="x86_64"), (*TABLE, entry))


def _gcc_targets_x86() -> bool:
    if shutil.which("gcc") is None or platform.machine() != "x86_64":
        return False
    return subprocess.run(
        ["gcc", "-dumpmachine"], capture_output=True, text=True, check=False
    ).stdout.startswith("x86_64")


@pytest.mark.skipif(not _gcc_targets_x86(), reason="needs a gcc that targets x86-64")
def test_local_gcc_agrees_with_the_minimum_versions() -> None:
    """Names at or below the local GCC's version must be accepted, newer ones refused."""
    version = subprocess.run(
        ["gcc", "-dumpfullversion"], capture_output=True, text=True, check=True
    ).stdout.strip()
    local = tuple(int(part) for part in version.split("."))
    wrong = []
    for entry in TABLE:
        if entry.arch != "x86_64" or entry.gcc is None:
            continue
        ran = subprocess.run(
            [
                "gcc",
                f"{entry.option}={entry.march or entry.key}",
                "-x",
                "c",
                "-c",
                "/dev/null",
                "-o",
                "/dev/null",
            ],
            capture_output=True,
            check=False,
        )
        known = tuple(int(part) for part in entry.gcc.split(".")) <= local
        if (ran.returncode == 0) != known:
            wrong.append(f"{entry.key} (gcc >= {entry.gcc}): gcc {version} rc={ran.returncode}")
    assert not wrong
