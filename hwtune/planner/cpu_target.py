"""The CPU target of a source build: -march from the flags the CPU shows, -mtune from its model.

One rule (issue 13): a target is used for -march only when every flag it lets the compiler
emit is visible and TF's clang knows it; otherwise the next safer target down its fallback
chain, ending at a generic level (x86-64-vN, armv8-a). The model the ids name decides -mtune,
which emits no instruction and so needs only a compiler that knows the name.
"""

from __future__ import annotations

from hwtune.models.hardware import Hardware
from hwtune.planner.knowledge import CompilerTarget, Knowledge, TfVersionEntry, version_tuple

GENERIC_TARGETS = {
    "x86_64": ("x86-64-v4", "x86-64-v3", "x86-64-v2", "x86-64"),
    "aarch64": ("armv8-a",),
    "ppc64le": ("powerpc64le",),
    "riscv64": ("rv64gcv", "rv64gc"),
}


def tune_target(
    hw: Hardware, tf: TfVersionEntry, knowledge: Knowledge, target: CompilerTarget | None
) -> tuple[str | None, str]:
    """-mtune for the model the ids name, when -march had to follow the flags to another target.

    Tuning emits no instruction the CPU may lack, so flags do not limit it, only the compiler:
    the model's own name, else the nearest older design on its fallback chain that TF's clang
    knows. Generic levels (x86-64-v4, armv8.2-a) are not -mtune names.
    """
    model = hw.cpu.model_microarch
    table = knowledge.compiler_by_name
    if model is None or (target is not None and model == target.key) or model not in table:
        return None, ""
    march = target.flag.partition("=")[2] if target is not None else None
    generic = {key for keys in GENERIC_TARGETS.values() for key in keys}
    skipped: list[str] = []
    entry: CompilerTarget | None = table[model]
    seen: set[str] = set()
    while entry is not None and entry.key not in seen:
        seen.add(entry.key)
        name = entry.flag.partition("=")[2]
        if entry.key in generic or name.startswith(("x86-64", "armv", "rv64", "rv32")):
            return None, ""
        if version_tuple(entry.clang_min) <= version_tuple(tf.clang):
            if name == march:
                return None, ""
            if not hw.cpu.flags:  # lscpu pasted without its Flags line
                follows = "the CPU's flags are unknown, so -march stays at the baseline"
            else:
                follows = "-march follows the flags the CPU shows"
            why = (
                f"the model decides tuning: the ids name {model}; {follows}, and -mtune emits "
                "no instruction it could lack"
            )
            if skipped:
                why += (
                    f"; clang {tf.clang} (TF {tf.key}'s compiler) does not know "
                    f"{', '.join(skipped)}, so {name}, the nearest design it knows"
                )
            return name, why
        skipped.append(f"{entry.key} (clang ≥ {entry.clang_min})")
        entry = table.get(entry.fallback) if entry.fallback else None
    return None, ""


# ISA extensions a fallback -march can leave out while the CPU shows them, as the compiler
# flag that adds one back and the oldest clang that knows it (clang release notes: AVX512_BF16
# in 9, AMX in 12, AVX-VNNI in 12, AVX512_FP16 in 14). Kernel flag names, as `requires` uses.
ADD_BACK: dict[str, tuple[str, str]] = {
    "avx512_vnni": ("-mavx512vnni", "6"),
    "avx512_bf16": ("-mavx512bf16", "9"),
    "avx_vnni": ("-mavxvnni", "12"),
    "avx512_fp16": ("-mavx512fp16", "14"),
    "amx_tile": ("-mamx-tile", "12"),
    "amx_bf16": ("-mamx-bf16", "12"),
    "amx_int8": ("-mamx-int8", "12"),
}


def added_back(
    hw: Hardware, tf: TfVersionEntry, knowledge: Knowledge, target: CompilerTarget
) -> list[tuple[str, str]]:
    """(flag, why) for each extension the microarchitecture's own target would emit and the
    CPU shows, but the fallback `target` -march does not imply: sapphirerapids → icelake-server
    (AMX masked by a hypervisor) drops AVX512_BF16, which the guest still has."""
    first = knowledge.compiler_by_name.get(hw.cpu.microarch or "")
    if first is None or first.key == target.key:
        return []
    found = []
    for feature in first.requires:
        if feature in target.requires or feature not in hw.cpu.flags or feature not in ADD_BACK:
            continue
        flag, clang_min = ADD_BACK[feature]
        if version_tuple(clang_min) > version_tuple(tf.clang):
            continue
        found.append(
            (
                flag,
                f"{target.flag} leaves out {feature}, which {first.key} has and this CPU shows: "
                f"added back (clang ≥ {clang_min} knows {flag})",
            )
        )
    return found


def choose_target(
    hw: Hardware, tf: TfVersionEntry, knowledge: Knowledge
) -> tuple[CompilerTarget | None, list[str]]:
    """The most specific target both the CPU and TF's compiler accept, and why others were not."""
    table = knowledge.compiler_by_name
    notes: list[str] = []
    name = hw.cpu.microarch
    target = table.get(name) if name else None
    if name and target is None:
        notes.append(f"{name} is not in the compiler table")
    seen: set[str] = set()
    while target is not None and target.key not in seen:
        seen.add(target.key)
        problem = target_problem(hw, tf, target)
        if problem is None:
            return target, notes
        notes.append(f"not {target.flag}: {problem}")
        target = table.get(target.fallback) if target.fallback else None
    for key in GENERIC_TARGETS.get(hw.cpu.arch, ()):
        generic = table.get(key)
        if generic is not None and target_problem(hw, tf, generic) is None:
            return generic, notes
    return None, notes


def target_problem(hw: Hardware, tf: TfVersionEntry, target: CompilerTarget) -> str | None:
    """Why `target` cannot be used, or None."""
    if target.arch != hw.cpu.arch:
        return f"a {target.arch} target on a {hw.cpu.arch} CPU"
    if version_tuple(target.clang_min) > version_tuple(tf.clang):
        return (
            f"TensorFlow {tf.key} builds with clang {tf.clang}, which predates it "
            f"(needs clang ≥ {target.clang_min})"
        )
    missing = [flag for flag in target.requires if flag not in hw.cpu.flags]
    if missing:
        return f"the CPU does not show {', '.join(missing)} (masked by a hypervisor?)"
    return None
