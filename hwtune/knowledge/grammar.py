"""The grammar of every knowledge field: values are data, never text that lands in a file as is.

Knowledge values end up in rendered files: a compiler `flag` becomes `--copt=<flag>` in
tensorflow.bazelrc, a `pip_target` the target of `bazel build`, a `configs` name
`--config=<name>`, a `cc_env` name a variable ./configure reads. A user override with a
newline or a space in one of those would write new directives into the file (`try-import`,
`--run_under=...`, issue 15). So each field has a grammar, checked when the table is loaded
(shipped and user files alike), and a value outside it is a `KnowledgeError` naming the file,
the entry and the field.

- Token fields (names, versions, flags, labels) match a regular expression of one token.
- Every other string (a `source`, a `name`, `notes`) is one printable line of bounded length:
  no newline, tab, other control character or Unicode line separator (`str.isprintable`).
"""

from __future__ import annotations

import dataclasses
import re
from typing import Any

from hwtune.errors import KnowledgeError

# A prose field longer than this is damage, not a citation (the longest shipped `source` is
# under 400 characters).
MAX_TEXT = 2000
# A GPU name pattern is a short regular expression ("\bA100\b"); longer ones are refused so a
# planted pattern cannot make every detect spend its time in the regex engine.
MAX_PATTERN = 200

_VERSION = r"\d{1,9}(\.\d{1,9}){0,3}"  # "12", "16.0.6", "450.80.02"
_NAME = r"[A-Za-z0-9][A-Za-z0-9_.+-]{0,63}"  # "znver4", "armv8.2-a+sve", "neoverse-v1"
_CAPABILITY = r"\d{1,2}\.\d{1,2}"  # "8.0"
_CUDA_TARGET = r"(sm|compute)_\d{2,3}[a-z]?"  # "sm_90a", "compute_90"

_ANY_TABLE: dict[str, str] = {
    "key": r"[A-Za-z0-9][A-Za-z0-9_.+@-]{0,63}",
    "arch": r"x86_64|aarch64|ppc64le|[a-z0-9_]{1,16}",
}

# table -> field -> the regular expression a value (or each item of a list) must match whole.
FIELDS: dict[str, dict[str, str]] = {
    "tensorflow_versions": {
        "key": r"\d{1,3}\.\d{1,3}",
        "bazel": _VERSION,
        "clang": _VERSION,
        "cuda_version": _VERSION,
        "cudnn_version": _VERSION,
        # TF_CUDA_COMPUTE_CAPABILITIES: "sm_60,sm_70,compute_90" (TF's configure.py)
        "official_cuda_compute_capabilities": f"({_CUDA_TARGET},)*{_CUDA_TARGET}",
        "min_cuda_cc": _CAPABILITY,
        "max_cuda_cc": _CAPABILITY,
        # build:<name> in TensorFlow's .bazelrc
        "configs": r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}",
        "configs_uncertain": r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}",
        # an environment variable name (POSIX: letters, digits, underscore)
        "cc_env": r"[A-Z_][A-Z0-9_]{0,63}",
        # a Bazel label in the main repository: //package/path:target
        "pip_target": r"//[A-Za-z0-9_][A-Za-z0-9_/.-]{0,199}(:[A-Za-z0-9_][A-Za-z0-9_.+-]{0,99})?",
        "gcc_min": _VERSION,
        "python": r"\d{1,2}\.\d{1,3}(-\d{1,2}\.\d{1,3})?",
        # bazelrc_repo_env[]: `build --repo_env NAME=VALUE` of the version's .bazelrc
        "name": r"[A-Z_][A-Z0-9_]{0,63}",
        "value": r"[A-Za-z0-9_.-]{1,64}",
    },
    "compilers": {
        "key": _NAME,
        # -march=NAME / -mcpu=NAME with GCC's +feature suffixes ("-march=armv8.2-a+sve")
        "flag": r"-m(arch|cpu|tune)=[A-Za-z0-9][A-Za-z0-9_.+-]{0,63}",
        "gcc_min": _VERSION,
        "clang_min": _VERSION,
        "requires": r"[a-z0-9_]{1,32}",  # kernel CPU flag names (/proc/cpuinfo)
        "fallback": _NAME,
        "aliases": _NAME,
    },
    "cuda_versions": {
        "key": _VERSION,
        "min_driver": _VERSION,
        "new_sass": _CAPABILITY,
    },
    "microarchitectures": {
        "key": _NAME,
        "flags": r"[a-z0-9_]{1,32}",
        "extra_flags": r"[a-z0-9_]{1,32}",
        "gcc": _VERSION,
        "clang": _VERSION,
        "parents": _NAME,
        "vendor": r"[A-Za-z0-9_]{1,32}",
        "x86_ids": r"\d{1,3}:0x[0-9a-fA-F]{1,4}(-0x[0-9a-fA-F]{1,4})?",
        "hybrid_x86_ids": r"\d{1,3}:0x[0-9a-fA-F]{1,4}(-0x[0-9a-fA-F]{1,4})?",
        "arm_ids": r"0x[0-9a-fA-F]{1,4}:0x[0-9a-fA-F]{1,4}",
        "power_pvrs": r"0x[0-9a-fA-F]{1,8}",
        "option": r"-march|-mcpu",
        # "POWER9 (architected)", and RISC-V `uarch` lines as device-tree compatibles:
        # "sifive,u74-mc" (vendor,model; Devicetree Specification v0.4, 2.3.1 "compatible")
        "names": r"[A-Za-z0-9][A-Za-z0-9 _.,()+-]{0,63}",
    },
    "gpus": {
        "key": r"[A-Za-z0-9][A-Za-z0-9 _./+-]{0,63}",  # "M40/M60", "RTX 6000"
        "compute_capability": _CAPABILITY,
    },
    "arm_parts": {
        # implementer:part as /proc/cpuinfo prints them ("0x41:0xd0c"; arm64 cputype.h)
        "key": r"0x[0-9a-fA-F]{1,4}:0x[0-9a-fA-F]{1,4}",
        "name": r"[A-Za-z0-9][A-Za-z0-9 _./+-]{0,63}",  # "Neoverse-N2", "Falkor-V1/Kryo"
    },
    "int8": {
        "flags_any": r"[a-z0-9_]{1,32}",  # kernel CPU flag names (/proc/cpuinfo)
        "routes": _NAME,
        "min_cc": _CAPABILITY,
        "device": r"cpu|gpu",
    },
    "int8_routes": {
        "tf_max": r"\d{1,3}\.\d{1,3}",
    },
    "tf_distributions": {
        "distribution": r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}",  # a PyPI project name
        "compiled_isa": r"[a-z0-9_]{1,32}",
    },
}


def _strings(value: Any) -> list[tuple[str, str]]:
    """(suffix, string) for a string field or each string of a list field."""
    if isinstance(value, str):
        return [("", value)]
    if isinstance(value, (list, tuple)):
        return [(f"[{i}]", v) for i, v in enumerate(value) if isinstance(v, str)]
    return []


def _excerpt(text: str) -> str:
    return repr(text if len(text) <= 60 else text[:60] + "...")


def validate_entry(table: str, entry: Any, where: str) -> None:
    """KnowledgeError unless every string field of `entry` (a dataclass) fits its grammar."""
    rules = {**_ANY_TABLE, **FIELDS.get(table, {})}
    for field in dataclasses.fields(entry):
        value = getattr(entry, field.name)
        if isinstance(value, tuple):  # nested entries (bazelrc_repo_env) follow the same rules
            for i, item in enumerate(value):
                if dataclasses.is_dataclass(item):
                    validate_entry(table, item, f"{where} field '{field.name}[{i}]'")
        for suffix, text in _strings(value):
            at = f"{where} field '{field.name}{suffix}'"
            if not text.isprintable() or len(text) > MAX_TEXT:
                raise KnowledgeError(
                    f"{at}: {_excerpt(text)} is not one printable line of at most "
                    f"{MAX_TEXT} characters",
                    hint="knowledge values are data: no newline, tab or control character",
                )
            pattern = rules.get(field.name)
            if pattern is not None and not re.fullmatch(pattern, text, re.ASCII):
                raise KnowledgeError(
                    f"{at}: {_excerpt(text)} is not a valid {field.name} "
                    f"(expected one token matching {pattern})"
                )
            if table == "gpus" and field.name == "patterns":
                _check_pattern(text, at)


def _check_pattern(text: str, at: str) -> None:
    # Whether it compiles is the GPU probe's business: a bad pattern there is an issue that
    # drops that entry only (probes/gpu.py).
    if len(text) > MAX_PATTERN:
        raise KnowledgeError(f"{at}: pattern longer than {MAX_PATTERN} characters")
